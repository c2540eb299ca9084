"""How many samples each mutant of the catalogue needs before its check catches it.

For every mutant in `mtdecode.testing.mutants.CATALOGUE` (or those named on the command line), its check runs
with growing sample counts (trials, runs per setting, Hypothesis examples per model, seeds), and the smallest
count on the ladder at which the check fails the mutant (or, for a mutant that never guesses, ends inconclusive)
is printed: the "samples needed" column of docs/testing-your-decoder.md. Every check keeps its default
false-alarm rate; a sampling mutant is run on the settings `mutants.NEEDS` names, if any.

    python benchmarks/mutant_samples.py [mutant ...]
"""

import sys

from mtdecode.testing import (
    check_beam_sampler,
    check_greedy,
    check_rejection_sampler,
    check_sampling,
    check_seeds,
    check_tree_sampler,
    mutants,
)

LADDERS = {
    "check_rejection_sampler": ("trials per source", [10, 30, 100, 300, 1_000, 3_000, 10_000]),
    "check_tree_sampler": ("trials per source", [200, 300, 1_000, 3_000, 10_000]),
    "check_beam_sampler": ("trials", [300, 1_000, 3_000, 10_000, 20_000]),
    "check_sampling": ("runs per setting", [250, 500, 1_000, 2_000, 5_000, 20_000]),
    "check_greedy": ("examples per model", [1, 2, 5, 10, 25]),
    "check_seeds": ("seeds", [2, 4, 8]),
}


def run(check: str, mutant, n: int):
    settings = {k: v for k, v in mutants.NEEDS.get(mutant, {}).items() if k == "settings"}
    return {
        "check_rejection_sampler": lambda: check_rejection_sampler(mutant, trials=n),
        "check_tree_sampler": lambda: check_tree_sampler(mutant, trials=n),
        "check_beam_sampler": lambda: check_beam_sampler(mutant, trials=n),
        "check_sampling": lambda: check_sampling(mutant, samples=n, **settings),
        "check_greedy": lambda: check_greedy(mutant, examples=n),
        "check_seeds": lambda: check_seeds(mutant, seeds=tuple(range(n)), fresh_process=False),
    }[check]()


def caught(check: str, mutant, n: int) -> bool:
    """Whether the check does not call the mutant conforming at n samples (too few to test at all: not caught)."""
    try:
        return not run(check, mutant, n).passed
    except ValueError:  # too few draws for a chi-square test
        return False


def main(names: list[str]) -> None:
    print(f"{'mutant':<45} {'check':<25} caught at")
    for mutant, check in mutants.CATALOGUE.items():
        if names and mutant.__name__ not in names:
            continue
        unit, ladder = LADDERS[check]
        needed = next((n for n in ladder if caught(check, mutant, n)), None)
        where = f"{needed:,} {unit}" if needed is not None else f"NOT caught at {ladder[-1]:,} {unit}"
        print(f"{mutant.__name__:<45} {check:<25} {where}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
