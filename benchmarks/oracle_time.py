"""How long the oracle takes (`mtdecode.testing`): `check_greedy`, `check_sampling` and `check_seeds` at their
default settings, for black-box decoders (one call per prompt) and for mtdecode's strategies (batched).

    python benchmarks/oracle_time.py
"""

import time

import torch

from mtdecode.strategies import Autoregressive, Jacobi, Lookahead, PromptLookup, Speculative
from mtdecode.testing import check_greedy, check_sampling, check_seeds, decoders, mutants, strategy_decoder


def timed(name: str, decoder) -> None:
    times, verdicts = [], []
    for check in (check_greedy, check_sampling, check_seeds):
        start = time.perf_counter()
        verdicts.append(check(decoder).verdict)
        times.append(time.perf_counter() - start)
    print(
        f"{name:<34} greedy {times[0]:6.1f} s   sampling {times[1]:6.1f} s   seeds {times[2]:5.1f} s   "
        f"greedy + sampling {times[0] + times[1]:6.1f} s   ({', '.join(verdicts)})",
        flush=True,
    )


def main() -> None:
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads\n")
    timed("transformers assisted (black box)", decoders.hf_assisted_decoder())
    timed("homework speculative (black box)", mutants.homework_speculative)
    ours = {
        "autoregressive": Autoregressive(),
        "jacobi": Jacobi(3),
        "prompt_lookup": PromptLookup(2, 3),
        "lookahead": Lookahead(2, 3, 2, prompt_pool=True),
    }
    for name, strategy in ours.items():
        timed(f"{name} (batched)", strategy_decoder(strategy))
    timed("speculative (batched)", strategy_decoder(lambda model: Speculative(decoders.noisy_assistant(model.hf), 2)))


if __name__ == "__main__":
    main()
