"""EAGLE's tree width W (nodes kept per depth) against batched greedy: which default to ship.

A wider tree offers the target more candidates per depth, and costs more: every depth is a head forward over W
nodes per row (the head's cost grows with rows x W once a batch fills it), and the verifying forward holds more
nodes. For each W given, on a prompt set of `benchmarks/batch_throughput.py` (`mixed`, `code`) at one batch size,
every round pairs a run of `Eagle(width=W)` with a run of batched greedy right beside it (`batch_throughput.race`:
greedy first in even rounds, second in odd ones; the widths' order rotates), 32 new tokens per row; it prints each
W's median ratio over the rounds, every round's ratio, and the tokens per forward and choices of its last run.

    python benchmarks/eagle_width.py [--set code] [--batch 4] [--rounds 6] [--widths 4 3 2]
"""

import argparse
import statistics

from batch_throughput import ours, prompt_set, race

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
    strategies = {"greedy": Autoregressive(), **{f"W={w}": Eagle(width=w) for w in args.widths}}
    for strategy in strategies.values():  # warm-up, and the head's costs at this batch, measured once
        ours(model, prompts, 4, eos, strategy)
    runners = {name: lambda s=strategy: ours(model, prompts, 32, eos, s) for name, strategy in strategies.items()}
    totals = race(runners, args.rounds, f"batch {args.batch}, {args.set}", paired=True)
    print(f"batch {args.batch}, {args.set} prompts, {args.rounds} rounds, paired with batched greedy")
    for name, v in totals.items():
        if name == "greedy":
            continue
        chosen = "; ".join(c.setting for c in v["stats"].choices)
        every = " ".join(f"{r:.2f}" for r in v["pairs"])
        print(f"  {name}: median {statistics.median(v['pairs']):.3f}x  ({every})  "
              f"{v['stats'].tokens_per_forward:.2f} tokens per forward  {chosen}")  # fmt: skip


if __name__ == "__main__":
    main()
