"""EAGLE's tree width W (nodes kept per depth) against batched greedy: which default to ship.

A wider tree offers the target more candidates per depth, and costs more: every depth is a head forward over W
nodes per row (the head's cost grows with rows x W once a batch fills it), and the verifying forward holds more
nodes. For each W given, on a prompt set of `benchmarks/batch_throughput.py` (`mixed`, `code`) at one batch size,
every round pairs a run of `Eagle(width=W)` with a run of batched greedy right beside it (greedy first in even
rounds, second in odd ones), 32 new tokens per row; it prints each W's median ratio over the rounds, every round's
ratio, and the tokens per forward and choices of its last run.

    python benchmarks/eagle_width.py [--set code] [--batch 4] [--rounds 6] [--widths 4 3 2]
"""

import argparse
import statistics
import time

from batch_throughput import ours, prompt_set

import mtdecode
from mtdecode.strategies import Autoregressive, Eagle


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", choices=["mixed", "code"], default="code")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--widths", type=int, nargs="+", default=[4, 3, 2])
    args = parser.parse_args()

    model, tokenizer = mtdecode.load_model(), mtdecode.load_tokenizer()
    prompts, eos = prompt_set(tokenizer, args.set, args.batch), tokenizer.eos_token_id
    greedy, eagles = Autoregressive(), {w: Eagle(width=w) for w in args.widths}
    for strategy in [greedy, *eagles.values()]:  # warm-up, and the head's costs at this batch, measured once
        ours(model, prompts, 4, eos, strategy)

    def speed(strategy) -> tuple[float, object]:
        start = time.perf_counter()
        rows, stats = ours(model, prompts, 32, eos, strategy)
        return sum(map(len, rows)) / (time.perf_counter() - start), stats

    ratios, last = {w: [] for w in eagles}, {}
    for r in range(args.rounds):
        for w, eagle in eagles.items():
            if r % 2 == 0:
                base, _ = speed(greedy)
                fast, last[w] = speed(eagle)
            else:
                fast, last[w] = speed(eagle)
                base, _ = speed(greedy)
            ratios[w].append(fast / base)
    print(f"batch {args.batch}, {args.set} prompts, {args.rounds} rounds, paired with batched greedy")
    for w, values in ratios.items():
        chosen = "; ".join(c.setting for c in last[w].choices)
        every = " ".join(f"{v:.2f}" for v in values)
        print(f"  W={w}: median {statistics.median(values):.3f}x  ({every})  "
              f"{last[w].tokens_per_forward:.2f} tokens per forward  {chosen}")  # fmt: skip


if __name__ == "__main__":
    main()
