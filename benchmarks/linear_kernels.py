"""Every linear layer of SmolLM2's forward, over n rows, through MKL and through oneDNN.

30 layers of SmolLM2-135M's shapes (q, k, v, o: 576 -> 576, 192, 192, 576; gate, up, down:
576 -> 1536, 1536, 1536 -> 576) with random float32 weights, 30 separate sets so that, as in
a real forward, the weights come from memory rather than cache. Printed per row count: the
time of all 210 products (fastest of 3 passes), and what it means as arithmetic rate, for

- `mkl`: `skinny_matmul`, MKL's transposed product (what `SkinnyLinear` does without oneDNN);
- `onednn`: `fast_matmul` with oneDNN's packed weights (what `SkinnyLinear` does for float32).

    python benchmarks/linear_kernels.py [--rows 1 2 4 8 16]
"""

import argparse
import time

import torch

from mtdecode.bench import cpu_model
from mtdecode.zoo import skinny

LAYERS = 30
SHAPES = [(576, 576), (192, 576), (192, 576), (576, 576), (1536, 576), (1536, 576), (576, 1536)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    args = parser.parse_args()
    g = torch.Generator().manual_seed(0)
    weights = [[torch.randn(out, inp, generator=g) for out, inp in SHAPES] for _ in range(LAYERS)]
    flops_per_row = 2 * sum(out * inp for out, inp in SHAPES) * LAYERS
    print(f"{cpu_model()}, {torch.get_num_threads()} threads, torch {torch.__version__}")
    print("rows  mkl ms  GFLOP/s  onednn ms  GFLOP/s")
    with torch.no_grad():
        for n in args.rows:
            x = {576: torch.randn(n, 576, generator=g), 1536: torch.randn(n, 1536, generator=g)}
            cells = []
            for use in (False, True):
                skinny.ONEDNN = use

                def one_pass(x: dict = x) -> None:
                    for layer in weights:
                        for w in layer:
                            skinny.fast_matmul(x[w.shape[1]], w)

                one_pass()  # warm-up (oneDNN packs its copies here)
                best = min(_timed(one_pass) for _ in range(3))
                cells.append(f"{1000 * best:6.1f}  {n * flops_per_row / best / 1e9:7.1f}")
            print(f"{n:4}  " + "  ".join(cells))
    skinny.ONEDNN = True


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


if __name__ == "__main__":
    main()
