"""Lookahead's tokens per target forward over a grid of (W, N, G), and the hit rates `mtdecode.policy.search` assumes.

For each setting, a few chat prompts (pool from the window only) and code-editing prompts
(pool also seeded from the prompt) are decoded greedily. Printed per setting: tokens per
target forward, and that divided by the measured relative cost of its (W + G)(N - 1)-token
forward (the speed-up `search.choose` would predict from it). Last, the hit rate a that
fits `search.expected_tokens` best (least squares over the grid) for each prompt set.

    python benchmarks/lookahead_grid.py [--windows 1 2 3 4] [--ngrams 2 3 4] [--guesses 1 2 4] [--new-tokens 64]
"""

import argparse
import itertools

from tqdm import tqdm

import mtdecode
from mtdecode.costs import curves, timing
from mtdecode.demo import print_table
from mtdecode.policy import search
from mtdecode.strategies import Lookahead

from speedup import CHAT, CODE


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", type=int, nargs="+", default=[1, 2, 3, 4])
    parser.add_argument("--ngrams", type=int, nargs="+", default=[2, 3, 4])
    parser.add_argument("--guesses", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--new-tokens", type=int, default=64)
    args = parser.parse_args()

    model, tokenizer = mtdecode.load_model(), mtdecode.load_tokenizer()
    costs = timing.forward_costs(model)

    def encode(text: str) -> list[int]:
        return tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True)[
            "input_ids"
        ]

    sets = {"chat": ([encode(p) for p in CHAT[:3]], False), "code + prompt pool": ([encode(p) for p in CODE[:2]], True)}
    grid = list(itertools.product(args.windows, args.ngrams, args.guesses))
    measured: dict[str, dict[tuple[int, int, int], float]] = {name: {} for name in sets}
    for w, n, g in tqdm(grid, desc="settings", unit="setting"):
        for name, (prompts, pool) in sets.items():
            tokens = forwards = 0
            for prompt in prompts:
                result = mtdecode.generate(
                    model,
                    prompt,
                    Lookahead(w, n, g, prompt_pool=pool),
                    max_new_tokens=args.new_tokens,
                    eos_token_id=tokenizer.eos_token_id,
                )
                tokens += result.stats.new_tokens
                forwards += result.stats.target_forwards
            measured[name][w, n, g] = tokens / forwards

    rows = []
    for w, n, g in grid:
        cost = curves.relative_cost(costs, (w + g) * (n - 1))
        row = [w, n, g, (w + g) * (n - 1), f"{cost:.2f}"]
        for name in sets:
            row += [f"{measured[name][w, n, g]:.2f}", f"{measured[name][w, n, g] / cost:.2f}"]
        rows.append(tuple(row))
    header = ["W", "N", "G", "tokens in", "relative cost"]
    for name in sets:
        header += [f"{name}: tokens/forward", f"{name}: predicted speed-up"]
    print_table(tuple(header), rows)

    for name, (_, pool) in sets.items():
        best = min((a / 100 for a in range(1, 100)), key=lambda a: fit_error(measured[name], a, pool))
        print(f"{name}: the hit rate that fits best is a = {best:.2f}")


def fit_error(measured: dict[tuple[int, int, int], float], a: float, prompt_pool: bool) -> float:
    """Squared error of `search.expected_tokens` with hit rate a against measured tokens per forward."""
    return sum(
        (search.expected_tokens(w, n, g, a, prompt_pool=prompt_pool) - value) ** 2
        for (w, n, g), value in measured.items()
    )


if __name__ == "__main__":
    main()
