"""What an EAGLE step costs on this host, and what the shipped head gets right: the three figures that limit
`Eagle`'s speed.

1. the head's cost per depth of the tree (a head forward over W nodes after 256 entries, their scores over the
   head's 8,192 tokens and the choice of children), in units of a 1-token SmolLM2 forward, for W = 1, 2, 4, 8,
   with the head in float32 and, where this CPU's int8 products are exact, in int8 (`quantize_head`);
2. the target's cost of verifying a tree of N nodes, t(N + 1), from the same measured curve the tuning uses;
3. on the benchmark suite (greedy, 64 new tokens, the first `--prompts` prompts of each task), per task: tokens
   per target forward, how deep the accepted paths went, the mean tree size verified and depths grown.

Figures 1 and 3 are printed for each of the head's forms, side by side in one run.

    python benchmarks/eagle_costs.py [--prompts 3] [--depth 5] [--width 4] [--heads float32 int8]
"""

import argparse
from collections import Counter

import torch

import mtdecode
from mtdecode import tuning
from mtdecode.bench import _tokenize, cpu_model, load_suite
from mtdecode.strategies import Eagle
from mtdecode.strategies.eagle import measure_depth_cost
from mtdecode.zoo.int8 import exact_int_mm


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=3)
    parser.add_argument("--depth", type=int, default=5)
    parser.add_argument("--width", type=int, default=4)
    parser.add_argument("--heads", nargs="+", choices=["float32", "int8"], default=["float32", "int8"])
    args = parser.parse_args()
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
        parts = depth_parts(head, args.width)
        print(f"  one depth of W={args.width}, in ms: " + ", ".join(f"{k} {v:.2f}" for k, v in parts.items()))
    curve = tuning.measured_curve(target, 32)
    print("target forward over n tokens, against 1: " + ", ".join(f"{n}: {curve[n - 1]:.2f}" for n in (2, 4, 8, 16)))
    for form, head in heads.items():
        print(f"{form} head:")
        decode_tasks(target, tokenizer, Eagle(head, depth=args.depth, width=args.width), args.prompts)


def depth_parts(head, width: int, repeats: int = 20) -> dict[str, float]:
    """Where one depth's time goes (the fastest of `repeats` runs of each part): the head's forward over `width`
    nodes after `tuning.CONTEXT` entries (fuse, decoder layer, norm, cache update), their scores over the head's
    tokens, and the choice of children (softmax and top-W)."""
    import time

    from mtdecode import masks
    from mtdecode.strategies.eagle import HeadRunner

    def fastest(run) -> float:
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            run()
            best = min(best, time.perf_counter() - start)
        return best * 1e3

    runner, hidden = HeadRunner(head, 1), head.embedding.shape[1]
    ids, offsets, sees, pad = runner.after_held(torch.zeros(1, tuning.CONTEXT, dtype=torch.long))
    runner.step(torch.zeros(1, tuning.CONTEXT, hidden, dtype=head.dtype), ids, offsets, sees, pad=pad)
    runner.cache.commit()
    features, tokens = torch.randn(1, width, hidden, dtype=head.dtype), torch.zeros(1, width, dtype=torch.long)
    alone, at = masks.tree([-1] * width), torch.zeros(width, dtype=torch.long)

    def forward():
        runner.step(features, tokens, at, alone)
        runner.cache.crop(runner.cache.lengths)

    scores = head.logits(features)
    return {
        "head forward": fastest(forward),
        "scores": fastest(lambda: head.logits(features)),
        "choice": fastest(lambda: torch.softmax(scores.double(), dim=-1).flatten(1).topk(width, dim=1)),
    }


def decode_tasks(target, tokenizer, strategy: Eagle, count: int) -> None:
    """Figure 3 for one strategy: per task, tokens per forward, accepted depths and tree sizes."""
    for task, spec in load_suite()["tasks"].items():
        prompts = [_tokenize(tokenizer, m) for m in spec["prompts"][:count]]
        accepted, drafted, forwards, tokens = Counter(), [], 0, 0
        for prompt in prompts:
            result = mtdecode.generate(target, prompt, strategy, max_new_tokens=64, eos_token_id=tokenizer.eos_token_id)
            accepted.update(result.stats.accepted_lengths)
            drafted += [step.drafted for step in result.steps if step.drafted]
            forwards += result.stats.target_forwards
            tokens += result.stats.new_tokens
        steps = sum(accepted.values())
        deep = ", ".join(f">={d}: {sum(c for a, c in accepted.items() if a >= d) / steps:.2f}" for d in (1, 2, 3, 4))
        size = sum(drafted) / max(len(drafted), 1)
        print(f"  {task:8s} tokens per forward {tokens / forwards:.2f}; steps accepting {deep}; mean tree {size:.1f}")


if __name__ == "__main__":
    main()
