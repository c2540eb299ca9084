"""Our greedy `Autoregressive` against transformers' `generate(do_sample=False)` on the
default model: same prompts, runs interleaved (A B, B A, ...) in one process, and the
ratio of throughputs printed. Not a test: timings on a shared machine are noisy, so only
the side-by-side ratio means anything.

    python benchmarks/greedy_vs_transformers.py [--rounds 3] [--new-tokens 64]
"""

import argparse
import statistics
import time

import torch
from tqdm import tqdm

import mtdecode
from mtdecode.testing import greedy_tokens, hf_greedy_tokens

PROMPTS = [
    "What is the capital of France? Answer in one sentence.",
    "Write a Python function that checks whether a string is a palindrome.",
    "Give three tips for staying focused while studying.",
    "Summarise the plot of Romeo and Juliet in two sentences.",
]


def timed(decode, model, ids: list[int], new_tokens: int) -> tuple[list[int], float]:
    """Run one greedy decoder (EOS off, so both produce exactly `new_tokens`) and time it."""
    start = time.perf_counter()
    tokens = decode(model, ids, new_tokens)
    return tokens, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--new-tokens", type=int, default=64)
    args = parser.parse_args()

    model, tokenizer = mtdecode.load_model(), mtdecode.load_tokenizer()
    prompts = [
        tokenizer.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True, tokenize=True)[
            "input_ids"
        ]
        for p in PROMPTS
    ]
    ours, theirs = greedy_tokens, hf_greedy_tokens  # mtdecode Autoregressive / transformers generate
    timed(ours, model, prompts[0], 8), timed(theirs, model, prompts[0], 8)  # warm-up

    time_ours, time_theirs, identical = 0.0, 0.0, 0
    ratios = []
    runs = [(r, i) for r in range(args.rounds) for i in range(len(prompts))]
    for r, i in tqdm(runs, desc="interleaved runs", unit="prompt"):
        order = (ours, theirs) if (r + i) % 2 == 0 else (theirs, ours)  # alternate who goes first
        runs_here = {f: timed(f, model, prompts[i], args.new_tokens) for f in order}
        (a, ta), (b, tb) = runs_here[ours], runs_here[theirs]
        time_ours += ta
        time_theirs += tb
        ratios.append(tb / ta)
        identical += a == b
    tokens = args.new_tokens * len(runs)
    print(
        f"\nmodel: {mtdecode.DEFAULT_MODEL}, {torch.get_num_threads()} threads, "
        f"{len(runs)} runs x {args.new_tokens} new tokens, interleaved"
    )
    print(f"mtdecode Autoregressive greedy : {tokens / time_ours:6.1f} tokens/s")
    print(f"transformers generate greedy   : {tokens / time_theirs:6.1f} tokens/s")
    print(
        f"throughput ratio (ours / theirs): {time_theirs / time_ours:.3f} overall, "
        f"median of per-run ratios {statistics.median(ratios):.3f}"
    )
    print(f"identical outputs: {identical}/{len(runs)}")


if __name__ == "__main__":
    main()
