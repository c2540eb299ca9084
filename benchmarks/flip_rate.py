"""How often rounding flips a greedy choice: every exact strategy against greedy decoding, on the bench's prompt suite,
in float32, bfloat16 and float16 (`docs/concepts/rounding.md` shows the table).

In each dtype the default model, its draft and its EAGLE head are loaded in that dtype, ε is calibrated
(`mtdecode.testing.ties.calibrate`, on the suite's first chat and code prompts), and every prompt is decoded by
greedy decoding and by every exact strategy with default settings (interleaved, as `mtdecode bench` runs them).
A run is identical, differs only at near-ties (every token that is not greedy's argmax on the run's own text
trails it by at most ε), or differs beyond ε (a bug). Every difference's gap and greedy's top-2 margin there are
printed, so that each flip can be seen to be a tie.

    python benchmarks/flip_rate.py                         # 8 prompts per task (32), 64 new tokens, 3 dtypes
    python benchmarks/flip_rate.py --dtypes bfloat16 --prompts-per-task 2 --json build/flips.json
"""

import argparse
import json
import time
from collections import Counter

import torch

import mtdecode
from mtdecode import bench as suite
from mtdecode.strategies import REGISTRY

EXACT = [name for name, cls in REGISTRY.items() if getattr(cls, "exact", True) and name != suite.BASELINE]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16", "float16"])
    parser.add_argument("--prompts-per-task", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--strategies", nargs="+", default=EXACT, choices=EXACT)
    parser.add_argument("--json", help="write every figure to this file")
    args = parser.parse_args()

    tokenizer = mtdecode.load_tokenizer()
    tasks = list(suite.load_suite()["tasks"])
    results = {}
    for name in args.dtypes:
        dtype = getattr(torch, name)
        start = time.perf_counter()
        model = mtdecode.load_model(dtype=dtype)
        draft = mtdecode.load_model(mtdecode.DRAFT_MODEL, dtype=dtype)
        judge, bound = suite.tie_judge(model, tokenizer, tasks)
        rows = suite.run(model, tokenizer, draft, names=args.strategies, tasks=tasks, progress=True, judge=judge,
                         prompts_per_task=args.prompts_per_task, max_new_tokens=args.max_new_tokens)  # fmt: skip
        overall = [row for row in rows if row.task == "all" and row.contender != suite.BASELINE]
        results[name] = {
            "epsilon": None if bound is None else bound.epsilon,
            "bound": None if bound is None else str(bound),
            "seconds": round(time.perf_counter() - start),
            "rows": {row.contender: row for row in overall},
        }
        print(f"\n{name}: {results[name]['bound'] or 'tier 1, bit-exact: any difference is a failure'}")
        for row in overall:
            gaps = ", ".join(f"{gap:.3g} (top-2 {top2:.3g})" for gap, top2 in row.differences)
            print(f"  {row.contender:14} identical {row.identical}/{row.runs}, near-ties {row.near_ties}, beyond ε "
                  f"{row.beyond}; gaps at the differences: {gaps or '-'}")  # fmt: skip
    print("\n" + markdown(results))
    if args.json:
        document = {
            dtype: {**result, "rows": {name: vars(row) for name, row in result["rows"].items()}}
            for dtype, result in results.items()
        }
        with open(args.json, "w") as f:
            json.dump(document, f, indent=1)
        print(f"written to {args.json}")


def markdown(results: dict) -> str:
    """The table for docs/concepts/rounding.md: per dtype and strategy, tokens per target forward (1.00: the strategy
    verified no guess, so its runs say nothing of its verification), identical runs, runs that differ only at
    near-ties, runs that differ beyond ε, and the gaps at the flipped tokens (how many at each gap)."""
    lines = [
        "| dtype | ε | strategy | tokens per forward | identical runs | differ only at near-ties | differ beyond ε "
        "| tokens flipped | gaps at the flips |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for dtype, result in results.items():
        epsilon = "bit-exact" if result["epsilon"] is None else f"{result['epsilon']:.3g}"
        for name, row in result["rows"].items():
            gaps = Counter(gap for gap, _ in row.differences)
            shown = ", ".join(f"{gap:g} ×{count}" for gap, count in sorted(gaps.items())) or "-"
            lines.append(
                f"| {dtype} | {epsilon} | {name} | {row.tokens_per_forward:.2f} | {row.identical}/{row.runs} | "
                f"{row.near_ties} | {row.beyond} | "
                f"{len(row.differences)} | {shown} |"
            )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
