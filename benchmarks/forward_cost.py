"""Cost of one target forward over n new tokens after a 100-token context, for each kernel path.

Every exact strategy here lives on multi-token forwards: speculative verification feeds k + 1
tokens, lookahead (W + G)(N - 1). Paths, timed interleaved in one process (median of repeats):

- `float32`: plain `nn.Linear` (MKL's GEMM);
- `skinny`: `SkinnyLinear` with oneDNN switched off: MKL's transposed product (`mtdecode.zoo.skinny`);
- `onednn`: `SkinnyLinear` as `load_model` makes it on CPU: oneDNN with packed weights for float32;
- `int8`: `load_model(quantize="int8")`, `Int8Linear` with per-row activation scales (`mtdecode.zoo.int8`).

    python benchmarks/forward_cost.py [--tokens 1 2 3 4 8] [--repeats 8] [--paths float32 skinny onednn int8]
"""

import argparse
import statistics
import time

import torch

import mtdecode
from mtdecode.bench import cpu_model
from mtdecode.zoo import skinny
from mtdecode.zoo.skinny import skinny_linears


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=[1, 2, 3, 4, 6, 8, 12, 16])
    parser.add_argument("--repeats", type=int, default=8)
    paths = ["float32", "skinny", "onednn", "int8"]
    parser.add_argument("--paths", nargs="+", choices=paths, default=paths)
    args = parser.parse_args()
    models = {}
    for path in args.paths:
        model = mtdecode.load_model(quantize="int8" if path == "int8" else None)
        if path == "float32":
            skinny_linears(model.hf, enable=False)
        models[path] = model
    context = torch.randint(0, 49152, (100,), generator=torch.Generator().manual_seed(0)).tolist()
    times: dict[tuple[str, int], list[float]] = {(path, n): [] for path in args.paths for n in args.tokens}
    for _ in range(args.repeats):
        for path, n in times:  # interleaved, so load on the machine hits every setting alike
            skinny.ONEDNN = path == "onednn"
            runner = mtdecode.Runner(models[path], "target")
            runner.extend(context)
            runner.cache.commit()
            start = time.perf_counter()
            runner.extend(context[:n], logits_to_keep=n)
            times[path, n].append(time.perf_counter() - start)
    print(f"{cpu_model()}, {torch.get_num_threads()} threads, torch {torch.__version__}")
    reference = statistics.median(times[args.paths[0], args.tokens[0]])
    for path in args.paths:
        one = statistics.median(times[path, args.tokens[0]])
        cells = []
        for n in args.tokens:
            ms = statistics.median(times[path, n])
            cells.append(f"{n}: {1000 * ms:5.1f} ms {ms / one:4.2f}x")
        print(f"{path:8} ({one / reference:.2f}x {args.paths[0]}'s 1 token)  " + "  ".join(cells))


if __name__ == "__main__":
    main()
