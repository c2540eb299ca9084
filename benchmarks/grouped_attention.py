"""SmolLM2's forward under mtdecode's grouped attention against transformers' `sdpa`, the same weights.

For B rows after a cache of C tokens per row, one forward over n new tokens per row (`Runner.extend`, as a
verification feeds them after the cache), timed under `mtdecode.attention.GROUPED_SDPA` and under `sdpa` in turn
(who goes first alternates), the median of the repeats. n = 1 is a greedy step, which both run alike.

    python benchmarks/grouped_attention.py [--rows 1 4 8] [--new 1 6 16] [--context 128] [--repeats 9]
"""

import argparse
import statistics
import time

import torch

import mtdecode
from mtdecode import Runner
from mtdecode.attention import GROUPED_SDPA


def seconds(runner: Runner, new_tokens: torch.Tensor) -> float:
    """One forward over `new_tokens` after the runner's cache; its entries are dropped again."""
    held = runner.cache.lengths
    start = time.perf_counter()
    runner.extend(new_tokens)
    took = time.perf_counter() - start
    runner.cache.crop(held)
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--new", type=int, nargs="+", default=[1, 6, 16])
    parser.add_argument("--context", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args()

    model = mtdecode.load_model()
    kinds = [GROUPED_SDPA, "sdpa"]
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {args.context} cached tokens per row")
    print(f"{'rows':>4} {'new':>4} {'grouped ms':>10} {'sdpa ms':>8} {'grouped / sdpa':>14}")
    generator = torch.Generator().manual_seed(0)
    for rows in args.rows:
        tokens = torch.randint(0, model.vocab_size, (rows, args.context + max(args.new)), generator=generator)
        runners = {}
        for kind in kinds:  # each attention's own cache of the same tokens
            model.hf.set_attn_implementation(kind)
            runners[kind] = Runner(model, kind)
            runners[kind].extend(tokens[:, : args.context], logits_to_keep=1)
            runners[kind].cache.commit()
        for new in args.new:
            fed = tokens[:, args.context : args.context + new]
            times = {kind: [] for kind in kinds}
            for repeat in range(args.repeats + 1):  # the first round warms up
                for kind in kinds if repeat % 2 == 0 else kinds[::-1]:
                    model.hf.set_attn_implementation(kind)
                    took = seconds(runners[kind], fed)
                    if repeat:
                        times[kind].append(took)
            grouped, plain = (1000 * statistics.median(times[kind]) for kind in kinds)
            print(f"{rows:4} {new:4} {grouped:10.1f} {plain:8.1f} {grouped / plain:14.2f}")
    model.hf.set_attn_implementation(GROUPED_SDPA)


if __name__ == "__main__":
    main()
