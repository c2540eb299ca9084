"""Build the speculative-decoding draft for SmolLM2-135M-Instruct by distillation.

    python -m mtdecode.recipes.distill data   --work WORK   # the target answers chat prompts
    python -m mtdecode.recipes.distill train  --work WORK   # a small draft learns the target's p
    python -m mtdecode.recipes.distill export --work WORK   # ship the weights in the package
    python -m mtdecode.recipes.distill evaluate             # agreement on held-out prompts, cost
    python -m mtdecode.recipes.distill all    --work WORK   # the four in a row

Every stage shows a progress bar and resumes where it stopped: `data` writes one shard
per batch and skips shards that exist; `train` checkpoints model, optimiser, step and
random state, and continues from the last checkpoint.

**Data.** The target itself answers prompts of four kinds (`KINDS`): chat
(`prompts.training_prompts()`, task templates crossed with topics), code edits, maths word
problems, and summaries of its own chat answers (the EAGLE recipe's kinds,
`mtdecode.recipes.eagle_data.task_prompts`, training split), sampled at temperature 0.8, in batches
(much faster per token than one at a time). For every answer token the target's 32 most likely
next tokens and their log-probabilities at temperature 1 are stored: the soft labels. A draft
learns only the kinds of text it is shown: distilled on chat alone, its greedy guess was the
target's on 49 % of the places of held-out chat answers and 9 % of held-out code edits
(`evaluate`), and on code its guesses were not code.

**Draft.** A Llama with the target's width and a few of its layers (copied as the
starting point), the target's embedding (frozen, shared, not shipped), and the
target's final norm. Only the copied layers and the norm are trained.

**Loss.** Cross-entropy of the draft's next-token distribution against the target's
top-32 distribution (renormalised) on every answer position: KL(p || q) up to a
constant, restricted to where p has its mass.
"""

import argparse
import json
import math
import random
import sys
import time
from pathlib import Path

import torch

TOP = 32  # soft-label width: the target's most likely next tokens kept per position


# ----------------------------------------------------------------------------- data


#: prompts per kind of the draft's data (chat first: the summaries read its answers)
KINDS = {"chat": 960, "code": 128, "math": 192, "summary": 160}


def make_data(work: Path, *, batch: int = 32, new_tokens: int = 160, temperature: float = 0.8, seed: int = 0) -> None:
    """Let the target answer every kind's training prompts (`KINDS`); store tokens and top-k log-probs, one shard
    per batch in `work/data/<kind>/`."""
    from tqdm import tqdm

    from mtdecode.recipes.eagle_data import task_prompts
    from mtdecode.zoo import load_model, load_tokenizer

    model, tokenizer = None, load_tokenizer()
    tokenizer.padding_side = "left"
    for kind, count in KINDS.items():
        shards = work / "data" / kind
        shards.mkdir(parents=True, exist_ok=True)
        chats = task_prompts(kind, count, work, held_out=False)
        batches = [chats[i : i + batch] for i in range(0, len(chats), batch)]
        todo = [i for i in range(len(batches)) if not (shards / f"{i:04d}.pt").exists()]
        if todo and model is None:
            model = load_model().hf
        for i in tqdm(todo, desc=f"data: target answers {kind}", unit="batch"):
            torch.manual_seed(seed * 100_003 + i)
            texts = [tokenizer.apply_chat_template(c, add_generation_prompt=True, tokenize=False) for c in batches[i]]
            save_answers(model, tokenizer, texts, shards / f"{i:04d}.pt", new_tokens, temperature)


def save_answers(model, tokenizer, texts: list[str], shard: Path, new_tokens: int, temperature: float) -> None:
    """The target answers `texts` (sampled); keep each sequence's tokens, where its answer starts, and the
    target's top-k next tokens with their log-probabilities at every answer position."""
    enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    with torch.no_grad():
        out = model.generate(
            **enc,
            do_sample=True,
            temperature=temperature,
            top_p=0.95,
            top_k=0,
            max_new_tokens=new_tokens,
            pad_token_id=tokenizer.pad_token_id,
            output_logits=True,
            return_dict_in_generate=True,
        )
    width = enc["input_ids"].shape[1]
    logits = torch.stack(out.logits, dim=1)  # (batch, answer, vocab), raw: temperature 1
    top = torch.log_softmax(logits.float(), dim=-1).topk(TOP, dim=-1)
    records = []
    for row in range(len(texts)):
        prompt_ids = enc["input_ids"][row][enc["attention_mask"][row].bool()].tolist()
        answer = out.sequences[row, width:].tolist()
        if tokenizer.eos_token_id in answer:  # keep up to and including the first EOS
            answer = answer[: answer.index(tokenizer.eos_token_id) + 1]
        n = len(answer)
        records.append(
            {
                "tokens": torch.tensor(prompt_ids + answer, dtype=torch.int32),
                "answer_start": len(prompt_ids),
                # soft labels for predicting answer[j] from tokens[: answer_start + j]
                "top_ids": top.indices[row, :n].to(torch.int32),
                "top_logp": top.values[row, :n].to(torch.float16),
            }
        )
    tmp = shard.with_suffix(".pt.tmp")
    torch.save(records, tmp)
    tmp.rename(shard)


def load_data(work: Path) -> list[dict]:
    """Every kind's records, in an order fixed by a seed (so that a few set aside to watch agreement mix the kinds,
    and are the same on resume)."""
    records = [r for shard in sorted((work / "data").glob("*/*.pt")) for r in torch.load(shard)]
    if not records:
        raise FileNotFoundError(f"no data in {work / 'data'}: run the 'data' stage first")
    random.Random(0).shuffle(records)
    return records


# ---------------------------------------------------------------------------- draft

DRAFT_LAYERS = (0, 1, 2, 3)  # target layers copied into the draft, in order
HEAD_TOKENS = 8192  # the draft's output layer covers this many of the most frequent tokens
STEPS = 800  # training steps of 8 answers each: about 4 passes over the data


def frequent_tokens(records: list[dict], size: int = HEAD_TOKENS) -> torch.Tensor:
    """The `size` tokens that occur most often in the data (prompts, answers and the target's top choices)."""
    counts = torch.zeros(49152, dtype=torch.long)
    for r in records:
        counts += torch.bincount(r["tokens"].long(), minlength=49152)
        counts += torch.bincount(r["top_ids"][:, 0].long(), minlength=49152)
    return counts.topk(size).indices.sort().values


def build_draft(target, head_token_ids: torch.Tensor, layers: tuple[int, ...] = DRAFT_LAYERS):
    """A draft with the target's width, embedding and final norm, copies of `layers`, and a subset head."""
    from transformers import LlamaConfig

    from mtdecode.zoo.draft import SubsetHeadLlama

    settings = {**target.config.to_dict(), "num_hidden_layers": len(layers), "tie_word_embeddings": True}
    draft = SubsetHeadLlama(LlamaConfig(**settings), head_token_ids).to(target.dtype)
    draft.model.embed_tokens.weight = target.model.embed_tokens.weight  # shared, frozen
    draft.model.norm.load_state_dict(target.model.norm.state_dict())
    for mine, theirs in zip(draft.model.layers, layers, strict=True):
        mine.load_state_dict(target.model.layers[theirs].state_dict())
    draft.tie_weights()
    draft.model.embed_tokens.weight.requires_grad_(False)
    return draft.eval()


def trainable(draft) -> list[torch.nn.Parameter]:
    return [p for n, p in draft.named_parameters() if p.requires_grad and "embed_tokens" not in n]


def soft_loss(draft, batch: list[dict]) -> tuple[torch.Tensor, torch.Tensor]:
    """Cross-entropy of the draft against the target's top-k distribution (the part inside the draft's
    head, renormalised), and the draft's top-1 agreement with the target."""
    width = max(len(r["tokens"]) for r in batch)
    ids = torch.zeros(len(batch), width, dtype=torch.long)
    attention = torch.zeros(len(batch), width, dtype=torch.long)
    rows, cols, top_ids, top_logp = [], [], [], []
    for b, r in enumerate(batch):
        n = len(r["tokens"])
        ids[b, :n] = r["tokens"].long()
        attention[b, :n] = 1
        answer = r["top_ids"].shape[0]
        rows.append(torch.full((answer,), b))
        cols.append(torch.arange(r["answer_start"] - 1, r["answer_start"] - 1 + answer))  # predicts answer[j]
        top_ids.append(r["top_ids"].long())
        top_logp.append(r["top_logp"].float())
    hidden = draft.model(input_ids=ids, attention_mask=attention).last_hidden_state  # (batch, width, dim)
    picked = hidden[torch.cat(rows), torch.cat(cols)]  # (positions, dim)
    logq = torch.log_softmax(draft.subset_logits(picked).float(), dim=-1)  # (positions, head)
    # where each vocabulary token sits in the head (-1: not in it)
    slot = torch.full((draft.config.vocab_size,), -1, dtype=torch.long)
    slot[draft.head_token_ids] = torch.arange(len(draft.head_token_ids))
    ids_k, logp_k = torch.cat(top_ids), torch.cat(top_logp)  # (positions, TOP)
    slots = slot[ids_k]
    p_k = torch.softmax(logp_k.masked_fill(slots < 0, -torch.inf), dim=-1)  # target top-k inside the head
    loss = -(p_k * logq.gather(1, slots.clamp(min=0))).nan_to_num().sum(-1).mean()
    agree = (draft.head_token_ids[logq.argmax(-1)] == ids_k[:, 0]).float().mean()
    return loss, agree


def train(work: Path, *, steps: int = STEPS, batch: int = 8, lr: float = 4e-4, seed: int = 0) -> None:
    """Train the draft on the stored soft labels; checkpoint every 25 steps and resume from the last."""
    from tqdm import tqdm

    from mtdecode.zoo import load_model

    records = load_data(work)  # shards in a fixed order: the held-out split is the same on resume
    held = records[: max(8, len(records) // 50)]  # a few answers kept aside to watch agreement
    records = records[len(held) :]
    target = load_model().hf
    draft = build_draft(target, frequent_tokens(records + held))
    params = trainable(draft)
    optimiser = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimiser, lambda s: min(1.0, (s + 1) / 30) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * s / steps)))
    )
    checkpoint = work / "checkpoint.pt"
    step = 0
    if checkpoint.exists():
        state = torch.load(checkpoint, weights_only=False)
        draft.load_state_dict(state["draft"], strict=False)
        optimiser.load_state_dict(state["optimiser"])
        schedule.load_state_dict(state["schedule"])
        step = state["step"]
        torch.set_rng_state(state["torch_rng"])
        random.setstate(state["python_rng"])
    else:
        random.seed(seed)
        torch.manual_seed(seed)
    log = (work / "train.log").open("a")
    bar = tqdm(total=steps, initial=step, desc="train: draft", unit="step")
    draft.train()
    while step < steps:
        loss, agree = soft_loss(draft, random.sample(records, batch))
        optimiser.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimiser.step()
        schedule.step()
        step += 1
        bar.update(1)
        bar.set_postfix(loss=f"{loss.item():.3f}", agree=f"{agree.item():.3f}")
        if step % 25 == 0 or step == steps:
            draft.eval()
            with torch.no_grad():
                held_loss, held_agree = soft_loss(draft, held)
            draft.train()
            print(
                json.dumps(
                    {
                        "step": step,
                        "loss": round(loss.item(), 4),
                        "held_loss": round(held_loss.item(), 4),
                        "held_top1_agreement": round(held_agree.item(), 4),
                    }
                ),
                file=log,
                flush=True,
            )
            state = {
                "draft": {
                    k: v for k, v in draft.state_dict().items() if "embed_tokens" not in k and "lm_head" not in k
                },
                "optimiser": optimiser.state_dict(),
                "schedule": schedule.state_dict(),
                "step": step,
                "torch_rng": torch.get_rng_state(),
                "python_rng": random.getstate(),
                "layers": DRAFT_LAYERS,
            }
            torch.save(state, work / "checkpoint.tmp")
            (work / "checkpoint.tmp").rename(checkpoint)
    bar.close()


# --------------------------------------------------------------------------- export


def export(work: Path, out: Path | None = None) -> Path:
    """Write the trained layers and norm (float16, without the shared embedding) into the package."""
    from safetensors.torch import save_file

    from mtdecode.zoo import DRAFT_DIR

    out = out or DRAFT_DIR
    state = torch.load(work / "checkpoint.pt", weights_only=False)
    weights = {k: (v.to(torch.float16) if v.is_floating_point() else v).contiguous() for k, v in state["draft"].items()}
    out.mkdir(parents=True, exist_ok=True)
    save_file(weights, str(out / "model.safetensors"), metadata={"format": "pt"})
    log = [json.loads(line) for line in (work / "train.log").read_text().splitlines() if line.strip()]
    meta = {
        "target": "smollm2-135m-instruct",
        "target_layers": list(state["layers"]),
        "steps": state["step"],
        "last_log": log[-1] if log else None,
        "recipe": "python -m mtdecode.recipes.distill all",
    }
    (out / "draft.json").write_text(json.dumps(meta, indent=2) + "\n")
    return out


def evaluate(prompts: int = 16, new_tokens: int = 64, timing_rounds: int = 30) -> dict:
    """Greedy top-1 agreement of the shipped draft with the target on `prompts` held-out prompts of each kind
    (chat, code edits, maths; none of them in the training data), and its cost.

    The target answers each prompt greedily; then, on prompt + answer, the draft's argmax is
    compared with the target's at every answer position (teacher forcing). Cost: one-token
    forwards of each model, interleaved, after a 64-token context.
    """
    from tqdm import tqdm

    import mtdecode
    from mtdecode.recipes.prompts import code_prompts, held_out_prompts, math_prompts
    from mtdecode.zoo import DRAFT_MODEL, load_model, load_tokenizer

    target, draft, tokenizer = load_model(), load_model(DRAFT_MODEL), load_tokenizer()
    kinds = {"chat": held_out_prompts(), "code": code_prompts(held_out=True), "math": math_prompts(prompts, True)}
    report: dict = {"greedy_top1_agreement": {}, "positions": {}}
    for kind, texts in kinds.items():
        chosen = texts[:: max(1, len(texts) // prompts)][:prompts]  # spread over the templates and topics
        agree = total = 0
        for text in tqdm(chosen, desc=f"evaluate: agreement on {kind}", unit="prompt"):
            ids = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True)
            ids = ids["input_ids"]
            agreed, places = agreement(target, draft, ids, new_tokens, tokenizer.eos_token_id)
            agree += agreed
            total += places
        report["greedy_top1_agreement"][kind] = round(agree / total, 4)
        report["positions"][kind] = total
    seconds = {"target": 0.0, "draft": 0.0}
    context = torch.randint(0, 49152, (1, 64))
    with torch.no_grad():
        for _ in tqdm(range(timing_rounds), desc="evaluate: cost", unit="round"):
            for name, model in (("target", target), ("draft", draft)):
                runner = mtdecode.Runner(model, name)
                runner.extend(context[0].tolist())
                start = time.perf_counter()
                runner.extend([5])
                seconds[name] += time.perf_counter() - start
    report |= {
        "target_ms_per_forward": round(1000 * seconds["target"] / timing_rounds, 2),
        "draft_ms_per_forward": round(1000 * seconds["draft"] / timing_rounds, 2),
        "draft_cost_relative_to_target": round(seconds["draft"] / seconds["target"], 3),
    }
    print(json.dumps(report, indent=2))
    return report


def agreement(target, draft, prompt: list[int], new_tokens: int, eos_token_id: int | None) -> tuple[int, int]:
    """Teacher forced on the target's greedy answer to `prompt` (at most `new_tokens`, up to `eos_token_id`): at how
    many of the answer's places the draft's argmax is the target's, and how many places there are."""
    import mtdecode
    from mtdecode.strategies import Autoregressive

    answer = mtdecode.generate(
        target, prompt, Autoregressive(), max_new_tokens=new_tokens, eos_token_id=eos_token_id
    ).row(0)
    sequence = torch.tensor([prompt + answer])
    with torch.no_grad():
        t = target.hf(sequence).logits[0, len(prompt) - 1 : -1].argmax(-1)
        d = draft.hf(sequence).logits[0, len(prompt) - 1 : -1].argmax(-1)
    return int((t == d).sum()), len(answer)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Distil a draft model for SmolLM2-135M-Instruct.")
    parser.add_argument("stage", choices=["data", "train", "export", "evaluate", "all"])
    parser.add_argument("--work", type=Path, default=Path("build/distill"), help="data and checkpoints go here")
    parser.add_argument("--steps", type=int, default=STEPS, help="training steps (batches of 8 answers)")
    args = parser.parse_args(argv)
    torch.set_num_threads(max(1, torch.get_num_threads()))
    started = time.time()
    if args.stage in ("data", "all"):
        make_data(args.work)
    if args.stage in ("train", "all"):
        train(args.work, steps=args.steps)
    if args.stage in ("export", "all"):
        print(f"draft written to {export(args.work)}", file=sys.stderr)
    if args.stage in ("evaluate", "all"):
        evaluate()
    print(f"done in {time.time() - started:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
