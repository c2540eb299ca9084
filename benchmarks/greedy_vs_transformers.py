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
from mtdecode.strategies import Autoregressive

PROMPTS = [
    "What is the capital of France? Answer in one sentence.",
    "Write a Python function that checks whether a string is a palindrome.",
    "Give three tips for staying focused while studying.",
    "Summarise the plot of Romeo and Juliet in two sentences.",
]


def ours(model, ids: list[int], new_tokens: int) -> tuple[list[int], float]:
    start = time.perf_counter()
    result = mtdecode.generate(model, ids, Autoregressive(), max_new_tokens=new_tokens)
    return result.tokens[0].tolist(), time.perf_counter() - start


def theirs(model, ids: list[int], new_tokens: int) -> tuple[list[int], float]:
    hf = model.hf
    x = torch.tensor([ids])
    start = time.perf_counter()
    out = hf.generate(
        x,
        attention_mask=torch.ones_like(x),
        do_sample=False,
        max_new_tokens=new_tokens,
        min_new_tokens=new_tokens,
        eos_token_id=None,
        pad_token_id=hf.config.pad_token_id,
        top_k=None,
        top_p=None,
        temperature=None,
    )
    return out[0, len(ids) :].tolist(), time.perf_counter() - start


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
    ours(model, prompts[0], 8), theirs(model, prompts[0], 8)  # warm-up

    time_ours, time_theirs, identical = 0.0, 0.0, 0
    ratios = []
    runs = [(r, i) for r in range(args.rounds) for i in range(len(prompts))]
    for r, i in tqdm(runs, desc="interleaved runs", unit="prompt"):
        order = (ours, theirs) if (r + i) % 2 == 0 else (theirs, ours)  # alternate who goes first
        timed = {f: f(model, prompts[i], args.new_tokens) for f in order}
        (a, ta), (b, tb) = timed[ours], timed[theirs]
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
