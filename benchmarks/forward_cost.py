"""Cost of one target forward over n new tokens after a 100-token context (median of repeats).

Speculative verification feeds k + 1 tokens at once; on a CPU that is not free. With
`--skinny both` the model runs with plain `nn.Linear` layers and with `SkinnyLinear`
(mtdecode.zoo.skinny, what `load_model` uses on CPU), interleaved.

    python benchmarks/forward_cost.py [--tokens 1 2 3 5] [--repeats 8] [--skinny on|off|both]
"""

import argparse
import statistics
import time

import torch

import mtdecode
from mtdecode.zoo.skinny import skinny_linears


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=[1, 2, 3, 5])
    parser.add_argument("--repeats", type=int, default=8)
    parser.add_argument("--skinny", choices=["on", "off", "both"], default="both")
    args = parser.parse_args()
    model = mtdecode.load_model()
    modes = ["off", "on"] if args.skinny == "both" else [args.skinny]
    context = torch.randint(0, model.vocab_size, (100,), generator=torch.Generator().manual_seed(0)).tolist()
    times: dict[tuple[str, int], list[float]] = {(mode, n): [] for mode in modes for n in args.tokens}
    for _ in range(args.repeats):
        for mode, n in times:  # interleaved, so load on the machine hits every setting alike
            skinny_linears(model.hf, enable=mode == "on")
            runner = mtdecode.Runner(model, "target")
            runner.extend(context)
            runner.cache.commit()
            start = time.perf_counter()
            runner.extend(context[:n], logits_to_keep=n)
            times[mode, n].append(time.perf_counter() - start)
    one = statistics.median(times[modes[0], args.tokens[0]])
    for mode, n in times:
        ms = statistics.median(times[mode, n])
        print(f"skinny {mode:3}  {n} new tokens: {1000 * ms:6.1f} ms ({ms / one:.2f}x skinny-{modes[0]} 1-token)")


if __name__ == "__main__":
    main()
