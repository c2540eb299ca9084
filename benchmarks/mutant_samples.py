"""How many samples each mutant of the catalogue needs before its check catches it.

For every mutant in `mtdecode.testing.mutants.CATALOGUE`, its check runs with growing sample
counts (trials, runs per setting, or Hypothesis examples per family), and the smallest count on
the ladder at which the check fails is printed: the "samples needed" column of
docs/testing-your-decoder.md. Every check keeps its default false-alarm rate.

    python benchmarks/mutant_samples.py
"""

from mtdecode.testing import check_beam_sampler, check_greedy, check_rejection_sampler, check_sampling, mutants

LADDERS = {
    "check_rejection_sampler": ("trials per source", [10, 30, 100, 300, 1_000, 3_000, 10_000]),
    "check_beam_sampler": ("trials", [300, 1_000, 3_000, 10_000, 20_000]),
    "check_sampling": ("runs per setting", [250, 500, 1_000, 2_000, 5_000, 20_000]),
    "check_greedy": ("examples per family", [1, 2, 5, 10, 20, 50]),
}
RUN = {
    "check_rejection_sampler": lambda m, n: check_rejection_sampler(m, trials=n),
    "check_beam_sampler": lambda m, n: check_beam_sampler(m, trials=n),
    "check_sampling": lambda m, n: check_sampling(m, samples=n),
    "check_greedy": lambda m, n: check_greedy(m, examples=n),
}


def caught(check: str, mutant, n: int) -> bool:
    """Whether the check fails the mutant at n samples (too few to test at all counts as not caught)."""
    try:
        return not RUN[check](mutant, n).passed
    except ValueError:  # too few draws for a chi-square test
        return False


def main() -> None:
    print(f"{'mutant':<45} {'check':<25} caught at")
    for mutant, check in mutants.CATALOGUE.items():
        unit, ladder = LADDERS[check]
        needed = next((n for n in ladder if caught(check, mutant, n)), None)
        where = f"{needed:,} {unit}" if needed is not None else f"NOT caught at {ladder[-1]:,} {unit}"
        print(f"{mutant.__name__:<45} {check:<25} {where}", flush=True)


if __name__ == "__main__":
    main()
