"""Measured rounding differences against the tolerances the tests allow (`mtdecode.testing.tolerance`).

For each case, two correct evaluations of the same logits are compared: the model adapter
decoding token by token against transformers' one forward over the whole sequence (the
adapter test), and the one-forward lookahead input against each branch run alone. The table
gives the largest difference, the tolerance, and their ratio (how much room is left).

    python benchmarks/rounding.py                 # this process's kernels
    python benchmarks/rounding.py --all-kernels   # every kernel set (torch's and MKL's) x threads, in subprocesses
"""

import argparse
import os
import subprocess
import sys

import torch

SEQUENCE = [5, 9, 2, 33, 17, 8, 40, 1, 12, 60, 3, 7]
CASES = [
    ("llama", {}),
    ("llama", {"attn_implementation": "eager"}),
    ("qwen2", {}),
    ("mistral", {"sliding_window": 4}),
    ("llama", {"dtype": torch.float32}),
    ("llama", {"dtype": torch.float32, "attn_implementation": "eager"}),
]


def adapter_difference(family: str, overrides: dict) -> tuple[float, float]:
    """Largest |ours - transformers'| over the sequence, and the rounding tolerance."""
    from mtdecode import CausalLM, KVCache, masks
    from mtdecode.testing import tiny_model
    from mtdecode.testing.tolerance import rounding_tolerance

    model = tiny_model(family, **overrides)
    adapter, cache = CausalLM(model), KVCache()
    ours = [adapter.forward(torch.tensor([SEQUENCE[:5]]), torch.arange(5)[None], masks.causal(5, 0)[None, None], cache)]
    cache.commit()
    for i in range(5, len(SEQUENCE)):
        ids, positions = torch.tensor([[SEQUENCE[i]]]), torch.tensor([[i]])
        ours.append(adapter.forward(ids, positions, masks.causal(1, i)[None, None], cache))
        cache.commit()
    with torch.no_grad():
        reference = model(torch.tensor([SEQUENCE])).logits[0]
    difference = float((torch.cat(ours, dim=1)[0] - reference).abs().max())
    return difference, rounding_tolerance(model, reference, keys=len(SEQUENCE))


def report() -> None:
    mkl = os.environ.get("MKL_ENABLE_INSTRUCTIONS", "(MKL's choice)")
    label = f"ATEN_CPU_CAPABILITY={torch.backends.cpu.get_cpu_capability()} MKL {mkl} threads={torch.get_num_threads()}"
    print(f"{label}\n{'case':<44} {'difference':>11} {'tolerance':>11} {'room':>8}")
    for family, overrides in CASES:
        difference, tolerance = adapter_difference(family, overrides)
        name = family + "".join(f" {k}={str(v).replace('torch.', '')}" for k, v in overrides.items())
        room = f"{tolerance / difference:8.0f}x" if difference > 0 else "   exact"
        print(f"{name:<44} {difference:11.2e} {tolerance:11.2e} {room}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--all-kernels", action="store_true", help="every kernel set and thread count, in turn")
    args = parser.parse_args()
    if not args.all_kernels:
        report()
        return
    for capability, mkl in (("default", "SSE4_2"), ("avx2", "AVX2"), ("avx512", "AVX512")):
        for threads in (1, 2):
            env = dict(os.environ, ATEN_CPU_CAPABILITY=capability, MKL_ENABLE_INSTRUCTIONS=mkl)
            env["OMP_NUM_THREADS"] = str(threads)
            subprocess.run([sys.executable, __file__], env=env, check=True)
            print()


if __name__ == "__main__":
    main()
