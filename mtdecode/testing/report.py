"""What every check of `mtdecode.testing` returns: a `Report`, and `assert_conforms` to fail a test with it."""

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Report:
    """The outcome of one check.

    - `check`: which check ran (`check_greedy`, `check_sampling`, ...).
    - `passed`: the verdict.
    - `summary`: one paragraph for a person: what was checked, on what, how strongly, and the verdict.
    - `figures`: the numbers behind it (samples, statistics, false-alarm rate, power, ...).
    - `reproducer`: for a failure with a counterexample, Python code that shows it when pasted.
    """

    check: str
    passed: bool
    summary: str
    figures: dict = field(default_factory=dict)
    reproducer: str = ""

    def __str__(self) -> str:
        return self.summary + (f"\n\n{self.reproducer}" if self.reproducer else "")

    def to_json(self) -> dict:
        """The report as plain JSON-ready data."""
        return {
            "check": self.check,
            "passed": self.passed,
            "summary": self.summary,
            "figures": self.figures,
            "reproducer": self.reproducer,
        }


def assert_conforms(*reports: Report) -> None:
    """Raise `AssertionError` with the summary (and reproducer) of every failed report; return quietly if all passed."""
    failed = [report for report in reports if not report.passed]
    if failed:
        raise AssertionError("\n\n".join(str(report) for report in failed))
