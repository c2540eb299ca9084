"""A pilot, side by side: EAGLE-1's input (the target's top feature) against EAGLE-3's (a low, a middle and a high
layer's hidden states, fused), for a head drafting for SmolLM2-135M-Instruct.

EAGLE-3 (Li et al., 2025) changes two things: the head reads a fusion of three layers' hidden states instead of
the top one, and it is trained with "training-time test" (fed its own predictions for further depths). The
second fights errors that compound with depth; `mtdecode.zoo.eagle`'s evaluation shows the head's chance of being
right at depth d, given the depths before it were, roughly flat, so the first guess is what limits it. This pilot
measures the first: heads trained from the same start on the same windows, for the same number of steps, then
scored on held-out answers (teacher forced; how often the head's first guess is the target's next token). By
default the first three of these; `--variants` picks any of them:

- `EAGLE-1`: the top feature f_t (after the final norm, what the output layer reads), EAGLE-1's loss (SmoothL1 on
  the next feature + 0.1 x cross-entropy against the target's distribution), as the shipped head;
- `EAGLE-1, token loss`: the same input, the cross-entropy alone (EAGLE-3's loss), to separate the two changes;
- `EAGLE-3 input`: g_t = W [l_t ; m_t ; h_t] (3H -> H) from the outputs of layers 2, 15 and 27 of 30, then the
  same head on g_t, the cross-entropy alone;
- `EAGLE-1, two layers`: EAGLE-1 with a second decoder layer after the first (EAGLE heads have one), to
  see whether the head's capacity limits its first guess;
- `EAGLE-1 + top-K`: EAGLE-1's loss plus HASS's top-K distillation (the cross-entropy against the target's 10
  likeliest tokens only, weight 1);
- `training-time test`: EAGLE-3's training without its fused input: the head drafts 3 depths from every position
  at once, fed its own predicted features, and each depth's cross-entropy counts with weight 0.8^(d - 1), no
  feature loss (`mtdecode.recipes.eagle_unrolled.unrolled_loss`);
- `training-time test + top-K`: the same with the top-K cross-entropy at every depth;
- `EAGLE-1 + noise`: EAGLE-1 with its paper's data augmentation, uniform noise (half-width 0.2, about a tenth of
  the features' RMS) on the features the head reads, not on those it is compared with.

Besides the first guess, every variant but the fused one is scored on held-out chains (`chain_hits`): teacher
forced up to each answer position, then fed its own features, how often its first 1, 2 and 3 guesses are all
the target's tokens.

The data are the recipe's chat, two-turn chat and question answers (`python -m mtdecode.recipes.eagle data --work
WORK`); for `EAGLE-3 input`, the three layers' states come from one target forward over each sequence. `--kinds`
trains on other kinds, such as the same three with their sampled answers too (`--sampled chat question
conversation` in the recipe's data stage; `--kinds chat question conversation chat-sampled question-sampled
conversation-sampled`): the held-out answers are always those of the greedy kinds, and the head scores the
tokens most frequent in the greedy answers, so that runs with and without sampled answers compare.

    python benchmarks/eagle3_pilot.py --work build/eagle [--steps 800] [--variants "EAGLE-1" "EAGLE-1, two layers"]
"""

import argparse
import time

import torch
from torch import nn
from transformers.models.llama.modeling_llama import LlamaDecoderLayer

import mtdecode
from mtdecode.recipes.eagle import build_head, eagle_loss, first_guess_hits, learning_rate, random_windows, token_loss
from mtdecode.recipes.eagle_data import TASK_PROMPTS, load_records, sampled_kind, with_features
from mtdecode.recipes.eagle_unrolled import chain_hits, distill_loss, unrolled_loss
from mtdecode.zoo.eagle import EagleHead

KINDS = ["chat", "conversation", "question"]
LAYERS = (2, 15, 27)  # outputs of these layers (hidden_states[i] is layer i's output; 0 is the embedding)
VARIANTS = ("EAGLE-1", "EAGLE-1, token loss", "EAGLE-3 input", "EAGLE-1, two layers", "EAGLE-1 + top-K",
            "training-time test", "training-time test + top-K", "EAGLE-1 + noise")
TOP_K = 10  # HASS's K: the target's likeliest tokens that the top-K loss distils
TOP_K_WEIGHT = 1.0  # the top-K loss's weight beside EAGLE-1's
NOISE = 0.2  # EAGLE-1's uniform feature noise, half-width: about a tenth of SmolLM2's feature RMS (1.9)
DEPTHS = 3  # depths unrolled by training-time test (HASS aligns 3 draft steps), and scored on held-out chains


class FusedHead(nn.Module):
    """EAGLE-3's input: three layers' hidden states fused into one H-wide vector, then an `EagleHead` on it."""

    def __init__(self, head: EagleHead) -> None:
        super().__init__()
        hidden = head.embedding.shape[1]
        self.reduce = nn.Linear(len(LAYERS) * hidden, hidden, bias=False)
        self.head = head

    def forward(self, states, next_tokens, positions):
        return self.head(self.reduce(states), next_tokens, positions)


class TwoLayers(nn.Module):
    """The head's decoder layer followed by a second one of the same shape, called as the one layer is (training
    only: no cache)."""

    def __init__(self, first: LlamaDecoderLayer) -> None:
        super().__init__()
        self.first, self.second = first, LlamaDecoderLayer(first.self_attn.config, layer_idx=1)

    def forward(self, hidden, **kwargs):
        out = self.first(hidden, **kwargs)
        return self.second(out[0] if isinstance(out, tuple) else out, **kwargs)


def with_layers(target, records: list[dict]) -> list[dict]:
    """Each record with `states`: the outputs of `LAYERS`, concatenated, `(tokens, 3 hidden)`, in float16."""
    out = []
    with torch.no_grad():
        for r in records:
            hidden = target(r["tokens"][None], output_hidden_states=True).hidden_states
            out.append({**r, "states": torch.cat([hidden[i][0] for i in LAYERS], dim=-1).half()})
    return out


def loss(variant: str, model: nn.Module, batch: dict, noise: torch.Generator) -> torch.Tensor:
    features, tokens = batch["features"], batch["tokens"]
    positions = torch.arange(tokens.shape[1] - 1).expand(tokens.shape[0], -1)
    if variant in ("EAGLE-1", "EAGLE-1, two layers"):
        return eagle_loss(model, features, tokens)[0]
    if variant == "EAGLE-1 + noise":
        return eagle_loss(model, features, tokens, NOISE, noise)[0]
    if variant == "EAGLE-1, token loss":
        return token_loss(model, model(features[:, :-1], tokens[:, 1:], positions), features)
    if variant == "EAGLE-1 + top-K":
        predicted = model(features[:, :-1], tokens[:, 1:], positions)
        return eagle_loss(model, features, tokens)[0] + TOP_K_WEIGHT * distill_loss(
            model, predicted, features[:, 1:], TOP_K
        )
    if variant.startswith("training-time test"):
        return unrolled_loss(model, features, tokens, DEPTHS, TOP_K if variant.endswith("top-K") else None)
    predicted = model(batch["states"][:, :-1], tokens[:, 1:], positions)
    return token_loss(model.head, predicted, features)


def first_guess(variant: str, model: nn.Module, records: list[dict]) -> tuple[int, int]:
    """Held-out answers, teacher forced: (positions where the first guess is the target's token, positions)."""
    head = model.head if isinstance(model, FusedHead) else model
    hits = count = 0
    with torch.no_grad():
        for r in records:
            inputs = r["states" if variant == "EAGLE-3 input" else "features"][None].float()
            tokens, n = r["tokens"][None], r["tokens"].shape[0]
            predicted = model(inputs[:, :-1], tokens[:, 1:], torch.arange(n - 1)[None])
            right, positions = first_guess_hits(head, predicted, r)
            hits, count = hits + right, count + positions
    return hits, count


def chains(model: nn.Module, records: list[dict]) -> list[float]:
    """Held-out answers, teacher forced up to each position, then the head's own features (`unrolled`): the share of
    positions where the first d guesses are all right, d = 1..`DEPTHS`."""
    hits, count = torch.zeros(DEPTHS, dtype=torch.long), 0
    for r in records:
        right, positions = chain_hits(model, r, DEPTHS)
        hits, count = hits + right, count + positions
    return (hits / count).tolist()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", required=True, help="the recipe's work folder, with its data and held-out data")
    parser.add_argument("--steps", type=int, default=800)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--window", type=int, default=256)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=VARIANTS[:3])
    parser.add_argument("--kinds", nargs="+", default=KINDS, help="the data kinds to train on; a kind's sampled "
                        "answers are KIND-sampled (the held-out answers are always the greedy kinds')")  # fmt: skip
    args = parser.parse_args()
    if min(args.steps, args.batch, args.window) < 1:
        parser.error("--steps, --batch and --window must be at least 1")
    target = mtdecode.load_model().hf
    start = time.perf_counter()
    sampled = {sampled_kind(kind) for kind in TASK_PROMPTS}
    greedy_kinds = [kind for kind in args.kinds if kind not in sampled]
    by_kind = {kind: with_features(load_records(args.work, kind), target) for kind in args.kinds}
    records = [r for kind in args.kinds for r in by_kind[kind]]
    held_out = with_features([r for kind in greedy_kinds for r in load_records(args.work, kind, held_out=True)], target)
    fused = "EAGLE-3 input" in args.variants
    if fused:  # only this variant reads the three layers
        records, held_out = with_layers(target, records), with_layers(target, held_out)
    tokens = sum(len(r["tokens"]) for r in records)
    print(f"{len(records)} training sequences ({tokens} tokens), {len(held_out)} held out"
          f"{f', layers {LAYERS}' if fused else ''}: "
          f"{time.perf_counter() - start:.0f} s", flush=True)  # fmt: skip
    # the greedy answers' most frequent tokens, so that runs with and without sampled answers score the same tokens
    head_tokens = build_head(target, [r for kind in greedy_kinds for r in by_kind[kind]]).head_token_ids
    for variant in args.variants:
        torch.manual_seed(0)  # the same start for the shared head
        model = build_head(target, records, head_tokens)
        if variant == "EAGLE-3 input":
            model = FusedHead(model)
        if variant == "EAGLE-1, two layers":
            model.layer = TwoLayers(model.layer)
        optimiser = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=args.lr)
        generator = torch.Generator().manual_seed(0)  # the same windows for every variant
        noise = torch.Generator().manual_seed(1)  # the noise's own draws, so the windows stay the same
        start = time.perf_counter()
        for step in range(args.steps):
            windows = random_windows(records, args.batch, args.window, generator)
            keys = ("features", "tokens", "states") if fused else ("features", "tokens")
            batch = {key: torch.stack([r[key][a:b] for r, a, b in windows]) for key in keys}
            batch = {key: value.float() if value.is_floating_point() else value for key, value in batch.items()}
            for group in optimiser.param_groups:  # the recipe's schedule
                group["lr"] = learning_rate(args.lr, step, args.steps)
            value = loss(variant, model, batch, noise)
            optimiser.zero_grad()
            value.backward()
            optimiser.step()
        seconds = time.perf_counter() - start
        hits, count = first_guess(variant, model, held_out)
        deeper = "" if isinstance(model, FusedHead) else "; all right to depth 1..{}: {}".format(
            DEPTHS, " / ".join(f"{share:.1%}" for share in chains(model, held_out))
        )
        print(f"  {variant:26s} held-out first guess {hits / count:.1%} ({hits}/{count}){deeper}; "
              f"last loss {float(value.detach()):.3f}; {args.steps} steps in {seconds:.0f} s", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
