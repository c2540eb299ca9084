"""The EAGLE recipe's data stage, as it was and as it is, side by side on the same prompts.

    python benchmarks/eagle_data_speed.py [--prompts 64] [--new-tokens 128]

Both answer the first `--prompts` training chat prompts greedily with the default target and end with the
target's features along every sequence:

- **before**: batches of 16 prompts, then one forward per sequence for its features (the data stage kept them);
- **after**: batches of `DATA_BATCH` prompts, then `with_features`, one forward per 16 sequences of similar length
  (the data stage keeps tokens only; training and evaluation compute the features).

It prints each part's seconds, measured in one run, and the ratios; the two must give the same tokens.
"""

import argparse
import time

import torch

from mtdecode import KVCache, masks
from mtdecode.recipes.eagle_data import (
    DATA_BATCH,
    DEFAULT_TARGET,
    _tokenizer,
    answer_batch,
    task_prompts,
    with_features,
)
from mtdecode.zoo import load_model


def answers(target, tokenizer, chats: list, batch: int, new_tokens: int) -> list[torch.Tensor]:
    """Each prompt with its greedy answer, `batch` prompts per `generate` (the data stage's `answer_batch`)."""
    batches = [chats[i : i + batch] for i in range(0, len(chats), batch)]
    return [record["tokens"] for chunk in batches for record in answer_batch(target, tokenizer, chunk, new_tokens)]


def one_by_one(target, sequences: list[torch.Tensor]) -> list[torch.Tensor]:
    """The features of each sequence by a forward of its own (the data stage as it was)."""
    found = []
    with torch.no_grad():
        for tokens in sequences:
            n = len(tokens)
            mask = masks.causal(n, 0)[None, None]
            _, features = target.forward_features(tokens[None], torch.arange(n)[None], mask, KVCache())
            found.append(features[0].half())
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=128)
    args = parser.parse_args()
    target, tokenizer = load_model(DEFAULT_TARGET), _tokenizer(None)
    chats = task_prompts("chat", args.prompts, None, held_out=False)
    seconds = {}

    start = time.perf_counter()
    before = answers(target, tokenizer, chats, 16, args.new_tokens)
    seconds["before: answers (batches of 16)"] = time.perf_counter() - start
    start = time.perf_counter()
    old_features = one_by_one(target, before)
    seconds["before: features (one forward per sequence)"] = time.perf_counter() - start

    start = time.perf_counter()
    after = answers(target, tokenizer, chats, DATA_BATCH, args.new_tokens)
    seconds[f"after: answers (batches of {DATA_BATCH})"] = time.perf_counter() - start
    start = time.perf_counter()
    records = with_features([{"tokens": t, "answer_start": 0} for t in after], target)
    seconds["after: features (with_features, 16 per forward)"] = time.perf_counter() - start

    if not all(a.equal(b) for a, b in zip(before, after, strict=True)):
        raise SystemExit("the two batchings gave different answers")
    pairs = zip(records, old_features, strict=True)
    largest = max(float((r["features"].float() - f.float()).abs().max()) for r, f in pairs)
    tokens = sum(len(t) for t in after)
    print(f"{args.prompts} chat prompts, {args.new_tokens} new tokens each, {tokens} tokens in all")
    for name, value in seconds.items():
        print(f"  {name:52s} {value:7.1f} s")
    total_before = sum(v for k, v in seconds.items() if k.startswith("before"))
    total_after = sum(v for k, v in seconds.items() if k.startswith("after"))
    print(f"  before / after, in all: {total_before:.1f} s / {total_after:.1f} s = {total_before / total_after:.2f}x")
    print(f"  features: largest difference between the two ways {largest:.3g} (float16 storage)")


if __name__ == "__main__":
    main()
