"""How many tokens per target forward EAGLE's tree could verify if cost did not matter, and what that costs.

`Eagle()` sizes each step's tree by the measured cost curve: it verifies the nodes that pay. Fixed, larger trees
(`tree_size=N`, wider and deeper) have more tokens accepted per target forward, but on a CPU a forward over N + 1
tokens costs more, and so does growing the tree. This decodes the first `--prompts` prompts of one task of the
benchmark suite (greedy, 64 new tokens) with greedy decoding, the rule, and fixed trees of 24, 48 and 64 nodes,
interleaved prompt by prompt (after a warm-up that holds the one measurement of the forward costs), and prints
each one's tokens per target forward and its speed-up over greedy, measured side by side in this run.

    python benchmarks/eagle_tree_sizes.py [--task chat] [--prompts 4]
"""

import argparse
import time

import mtdecode
from mtdecode.bench import cpu_model, load_suite, tokenize
from mtdecode.strategies import Autoregressive, Eagle

#: label -> strategy; the fixed trees grow wider and deeper than the default's 5 depths of 4 nodes
STRATEGIES = {
    "greedy": Autoregressive(),
    "Eagle(), the rule": Eagle(),
    "tree_size=24 (D6, W8)": Eagle(depth=6, width=8, tree_size=24),
    "tree_size=48 (D8, W10)": Eagle(depth=8, width=10, tree_size=48),
    "tree_size=64 (D8, W16)": Eagle(depth=8, width=16, tree_size=64),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="chat", choices=["chat", "code", "summary", "math"])
    parser.add_argument("--prompts", type=int, default=4)
    args = parser.parse_args()
    if args.prompts < 1:
        parser.error("--prompts must be at least 1")
    target, tokenizer = mtdecode.load_model(), mtdecode.load_tokenizer()
    prompts = [tokenize(tokenizer, m) for m in load_suite()["tasks"][args.task]["prompts"][: args.prompts]]
    for strategy in STRATEGIES.values():  # warm-up, not timed
        mtdecode.generate(target, prompts[0][:16], strategy, max_new_tokens=4)
    seconds = dict.fromkeys(STRATEGIES, 0.0)
    tokens, forwards = dict.fromkeys(STRATEGIES, 0), dict.fromkeys(STRATEGIES, 0)
    names = list(STRATEGIES)
    for i, prompt in enumerate(prompts):
        for name in names[i % len(names) :] + names[: i % len(names)]:  # the turn order rotates
            start = time.perf_counter()
            result = mtdecode.generate(target, prompt, STRATEGIES[name], max_new_tokens=64,
                                       eos_token_id=tokenizer.eos_token_id)  # fmt: skip
            seconds[name] += time.perf_counter() - start
            tokens[name] += result.stats.new_tokens
            forwards[name] += result.stats.target_forwards
        print(f"prompt {i + 1}/{len(prompts)} done", flush=True)
    print(f"host: {cpu_model()}; task {args.task}, {len(prompts)} prompts, 64 new tokens at most, greedy")
    greedy_rate = tokens["greedy"] / seconds["greedy"]
    for name in names:
        rate = tokens[name] / seconds[name]
        print(f"  {name:24s} tokens per target forward {tokens[name] / forwards[name]:.2f}; "
              f"speed-up over greedy {rate / greedy_rate:.2f}x")  # fmt: skip


if __name__ == "__main__":
    main()
