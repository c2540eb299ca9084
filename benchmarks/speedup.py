"""Speed-up of strategies over greedy `Autoregressive` on the default model, measured side by side.

Each prompt is decoded by the baseline and by every strategy, in an order that rotates
from prompt to prompt, in one process; the ratio of summed times is the speed-up. Also
printed: tokens per target forward and whether the output equals greedy's.

    python benchmarks/speedup.py [--strategies speculative] [--draft-tokens 2 3 4] [--rounds 2] [--new-tokens 96]
"""

import argparse
import time

from tqdm import tqdm

import mtdecode
from mtdecode.demo import print_table
from mtdecode.strategies import REGISTRY, Autoregressive, needs_draft

PROMPTS = [
    "Explain how a refrigerator keeps food cold.",
    "Write a short story about a robot who learns to paint.",
    "What are the main differences between Python lists and tuples?",
    "Give me a packing list for a weekend hiking trip.",
    "Describe the water cycle in simple terms.",
    "Write a haiku about autumn and explain its imagery.",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--strategies", nargs="+", default=[n for n in REGISTRY if n != "autoregressive"])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--new-tokens", type=int, default=96)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--draft-tokens", type=int, nargs="+", default=[4], help="guesses per step to compare")
    args = parser.parse_args()

    model, tokenizer = mtdecode.load_model(), mtdecode.load_tokenizer()
    draft = (
        mtdecode.load_model(mtdecode.DRAFT_MODEL) if any(needs_draft(REGISTRY[n]) for n in args.strategies) else None
    )
    contenders = {"autoregressive": Autoregressive()}
    for name in args.strategies:
        if needs_draft(REGISTRY[name]):
            for k in args.draft_tokens:
                contenders[f"{name} (k={k})"] = REGISTRY[name](draft=draft, num_draft_tokens=k)
        else:
            contenders[name] = REGISTRY[name]()
    prompts = [
        tokenizer.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True)["input_ids"]
        for p in PROMPTS
    ]
    settings = dict(max_new_tokens=args.new_tokens, temperature=args.temperature, seed=0)
    for strategy in contenders.values():  # warm-up
        mtdecode.generate(model, prompts[0], strategy, max_new_tokens=8)

    names = list(contenders)
    seconds = dict.fromkeys(names, 0.0)
    tokens = dict.fromkeys(names, 0)
    forwards = dict.fromkeys(names, 0)
    identical = dict.fromkeys(names, 0)
    runs = [(r, i) for r in range(args.rounds) for i in range(len(prompts))]
    for r, i in tqdm(runs, desc="interleaved runs", unit="prompt"):
        shift = (r * len(prompts) + i) % len(names)
        outputs = {}
        for name in names[shift:] + names[:shift]:  # rotate who goes first
            start = time.perf_counter()
            result = mtdecode.generate(model, prompts[i], contenders[name], **settings)
            seconds[name] += time.perf_counter() - start
            tokens[name] += result.stats.new_tokens
            forwards[name] += result.stats.target_forwards
            outputs[name] = result.tokens[0].tolist()
        for name in names:
            identical[name] += outputs[name] == outputs["autoregressive"]

    base = tokens["autoregressive"] / seconds["autoregressive"]
    rows = []
    for name in names:
        speed = tokens[name] / seconds[name]
        rows.append(
            (
                name,
                f"{speed:.1f}",
                f"{speed / base:.2f}x",
                f"{tokens[name] / forwards[name]:.2f}",
                f"{identical[name]}/{len(runs)}",
            )
        )
    print(f"\n{len(runs)} runs x {args.new_tokens} new tokens, temperature {args.temperature}, interleaved")
    print_table(("strategy", "tokens/s", "speed-up", "tokens/target forward", "identical to greedy"), rows)


if __name__ == "__main__":
    main()
