"""What an EAGLE step costs on this host, and what the shipped head gets right: the three figures that limit
`Eagle`'s speed.

1. the head's cost per depth of the tree (a head forward over W nodes after 256 entries, their scores over the
   head's 8,192 tokens and the choice of children), in units of a 1-token SmolLM2 forward, for W = 1, 2, 4, 8,
   with the head in float32 and, where this CPU's int8 products are exact, in int8 (`quantize_head`);
2. the target's cost of verifying a tree of N nodes, t(N + 1), from the same measured curve the tuning uses;
3. on the benchmark suite (greedy, 64 new tokens, the first `--prompts` prompts of each task), per task: tokens
   per target forward, how deep the accepted paths went, the mean tree size verified; with the copy branch
   (`--lookup`, 10 as in `Eagle()`; 0: the head's tree alone), also the share of accepted tokens that were on the
   copy.

Figures 1 and 3 are printed for each of the head's forms, side by side in one run.

    python benchmarks/eagle_costs.py [--prompts 3] [--depth 5] [--width 3] [--lookup 10] [--heads float32 int8]
"""

import argparse
from collections import Counter

import torch

import mtdecode
from mtdecode.bench import cpu_model, load_suite, tokenize
from mtdecode.costs import curves
from mtdecode.costs.probes import depth_timings, measure_depth_cost
from mtdecode.strategies import Eagle, eagle
from mtdecode.zoo.eagle import TREE_WIDTH
from mtdecode.zoo.int8 import exact_int_mm


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=3)
    parser.add_argument("--depth", type=int, default=5)
    parser.add_argument("--width", type=int, default=TREE_WIDTH, help="as in Eagle() by default")
    parser.add_argument("--lookup", type=int, default=10)
    parser.add_argument("--heads", nargs="+", choices=["float32", "int8"], default=["float32", "int8"])
    args = parser.parse_args()
    if min(args.prompts, args.depth, args.width) < 1 or args.lookup < 0:
        parser.error("--prompts, --depth and --width must be at least 1, --lookup at least 0")
    target, tokenizer = mtdecode.load_model(), mtdecode.load_tokenizer()
    print(f"host: {cpu_model()}, torch threads: {torch.get_num_threads()}")
    if "int8" in args.heads and not exact_int_mm():
        print("int8: left out, this CPU's int8 products are not exact (no VNNI)")
        args.heads.remove("int8")
    heads = {form: mtdecode.load_model("smollm2-135m-eagle", quantize=None if form == "float32" else form)
             for form in args.heads}  # fmt: skip
    for form, head in heads.items():
        print(f"{form} head cost per depth, in 1-token target forwards: " + ", ".join(
            f"W={w}: {measure_depth_cost(target, head, w):.3f}" for w in (1, 2, 4, 8)))  # fmt: skip
        parts = depth_timings(head, args.width, repeats=20)
        print(f"  one depth of W={args.width}, in ms: " + ", ".join(f"{k} {v * 1e3:.2f}" for k, v in parts.items()))
    curve = curves.measured_curve(target, 32)
    print("target forward over n tokens, against 1: " + ", ".join(f"{n}: {curve[n - 1]:.2f}" for n in (2, 4, 8, 16)))
    for form, head in heads.items():
        print(f"{form} head:")
        strategy = Eagle(head, depth=args.depth, width=args.width, lookup=args.lookup)
        decode_tasks(target, tokenizer, strategy, args.prompts)


def decode_tasks(target, tokenizer, strategy: Eagle, count: int) -> None:
    """Figure 3 for one strategy: per task, tokens per forward, accepted depths and tree sizes, and the accepted
    tokens that were on the copy (counted where the strategy reports each step's copy to the row's record)."""
    copied = [0]
    outcome = eagle.copy_outcome

    def counted(*args):
        verified, accepted = outcome(*args)
        copied[0] += int(accepted.sum())
        return verified, accepted

    eagle.copy_outcome = counted
    for task, spec in load_suite()["tasks"].items():
        prompts = [tokenize(tokenizer, m) for m in spec["prompts"][:count]]
        accepted, drafted, forwards, tokens, copied[0] = Counter(), [], 0, 0, 0
        for prompt in prompts:
            result = mtdecode.generate(target, prompt, strategy, max_new_tokens=64, eos_token_id=tokenizer.eos_token_id)
            accepted.update(result.stats.accepted_lengths)
            drafted += [step.drafted for step in result.steps if step.drafted]
            forwards += result.stats.target_forwards
            tokens += result.stats.new_tokens
        steps = sum(accepted.values())
        deep = ", ".join(f">={d}: {sum(c for a, c in accepted.items() if a >= d) / steps:.2f}" for d in (1, 2, 3, 4))
        size = sum(drafted) / max(len(drafted), 1)
        on_copy = sum(a * c for a, c in accepted.items())
        on_copy = f"; accepted on the copy {copied[0] / on_copy:.2f}" if strategy.lookup and on_copy else ""
        print(f"  {task:8s} tokens per forward {tokens / forwards:.2f}; steps accepting {deep}; mean tree {size:.1f}"
              f"{on_copy}")  # fmt: skip
    eagle.copy_outcome = outcome


if __name__ == "__main__":
    main()
