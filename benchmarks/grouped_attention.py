"""SmolLM2's forward under mtdecode's grouped attention against transformers' `sdpa`, the same weights.

For B rows after a cache of C tokens per row, one forward over n new tokens per row (a causal block after the
cache, as a verification feeds), timed under `mtdecode.attention.GROUPED_SDPA` and under `sdpa` in turn (who goes
first alternates), the median of the repeats. n = 1 is a greedy step, which both run alike.

    python benchmarks/grouped_attention.py [--rows 1 4 8] [--new 1 6 16] [--context 128] [--repeats 9]
"""

import argparse
import statistics
import time

import torch

import mtdecode
from mtdecode import KVCache, masks
from mtdecode.attention import GROUPED_SDPA


def cached(model, rows: int, context: int) -> KVCache:
    """A cache holding `context` tokens of every row (the same seeded tokens each call)."""
    cache = KVCache()
    ids = torch.randint(0, model.vocab_size, (rows, context), generator=torch.Generator().manual_seed(0))
    mask = masks.causal(context, 0)[None, None].expand(rows, -1, -1, -1)
    model.forward(ids, torch.arange(context).expand(rows, -1), mask, cache, logits_to_keep=1)
    cache.commit()
    return cache


def seconds(model, cache: KVCache, new: int) -> float:
    """One forward over `new` tokens per row after the cache; its entries are dropped again."""
    rows, context = cache.valid.shape
    ids = torch.randint(0, model.vocab_size, (rows, new), generator=torch.Generator().manual_seed(1))
    mask = masks.causal(new, context)[None, None].expand(rows, -1, -1, -1)
    start = time.perf_counter()
    model.forward(ids, torch.arange(context, context + new).expand(rows, -1), mask, cache)
    took = time.perf_counter() - start
    cache.crop(cache.lengths)
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
    for rows in args.rows:
        caches = {}
        for kind in kinds:
            model.hf.set_attn_implementation(kind)
            caches[kind] = cached(model, rows, args.context)
        for new in args.new:
            times = {kind: [] for kind in kinds}
            for repeat in range(args.repeats + 1):  # the first round warms up
                for kind in kinds if repeat % 2 == 0 else kinds[::-1]:
                    model.hf.set_attn_implementation(kind)
                    took = seconds(model, caches[kind], new)
                    if repeat:
                        times[kind].append(took)
            grouped, plain = (1000 * statistics.median(times[kind]) for kind in kinds)
            print(f"{rows:4} {new:4} {grouped:10.1f} {plain:8.1f} {grouped / plain:14.2f}")
    model.hf.set_attn_implementation(GROUPED_SDPA)


if __name__ == "__main__":
    main()
