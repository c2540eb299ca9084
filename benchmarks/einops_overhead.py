"""What einops costs the decoding loop: for each strategy, how many einops calls (`rearrange`, `repeat`, `reduce`,
`pack`, `unpack`) a target forward makes, how long they take, and their share of the run's time.

Every einops function that a module of the library imported is wrapped by a timer, then each strategy (with its
defaults, the draft where one is needed) decodes two prompts of the benchmark suite (chat and code editing, 32 new
tokens) on the default model, alone and as a batch of 8. The einops seconds are an upper bound of what the library
would save by writing those lines as plain indexing (which takes about 1 us a call itself), and unlike a
before/after bench they do not drown in the host's scatter.

    python benchmarks/einops_overhead.py
"""

import sys
import time
import warnings

import einops
import torch

import mtdecode
from mtdecode.bench import load_suite, tokenize
from mtdecode.strategies import REGISTRY, needs_draft

NAMES = ("rearrange", "repeat", "reduce", "pack", "unpack")


def wrap_einops(counts: dict) -> None:
    """Replace each einops function in every loaded `mtdecode` module by a wrapper that counts its calls and sums
    their seconds into `counts`."""
    def timed(function):
        def run(*args, **kwargs):
            start = time.perf_counter()
            out = function(*args, **kwargs)
            counts["seconds"] += time.perf_counter() - start
            counts["calls"] += 1
            return out

        return run

    wrapped = {name: timed(getattr(einops, name)) for name in NAMES}
    for name, module in list(sys.modules.items()):
        if name.startswith("mtdecode") and module is not None:
            for function in NAMES:
                if getattr(module, function, None) is getattr(einops, function):
                    setattr(module, function, wrapped[function])


def main() -> None:
    warnings.filterwarnings("ignore", category=mtdecode.GreedyFallbackWarning)
    target, draft = mtdecode.load_model(), mtdecode.load_model(mtdecode.DRAFT_MODEL)
    tokenizer = mtdecode.load_tokenizer()
    tasks = load_suite()["tasks"]
    prompts = [tokenize(tokenizer, tasks[kind]["prompts"][0]) for kind in ("chat", "code")]
    counts = {"calls": 0, "seconds": 0.0}
    strategies = {name: cls(draft=draft) if needs_draft(cls) else cls() for name, cls in REGISTRY.items()}
    eos = tokenizer.eos_token_id
    for strategy in strategies.values():  # warm-up, and the one-off cost measurements
        mtdecode.generate(target, prompts, strategy, max_new_tokens=4, eos_token_id=eos, pad_token_id=eos, seed=0)
    wrap_einops(counts)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; 32 new tokens per row")
    print(f"{'strategy':15} {'rows':>4} {'forwards':>8} {'calls/fwd':>9} {'us/call':>7} {'einops share':>12}")
    for rows in (1, 8):
        batch = [prompts[b % 2] for b in range(max(rows, 2))][: max(rows, 1)] if rows > 1 else prompts[:1]
        for name, strategy in strategies.items():
            counts.update(calls=0, seconds=0.0)
            start = time.perf_counter()
            result = mtdecode.generate(
                target, batch, strategy, max_new_tokens=32, eos_token_id=eos, pad_token_id=eos, seed=0
            )
            total = time.perf_counter() - start
            forwards = result.stats.target_forwards
            per_call = 1e6 * counts["seconds"] / max(counts["calls"], 1)
            print(f"{name:15} {rows:>4} {forwards:>8} {counts['calls'] / forwards:>9.1f} {per_call:>7.1f} "
                  f"{counts['seconds'] / total:>11.2%}")  # fmt: skip


if __name__ == "__main__":
    main()
