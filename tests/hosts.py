"""`make test-hosts`: the tests whose outcome could depend on the host, under other hosts' settings.

CI runs `make test` on whatever host it gets, and hosts of one machine kind differ: AMD with
AVX2 only, Intel with AVX-512, other thread counts. Their kernels add the same terms in another
order, so float results differ in the last bits, and a test whose tolerance fits one host's
rounding fails on another's. This command reproduces those hosts on the one at hand. It runs
the tests below once per combination of

- torch's CPU kernels, `ATEN_CPU_CAPABILITY` = default, avx2, and avx512 where this CPU has it,
  each with MKL's and oneDNN's matching instruction sets (`MKL_ENABLE_INSTRUCTIONS` = SSE4_2,
  AVX2, AVX512; `ONEDNN_MAX_CPU_ISA` = SSE41, AVX2, AVX512_CORE: oneDNN multiplies float32 on
  CPU, `mtdecode.zoo.skinny`, and picks other kernels under each, with other rounding);
- torch threads, 1 and 2 (`MTDECODE_TEST_THREADS`, read by tests/conftest.py);

always in a shuffled order (pytest-random-order, one seed for the whole run, printed at the
start; `SEED=n make test-hosts` repeats a run), so a test that leans on what ran before it in
the same process shows up. Every core is kept busy (pytest-xdist workers of `threads`
threads each). The property tests run the `hosts` Hypothesis profile (12 examples each, as
many as `make test` ran before batching): what differs between hosts is rounding, not the
breadth of examples, which `make test` covers.

`python tests/hosts.py [pytest arguments]` runs other tests under the same settings.
"""

import os
import random
import subprocess
import sys
import time
from pathlib import Path

#: tolerance-sensitive (float comparisons, greedy argmax, near ties) and randomness-sensitive tests
TESTS = [
    "tests/test_adapter.py",  # logits against transformers, rounding tolerance, eager's float32 softmax
    "tests/test_cache.py",  # cache edits against fresh forwards
    "tests/test_masks.py",
    "tests/test_autoregressive.py",  # float64 greedy parity with transformers
    "tests/test_speculative.py",
    "tests/test_lookahead.py",  # one forward against each branch; random starting guesses
    "tests/test_mtad.py",  # likelihood ratios recomputed with another batch shape
    "tests/test_eagle_strategy.py",  # greedy parity through trees; seeded statistical tests
    "tests/test_batch.py",  # rows of a batch against the same prompts alone
    "tests/test_verification.py",  # seeded statistical tests
    "tests/test_sampling.py",
    "tests/test_smollm2.py",  # float32 real model: near ties
    "tests/test_drafting.py",  # greedy parity with the stopping rule; seeded batch rows against rows alone
    "tests/test_goodput.py",  # greedy parity under the batch rule; measured batch costs
    "tests/test_int8.py",  # bitwise row independence of the int8 product; parity on an int8 model
    "tests/test_zoo.py",  # oneDNN's float32 product within the rounding bound
    "tests/test_half_precision.py",  # ε calibrated per host; exact up to ties in bfloat16 and float16
    "tests/test_smollm2_half.py",  # the real model in half precision: the probe's noise and ties, per host
]
KERNELS = [("default", "SSE4_2", "SSE41"), ("avx2", "AVX2", "AVX2"), ("avx512", "AVX512", "AVX512_CORE")]
THREADS = [1, 2]


def has_avx512() -> bool:
    """Whether this CPU can run torch's avx512 kernels (Linux: the avx512 flags in /proc/cpuinfo)."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return all(flag in flags for flag in ("avx512f", "avx512bw", "avx512vl", "avx512dq"))


def main(argv: list[str]) -> int:
    seed = int(os.environ.get("SEED") or random.SystemRandom().randrange(1, 10**6))
    tests = [t for t in TESTS if Path(t).exists()]
    kernels = [k for k in KERNELS if k[0] != "avx512" or has_avx512()]
    print(f"test order: shuffled with seed {seed} (SEED={seed} make test-hosts repeats it)", flush=True)
    if len(kernels) < len(KERNELS):
        print("this CPU has no AVX-512: the avx512 kernels are skipped", flush=True)
    failed = []
    for capability, mkl, onednn in kernels:
        for threads in THREADS:
            env = dict(os.environ, ATEN_CPU_CAPABILITY=capability, MKL_ENABLE_INSTRUCTIONS=mkl)
            env["ONEDNN_MAX_CPU_ISA"] = onednn
            env["MTDECODE_TEST_THREADS"] = str(threads)
            env.setdefault("MTDECODE_HYPOTHESIS_PROFILE", "hosts")
            label = f"ATEN_CPU_CAPABILITY={capability} MKL_ENABLE_INSTRUCTIONS={mkl} ONEDNN_MAX_CPU_ISA={onednn} "
            label += f"threads={threads}"
            print(f"\n=== {label}", flush=True)
            workers = str(max(1, (os.cpu_count() or 1) // threads))  # every core busy, each with `threads` threads
            command = [sys.executable, "-m", "pytest", "-q", "-n", workers]
            command += ["--random-order-bucket=global", f"--random-order-seed={seed}"]
            start = time.perf_counter()
            code = subprocess.run(command + (argv or tests), env=env).returncode
            print(f"=== {label}: {'passed' if code == 0 else 'FAILED'} in {time.perf_counter() - start:.0f} s")
            if code != 0:
                failed.append(label)
    print(f"\nseed {seed}: " + ("all settings passed" if not failed else "FAILED under " + "; ".join(failed)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
