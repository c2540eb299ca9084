"""How often a copied token holds after a run of L agreeing tokens: the rates behind prompt lookup's prior
(`mtdecode.policy.records.SUITE_RATES`).

Greedy answers (64 new tokens) to every prompt of the benchmark suite; at every position of an answer, the copy
that prompt lookup would make there (`lookup_matched`, n-gram 3, up to 10 tokens) is walked along greedy's next
tokens. Copied token i + 1 is tried only where tokens 1..i held; its run is the matched tokens before the copy plus
i (at least 1), and runs of `LONGEST` or more are counted together. The last line pools the tasks and evens out
the rates that fall with a longer run (pool-adjacent-violators, weighted by tries), as a prior must not.

    python benchmarks/copy_rates.py [--new-tokens 64]
"""

import argparse
from collections import Counter

import mtdecode
from mtdecode.bench import load_suite
from mtdecode.copying import lookup_matched
from mtdecode.strategies import Autoregressive

#: runs of this many agreeing tokens or more are counted together
LONGEST = 8


def count(text: list[int], start: int, hits: Counter, tries: Counter) -> None:
    """Walk the copy at every position from `start` on along `text`'s next tokens, counting by run."""
    for end in range(start, len(text) - 1):  # committed text[: end + 1]; greedy's next tokens text[end + 1 :]
        copy, matched = lookup_matched(text[: end + 1], 3, 10)
        for i, token in enumerate(copy[: len(text) - end - 1]):
            run = min(max(matched, 1) + i, LONGEST)
            tries[run] += 1
            if token != text[end + 1 + i]:
                break
            hits[run] += 1


def monotone(hits: list[int], tries: list[int]) -> list[float]:
    """Rates that never fall as the run grows: adjacent runs that break that are pooled (weighted by tries)."""
    blocks: list[tuple[int, int, int]] = []  # (held, tried, runs) of each pooled block, shortest runs first
    for held, tried in zip(hits, tries, strict=True):
        runs = 1
        while blocks and blocks[-1][0] / blocks[-1][1] > held / tried:  # the shorter runs held more often: pool
            h, n, k = blocks.pop()
            held, tried, runs = held + h, tried + n, runs + k
        blocks.append((held, tried, runs))
    return [h / n for h, n, k in blocks for _ in range(k)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--new-tokens", type=int, default=64)
    args = parser.parse_args()
    model, tokenizer = mtdecode.load_model(), mtdecode.load_tokenizer()
    eos = tokenizer.eos_token_id
    runs = range(1, LONGEST + 1)
    total_hits, total_tries = Counter(), Counter()
    print(f"run L: held/tried = rate (runs of {LONGEST} or more together)")
    for task, spec in load_suite()["tasks"].items():
        prompts = [tokenizer.apply_chat_template(m, add_generation_prompt=True)["input_ids"] for m in spec["prompts"]]
        result = mtdecode.generate(
            model, prompts, Autoregressive(), max_new_tokens=args.new_tokens, eos_token_id=eos, pad_token_id=eos
        )
        hits, tries = Counter(), Counter()
        for b, prompt in enumerate(prompts):
            answer = result.row(b)
            answer = answer[: answer.index(eos) + 1] if eos in answer else answer
            count(list(prompt) + list(answer), len(prompt), hits, tries)
        print(f"{task:8} " + "  ".join(f"{L}: {hits[L]}/{tries[L]} = {hits[L] / max(tries[L], 1):.2f}" for L in runs))
        total_hits.update(hits)
        total_tries.update(tries)
    print("all      " + "  ".join(f"{L}: {total_hits[L]}/{total_tries[L]}" for L in runs))
    rates = monotone([total_hits[L] for L in runs], [total_tries[L] for L in runs])
    print("prior    " + "  ".join(f"{L}: {rate:.2f}" for L, rate in zip(runs, rates, strict=True)))


if __name__ == "__main__":
    main()
