"""Cost of one target forward over n new tokens after a 100-token context (median of repeats).

Speculative verification feeds k + 1 tokens at once; on a CPU that is not free.

    python benchmarks/forward_cost.py [--tokens 1 2 3 5] [--repeats 8]
"""

import argparse
import statistics
import time

import torch

import mtdecode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=[1, 2, 3, 5])
    parser.add_argument("--repeats", type=int, default=8)
    args = parser.parse_args()
    model = mtdecode.load_model()
    context = torch.randint(0, model.vocab_size, (100,), generator=torch.Generator().manual_seed(0)).tolist()
    times: dict[int, list[float]] = {n: [] for n in args.tokens}
    for _ in range(args.repeats):
        for n in args.tokens:  # interleaved, so load on the machine hits every size alike
            runner = mtdecode.Runner(model, "target")
            runner.extend(context)
            runner.cache.commit()
            start = time.perf_counter()
            runner.extend(context[:n], logits_to_keep=n)
            times[n].append(time.perf_counter() - start)
    one = statistics.median(times[args.tokens[0]])
    for n in args.tokens:
        ms = statistics.median(times[n])
        print(f"{n} new tokens: {1000 * ms:6.1f} ms ({ms / one:.2f}x the {args.tokens[0]}-token forward)")


if __name__ == "__main__":
    main()
