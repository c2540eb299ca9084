"""The training recipe of the EAGLE-1 style head (`mtdecode.zoo.eagle.EagleHead`): the target's own answers and
features as data, the training loop, export into the package, and held-out evaluation (`--model` trains a head for
a target of your own; the shipped head is the default model's).

Training (`eagle_loss`) follows the paper: SmoothL1 between f'_{t+1} and the target's
f_{t+1}, plus 0.1 times the cross-entropy of the head's distribution against the target's own
next-token distribution (renormalised over the head's tokens).

**Why EAGLE-1's single top-layer feature, not EAGLE-3's fused low/mid/high features with
training-time test.** Training-time test fights errors that compound with draft depth, but the
head's chance of being right at depth d, given depths 1..d-1 were right, hardly falls with d
(`evaluate`; in the first pilot, 192 chat prompts and 600 steps: 44.0%, 42.5%, 40.6%): the
first guess is the limit. For the first guess, `benchmarks/eagle3_pilot.py` trained three heads
from the same start on the same windows of the chat, two-turn chat and question answers (896
sequences, 800 steps each) and scored them on 56 held-out sequences (5,812 answer positions):
EAGLE-1 as shipped 43.7%; the same input with EAGLE-3's loss (the cross-entropy alone) 42.7%;
EAGLE-3's input (layers 2, 15 and 27 fused, 3H -> H) with that loss 43.2%. The fused input
gained 0.5 points over the top feature under the same loss, within a pilot's noise, and EAGLE-1's
loss did best; the fusion would cost a 3H -> H product for every committed token and three
hidden states from every verifying forward. So the head stays EAGLE-1. It keeps one decoder
layer: in the same pilot a second layer gave 44.6% against 43.7%, for a second layer's forward
in every head forward. A second pilot tried training-time test (`unrolled_loss`) and HASS's top-K
distillation (`distill_loss`) at the same scale: neither beat EAGLE-1's first guess, though
training-time test made deeper guesses likelier once the first was right (docs/strategies/eagle.md); their
losses are in `mtdecode.recipes.eagle_unrolled`.

The recipe, resumable at every stage:

    python -m mtdecode.recipes.eagle data       --work WORK   # the target's answers and text to read, as token ids
    python -m mtdecode.recipes.eagle pack       --work WORK   # that data into the package (eagle_data.PACKED)
    python -m mtdecode.recipes.eagle features   --work WORK   # the target's features along it, kept in WORK
    python -m mtdecode.recipes.eagle train      --work WORK   # AdamW, TRAIN_STEPS steps; checkpoints, resumed from
    python -m mtdecode.recipes.eagle checkpoint --work WORK   # the trained head into the package (CHECKPOINT)
    python -m mtdecode.recipes.eagle export     --work WORK   # into the package, float16
    python -m mtdecode.recipes.eagle evaluate   --work WORK   # held-out acceptance by depth and task
    python -m mtdecode.recipes.eagle all        --work WORK   # data, train, export, evaluate

`features`, `train` and `evaluate` read the work folder's data, or the packed data when the folder has none, and
compute the target's features along it once (`eagle_data.with_features`, kept in `WORK/features`). `train`
resumes from the work folder's checkpoint, or from the committed one (`CHECKPOINT`) on a machine that has none;
`--until STEP` ends a run early on the same schedule, so that a long training can be run, and committed, in parts.

The shipped head was made in stages, each resuming from the last checkpoint (times on a 2-core CPU, as
`docs/strategies/eagle.md` gives them):

- the target answered 896 prompts (384 chat, 128 code, 192 math, 192 summaries; 161,623 tokens, 93,316 of
  them answers) in about 27 min; 6,000 steps on them took about 42 min (3.4 steps/s when alone);
- it read 1,600 windows of 256 tokens of installed packages' code and docstrings (11 min); 1,525 more steps;
- round 2 (about 12 min): 64 everyday questions, 192 two-turn chats that follow up its answers, 48 passages it
  wrote and 144 summaries and extractions of them (98,881 tokens, 46,105 of them answers); 2,975 more steps
  (about 22 min), 10,500 in all.

On held-out answers (other topics, code, numbers, questions, passages; teacher forced) the templated kinds were
learned best: after step 6,000 the first guess was right 57.2% of the time on chat, 42.2% on code, 86.6% on
math and 56.3% on summaries, against 92-94% on its training answers, hence the packages' text and round 2.
Round 2 moved the first guess on the held-out two-turn chats from 37.1% to 42.6% and on extractions from 38.1%
to 47.1%. `evaluate` gives acceptance by draft depth and kind (docs/strategies/eagle.md has the table);
`benchmarks/eagle_costs.py` gives it on the benchmark's prompts.

The committed checkpoint (`CHECKPOINT`) is a second head, trained by the recipe as it is now from the packed data
(10,000 steps, 1 h 5 min). Held out, its first guess is right 56.9% of the time against the shipped head's 54.4%,
but in a full `mtdecode bench --eagle-head` it was level with the shipped head (2.56 against 2.55 tokens per target
forward over all tasks, behind on code), so the shipped head stays (docs/strategies/eagle.md).
"""

import math
from pathlib import Path

import torch
import torch.nn.functional as F

from mtdecode.recipes.eagle_data import (
    DEFAULT_TARGET,
    HEAD_TOKENS,
    NEW_TOKENS,
    PACKED,
    TASK_PROMPTS,
    TEXT_CHUNKS,
    load_records,
    make_data,
    make_text_data,
    pack,
    with_features,
)
from mtdecode.tensor_types import Float, Int, Tensor
from mtdecode.zoo.eagle import EagleHead

#: weight of the token loss against the feature loss (EAGLE-1)
TOKEN_LOSS_WEIGHT = 0.1
#: the training's length: the cosine schedule runs over this many steps of 8 windows of 256 tokens
TRAIN_STEPS = 10000
#: the head as the last training run that ended left it (the default target's), from which the next run starts
CHECKPOINT = PACKED.with_name("eagle-smollm2-135m-checkpoint.safetensors")


def eagle_loss(
    head: EagleHead,
    features: Float[Tensor, "batch seq hidden"],
    tokens: Int[Tensor, "batch seq"],
    noise: float = 0.0,
    generator: torch.Generator | None = None,
) -> tuple[Float[Tensor, ""], Float[Tensor, ""], Float[Tensor, ""]]:
    """The training loss on one batch of the target's own forward: `features[:, t]` is the target's feature at
    position t, `tokens[:, t]` the token there. Position t's input is (f_t, x_{t+1}); its outputs are compared with
    f_{t+1} and with the target's distribution for x_{t+2}, which is the target's output layer on f_{t+1}
    restricted to the head's tokens (the output layer is linear without a bias, as in Llama-family models).

    `noise`: EAGLE-1's data augmentation, uniform noise in (-noise, noise) (drawn from `generator`) added to the
    features the head reads, not to those its outputs are compared with: the head learns to draft from features a
    little off the target's, as its own are when it drafts deeper.

    **Returns:** the total loss, the feature loss (SmoothL1) and the token loss (cross-entropy), each a mean.

    **Raises:** `ValueError` if `noise` is negative.
    """
    if noise < 0:
        raise ValueError(f"noise is the half-width of the uniform noise on the features, at least 0; got {noise}")
    seq = tokens.shape[1]
    positions = torch.arange(seq - 1, device=tokens.device).expand(tokens.shape[0], -1)
    inputs = features[:, :-1]
    if noise:
        uniform = torch.rand(inputs.shape, generator=generator, device=inputs.device, dtype=inputs.dtype)
        inputs = inputs + noise * (2 * uniform - 1)
    predicted = head(inputs, tokens[:, 1:], positions)  # f'_{t+1}, (batch, seq - 1, hidden)
    feature_loss = F.smooth_l1_loss(predicted, features[:, 1:])
    tokens_loss = token_loss(head, predicted, features)
    return feature_loss + TOKEN_LOSS_WEIGHT * tokens_loss, feature_loss, tokens_loss


def token_loss(
    head: EagleHead, predicted: Float[Tensor, "batch seq_1 hidden"], features: Float[Tensor, "batch seq hidden"]
) -> Float[Tensor, ""]:
    """The cross-entropy of the head's distribution (from its `predicted` features f'_{t+1}) against the target's
    own for x_{t+2}, its output layer on f_{t+1} restricted to the head's tokens; a mean over positions."""
    p = torch.softmax(head.logits(features[:, 1:]).float(), dim=-1)  # the target's, on the head's tokens
    log_q = torch.log_softmax(head.logits(predicted).float(), dim=-1)
    return -(p * log_q).sum(-1).mean()



def build_head(target, records: list[dict], head_tokens: Int[Tensor, " head"] | None = None) -> EagleHead:
    """A head for `target` scoring `head_tokens`, by default the `HEAD_TOKENS` tokens most frequent in the data."""
    if head_tokens is None:
        counts = torch.zeros(target.config.vocab_size, dtype=torch.long)
        for r in records:
            counts += torch.bincount(r["tokens"], minlength=target.config.vocab_size)
        head_tokens = counts.topk(min(HEAD_TOKENS, target.config.vocab_size)).indices.sort().values
    embedding, output = target.get_input_embeddings().weight, target.get_output_embeddings().weight
    return EagleHead(target.config, embedding.float(), output.float(), head_tokens)


def train(work, *, steps: int = TRAIN_STEPS, until: int | None = None, batch: int = 8, window: int = 256,
          lr: float = 1e-3, seed: int = 0, model: str | None = None) -> None:  # fmt: skip
    """AdamW on `eagle_loss` over random windows of the data (every task kind), the learning rate warming up over
    the first 100 steps and then falling along a cosine over `steps` to a tenth; this run stops at step `until`
    (default: `steps`). A checkpoint every 25 steps in the work folder, resumed from; without one, the run starts
    from the committed checkpoint (`CHECKPOINT`, default target only) if there is one, with a fresh optimiser
    that warms up again over 100 steps. The target's features are kept in the work folder (`with_features`)."""
    import json

    from tqdm import tqdm

    from mtdecode.bench import hold_freed_memory
    from mtdecode.zoo import load_model

    work = Path(work)
    until = steps if until is None else min(until, steps)
    hold_freed_memory(every_size=True)  # each step's 67 MB of scores reuse the last step's pages (about 10 % faster)
    target = load_model(model or DEFAULT_TARGET).hf
    packed = PACKED if model is None else None  # the packed data is the default target's tokens
    records = load_records(work, packed=packed)
    torch.manual_seed(seed)
    head, optimiser, start, warm_from = resume(work, target, records, lr, packed is not None, steps)
    if start >= until:
        print(f"train: the head is at step {start} already, nothing to do up to step {until}")
        return
    records = with_features(records, target, cache=work / "features")
    held_out = with_features(load_records(work, held_out=True, packed=packed), target, cache=work / "features")
    generator = torch.Generator().manual_seed(seed + start)
    with (work / "eagle_train.log").open("a") as log:
        for step in tqdm(range(start, until), desc="train: eagle head", unit="step", initial=start, total=until):
            windows = random_windows(records, batch, window, generator)
            features = torch.stack([r["features"][a:b] for r, a, b in windows]).float()
            tokens = torch.stack([r["tokens"][a:b] for r, a, b in windows])
            for group in optimiser.param_groups:
                group["lr"] = learning_rate(lr, step, steps, warm_from)
            loss, feature_loss, token_loss = eagle_loss(head, features, tokens)
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            log.write(json.dumps({"step": step + 1, "loss": loss.item(), "feature": feature_loss.item(),
                                  "token": token_loss.item()}) + "\n")  # fmt: skip
            if (step + 1) % 25 == 0 or step + 1 == until:
                state = {"head": head.state_dict(), "optimiser": optimiser.state_dict(), "step": step + 1,
                         "steps": steps, "warm_from": warm_from}  # fmt: skip
                torch.save(state, work / "eagle.tmp")
                (work / "eagle.tmp").replace(work / "eagle.pt")
            if (step + 1) % 1000 == 0 or step + 1 == until:
                log.write(json.dumps({"step": step + 1, "held_out": held_out_scores(head, held_out)}) + "\n")
                log.flush()


def resume(work: Path, target, records: list[dict], lr: float, committed: bool, steps: int) -> tuple:
    """The head, its optimiser, the step to start from and the step the learning rate last warmed up from: from the
    last checkpoint (`latest`), else new. From the committed checkpoint the optimiser is a fresh one, warmed up again.

    **Raises:** `ValueError` if the checkpoint was trained on a schedule of other than `steps` steps (continued, its
    learning rate would jump onto another cosine)."""
    found = latest(work, committed)
    if found is None:
        head = build_head(target, records)
        return head, torch.optim.AdamW(head.parameters(), lr=lr), 0, 0
    same_schedule(found["steps"], steps, found["path"])
    head = build_head(target, records, found["head"]["head_token_ids"])  # its tokens, whatever data came since
    head.load_state_dict(found["head"])
    optimiser = torch.optim.AdamW(head.parameters(), lr=lr)
    if "optimiser" in found:  # the work folder's own checkpoint
        optimiser.load_state_dict(found["optimiser"])
        return head, optimiser, found["step"], found.get("warm_from", 0)
    print(f"train: from the committed checkpoint at step {found['step']} ({found['path'].name})")
    return head, optimiser, found["step"], found["step"]


def latest(work, committed: bool) -> dict | None:
    """The last checkpoint, as a dict with `head` (its state), `step`, `steps` (the schedule's length) and `path`: the
    work folder's (`eagle.pt`, with `optimiser` and `warm_from` too), else (`committed`: the default target) the
    committed one (`CHECKPOINT`), else None."""
    checkpoint = Path(work) / "eagle.pt"
    if checkpoint.exists():
        return {**torch.load(checkpoint, weights_only=False), "path": checkpoint}
    if committed and CHECKPOINT.exists():
        weights, step, steps = load_checkpoint()
        return {"head": weights, "step": step, "steps": steps, "path": CHECKPOINT}
    return None


def same_schedule(made: int, asked: int, checkpoint: Path) -> None:
    """Refuse to continue a checkpoint on a schedule of another length."""
    if made != asked:
        raise ValueError(f"{checkpoint} was trained on a schedule of {made} steps, not {asked}: continue it with "
                         f"--steps {made}, or train in another work folder")  # fmt: skip


def commit_checkpoint(work, path: Path | None = None) -> Path:
    """The work folder's trained head, float32, without the target's rows or the optimiser, into `path` (default
    `CHECKPOINT`): one head-sized file that the next `train` run starts from on another machine."""
    from safetensors.torch import save_file

    path = Path(path or CHECKPOINT)
    state = torch.load(Path(work) / "eagle.pt", weights_only=False)
    weights = {k: v.contiguous() for k, v in state["head"].items()}  # the target's rows are not in a state dict
    save_file(weights, str(path), metadata={"step": str(state["step"]), "steps": str(state["steps"])})
    return path


def load_checkpoint(path: Path | None = None) -> tuple[dict, int, int]:
    """The committed checkpoint's weights, the step it was written at and its schedule's length."""
    from safetensors import safe_open
    from safetensors.torch import load_file

    path = Path(path or CHECKPOINT)
    with safe_open(str(path), "pt") as f:
        step, steps = int(f.metadata()["step"]), int(f.metadata()["steps"])
    return load_file(str(path)), step, steps


def random_windows(records: list[dict], batch: int, window: int, generator: torch.Generator) -> list[tuple]:
    """`batch` random windows `(record, start, end)` of one length: `window` tokens, or the shortest chosen record's."""
    chosen = torch.randint(0, len(records), (batch,), generator=generator).tolist()
    length = min(window, *(len(records[i]["tokens"]) for i in chosen))
    starts = [int(torch.randint(0, len(records[i]["tokens"]) - length + 1, (1,), generator=generator))
              for i in chosen]  # fmt: skip
    return [(records[i], a, a + length) for i, a in zip(chosen, starts, strict=True)]


def learning_rate(lr: float, step: int, steps: int, warm_from: int = 0) -> float:
    """The recipe's schedule: a warm-up over the 100 steps after `warm_from` (0, or where a run started with a
    fresh optimiser), then a cosine over all `steps` from `lr` down to `lr` / 10."""
    return lr * min(1.0, (step + 1 - warm_from) / 100) * (0.55 + 0.45 * math.cos(math.pi * step / steps))


def first_guess_hits(head: EagleHead, predicted: Float[Tensor, "1 seq_1 hidden"], record: dict) -> tuple[int, int]:
    """Teacher forced over one record: at how many answer positions the head's first guess (from `predicted`,
    f'_{t+1} for every t) is the target's token x_{t+2}, and how many answer positions there are."""
    tokens, n = record["tokens"], record["tokens"].shape[0]
    guess = head.head_token_ids[head.logits(predicted[0, :-1]).argmax(-1)]  # x_{t+2}
    answer = torch.arange(n - 2) + 2 >= record["answer_start"]
    return int(((guess == tokens[2:]) & answer).sum()), int(answer.sum())


def held_out_scores(head: EagleHead, records: list[dict]) -> dict:
    """On held-out sequences, teacher forced (the target's real features): the mean loss, and how often the head's
    first guess is the target's next answer token (depth-1 acceptance), one forward per sequence."""
    losses, hits, count = [], 0, 0
    with torch.no_grad():
        for r in records:
            features, tokens = r["features"][None].float(), r["tokens"][None]
            losses.append(float(eagle_loss(head, features, tokens)[0]))
            n = tokens.shape[1]
            predicted = head(features[:, :-1], tokens[:, 1:], torch.arange(n - 1)[None])  # f'_{t+1}
            right, positions = first_guess_hits(head, predicted, r)
            hits, count = hits + right, count + positions
    return {"loss": round(sum(losses) / len(losses), 4), "first_guess": round(hits / count, 4)}


def export(work, folder: Path | None = None, *, committed: bool = True) -> Path:
    """Write the trained head (`trained`) to `folder` (default: into the package, `weights/smollm2-135m-eagle`), in
    float16: its fuse, layer and norm weights and its token list; the embedding and output rows are the target's
    and are not shipped. `load_head(target, folder)` reads it back."""
    import json

    from safetensors.torch import save_file

    from mtdecode.zoo import EAGLE_DIR

    folder = Path(folder or EAGLE_DIR)
    state, step = trained(work, committed=committed)
    weights = {k: v.half() if v.is_floating_point() else v for k, v in state.items()}
    folder.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in weights.items()}, str(folder / "head.safetensors"))
    (folder / "eagle.json").write_text(json.dumps({"steps": step, "head_tokens": HEAD_TOKENS}) + "\n")
    return folder / "head.safetensors"


def trained(work, *, committed: bool = True) -> tuple[dict, int]:
    """The trained head's state and its step, from the last checkpoint (`latest`). **Raises:** `FileNotFoundError`
    if there is none."""
    found = latest(work, committed)
    if found is None:
        where = Path(work) / "eagle.pt"
        raise FileNotFoundError(f"no trained head in {where}" + (f" nor {CHECKPOINT}" if committed else "") +
                                ": run the 'train' stage first")  # fmt: skip
    return found["head"], found["step"]


def evaluate(work, *, depths: int = 4, sequences: int = 8, head: EagleHead | None = None,
             model: str | None = None, name: str = "evaluate") -> dict:  # fmt: skip
    """Per task kind of the held-out data: the head's first guess over every sequence, teacher forced
    (`held_out_scores`), and the greedy acceptance of a chain it drafts on the first `sequences` (teacher forcing
    up to each position t, then the head's own features and tokens): the share of answer positions where the first
    d drafted tokens all equal the target's tokens, for d = 1..`depths`. `head`: the trained one (`trained`) by
    default. Printed, and written to `work / f"{name}.json"`."""
    import json

    from tqdm import tqdm

    from mtdecode.zoo import load_model

    work = Path(work)
    target = load_model(model or DEFAULT_TARGET).hf
    packed = PACKED if model is None else None
    if head is None:
        state, _ = trained(work, committed=packed is not None)
        head = build_head(target, [], state["head_token_ids"])
        head.load_state_dict(state)
    report = {}
    for kind in tqdm(TASK_PROMPTS, desc="evaluate: held-out chains by task kind", unit="kind"):
        held_out = with_features(load_records(work, kind, held_out=True, packed=packed), target,
                                 cache=work / "features")  # fmt: skip
        scores = held_out_scores(head, held_out)
        hits, positions = torch.zeros(depths), 0
        with torch.no_grad():
            for r in held_out[:sequences]:
                tokens, features = r["tokens"], r["features"].float()
                for t in range(r["answer_start"] - 1, len(tokens) - depths - 1):  # f_t known, x_{t+1} the next token
                    feats, toks = features[: t + 1], tokens[1 : t + 2]
                    ok = True
                    for d in range(depths):
                        predicted = head(feats[None], toks[None], torch.arange(len(toks))[None])[0, -1]  # f'_{t+1+d}
                        guess = head.head_token_ids[head.logits(predicted).argmax()]
                        ok = ok and bool(guess == tokens[t + 2 + d])
                        hits[d] += ok
                        feats, toks = torch.cat([feats, predicted[None]]), torch.cat([toks, guess[None]])
                    positions += 1
        report[kind] = {"sequences": len(held_out), "first_guess_teacher_forced": scores["first_guess"],
                        "positions": positions,
                        **{f"accepted_to_depth_{d + 1}": round(float(hits[d]) / positions, 4) for d in range(depths)},
                        "tokens_per_forward_chain": round(1 + float(hits.sum()) / positions, 3)}  # fmt: skip
    print(json.dumps(report, indent=2))
    (work / f"{name}.json").write_text(json.dumps(report, indent=2) + "\n")
    return report


def main(argv: list[str] | None = None) -> None:
    """`python -m mtdecode.recipes.eagle STAGE --work DIR [--model NAME_OR_FOLDER] [--scale S] [--sampled KIND ...]
    [--out FOLDER]`."""
    import argparse
    import sys

    from mtdecode.zoo import load_model

    parser = argparse.ArgumentParser(description="Train an EAGLE-style draft head (by default for SmolLM2-135M).")
    parser.add_argument("stage", choices=["data", "pack", "features", "train", "checkpoint", "export", "evaluate",
                                          "all"])  # fmt: skip
    parser.add_argument("--work", type=Path, default=Path("build/eagle"), help="data and checkpoints go here")
    parser.add_argument("--model", default=None, help="the target: the embedded model (default) or a local folder "
                        "of any supported family, with its tokenizer and chat template")  # fmt: skip
    parser.add_argument("--scale", type=float, default=1.0, help="a share of the recipe's prompts and text (a smoke "
                        "test: 0.01)")  # fmt: skip
    parser.add_argument("--new-tokens", type=int, default=None, help="tokens per answer (default 128, passages 160)")
    parser.add_argument("--sampled", nargs="+", default=[], choices=list(TASK_PROMPTS), metavar="KIND",
                        help="also answer these kinds' training prompts by sampling at temperature 1 (kept as "
                        "KIND-sampled beside the greedy answers; none by default)")  # fmt: skip
    parser.add_argument("--steps", type=int, default=TRAIN_STEPS, help="the schedule's length")
    parser.add_argument("--until", type=int, default=None, help="stop this run at this step (default: --steps)")
    parser.add_argument("--window", type=int, default=256, help="tokens per training window")
    parser.add_argument("--sequences", type=int, default=8, help="held-out sequences per task kind to evaluate")
    parser.add_argument("--out", type=Path, default=None, help="export here (default: into the package, for the "
                        "default model only)")  # fmt: skip
    parser.add_argument("--head", type=Path, default=None, help="evaluate: the head exported in this folder instead "
                        "of the work folder's (e.g. the shipped one, mtdecode/zoo/weights/smollm2-135m-eagle)")
    args = parser.parse_args(argv)
    if args.model is not None and args.out is None and args.stage in ("export", "checkpoint", "all"):
        parser.error("--model needs --out: the package holds the default model's head only")

    def scaled(count: int) -> int:
        return max(1, round(count * args.scale))

    if args.stage in ("data", "all"):
        args.work.mkdir(parents=True, exist_ok=True)
        words = argv if argv is not None else sys.argv[1:]
        (args.work / "command").write_text("python -m mtdecode.recipes.eagle " + " ".join(words) + "\n")
        for kind, (count, held_out_count) in TASK_PROMPTS.items():  # chat first: summaries read its answers
            new_tokens = args.new_tokens or NEW_TOKENS.get(kind, 128)
            settings = dict(new_tokens=new_tokens, model=args.model)
            make_data(args.work, kind, prompts=scaled(count), **settings)
            make_data(args.work, kind, held_out=True, prompts=scaled(held_out_count), **settings)
        for kind in args.sampled:  # the same training prompts, answered by the target's own draws
            new_tokens = args.new_tokens or NEW_TOKENS.get(kind, 128)
            make_data(args.work, kind, prompts=scaled(TASK_PROMPTS[kind][0]), new_tokens=new_tokens,
                      model=args.model, sampled=True)  # fmt: skip
        for kind, count in TEXT_CHUNKS.items():
            make_text_data(args.work, kind, chunks=scaled(count), model=args.model)
    if args.stage == "pack":  # not part of "all": it writes into the package
        made = args.work / "command"
        command = made.read_text().strip() if made.exists() else "unknown"
        print(f"packed {pack(args.work, args.out or PACKED, command=command)}")
    if args.stage == "features":  # train computes them too; this stage alone says how long they take
        target = load_model(args.model or DEFAULT_TARGET).hf
        packed = PACKED if args.model is None else None
        for held_out in (False, True):
            records = load_records(args.work, held_out=held_out, packed=packed)
            with_features(records, target, cache=args.work / "features")
    if args.stage in ("train", "all"):
        train(args.work, steps=args.steps, until=args.until, window=args.window, model=args.model)
    if args.stage == "checkpoint":  # not part of "all": it writes into the package
        print(f"committed {commit_checkpoint(args.work, args.out)}")
    if args.stage in ("export", "all"):
        print(f"exported {export(args.work, args.out, committed=args.model is None)}")
    if args.stage in ("evaluate", "all"):
        head, name = None, "evaluate"
        if args.head is not None:
            from mtdecode.zoo.eagle import load_head

            head, name = load_head(load_model(args.model or DEFAULT_TARGET).hf, args.head), f"evaluate-{args.head.name}"
        evaluate(args.work, sequences=args.sequences, model=args.model, head=head, name=name)


if __name__ == "__main__":
    main()
