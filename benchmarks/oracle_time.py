"""How long the oracle takes (`mtdecode.testing`): `check_greedy` plus `check_sampling` at their default
settings, for black-box decoders (one call per prompt) and for mtdecode's strategies (batched).

    python benchmarks/oracle_time.py
"""

import time

import torch

from mtdecode.strategies import Autoregressive, Jacobi, Lookahead, PromptLookup, Speculative
from mtdecode.testing import check_greedy, check_sampling, decoders, mutants, strategy_decoder


def timed(name: str, decoder) -> None:
    start = time.perf_counter()
    greedy = check_greedy(decoder)
    middle = time.perf_counter()
    sampling = check_sampling(decoder)
    end = time.perf_counter()
    verdict = "conforms" if greedy.passed and sampling.passed else "does NOT conform"
    print(
        f"{name:<32} check_greedy {middle - start:6.1f} s   check_sampling {end - middle:6.1f} s   "
        f"total {end - start:6.1f} s   ({sampling.figures['samples']} runs per setting; {verdict})",
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
