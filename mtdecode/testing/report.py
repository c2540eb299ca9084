"""What every check of `mtdecode.testing` returns: a `Report`, and `assert_conforms` to fail a test with it."""

from dataclasses import dataclass, field

#: every verdict, and the exit code `mtdecode check` gives it (2 is a usage error)
VERDICTS = {"conforms": 0, "fails": 1, "crashed": 3, "inconclusive": 4}


@dataclass(frozen=True)
class Report:
    """The outcome of one check.

    - `check`: which check ran (`check_greedy`, `check_sampling`, ...).
    - `passed`: whether the decoder conforms (`verdict == "conforms"`).
    - `summary`: one paragraph for a person: what was checked, on what, how strongly, and the verdict.
    - `figures`: the numbers behind it (samples, statistics, false-alarm rate, power, ...).
    - `reproducer`: for a failure with a counterexample, Python code that shows it when pasted.
    - `verdict`: "conforms", "fails", "crashed" (the decoder raised: the summary has its traceback) or
      "inconclusive" (it never verified a guess, so the path under test never ran); by default "conforms"
      or "fails" as `passed` says.
    """

    check: str
    passed: bool
    summary: str
    figures: dict = field(default_factory=dict)
    reproducer: str = ""
    verdict: str = ""

    def __post_init__(self) -> None:
        if not self.verdict:
            object.__setattr__(self, "verdict", "conforms" if self.passed else "fails")
        if self.verdict not in VERDICTS or (self.verdict == "conforms") != self.passed:
            raise ValueError(f"verdict {self.verdict!r} does not agree with passed={self.passed}")

    def __str__(self) -> str:
        return self.summary + (f"\n\n{self.reproducer}" if self.reproducer else "")

    def to_json(self) -> dict:
        """The report as plain JSON-ready data."""
        return {
            "check": self.check,
            "passed": self.passed,
            "verdict": self.verdict,
            "summary": self.summary,
            "figures": self.figures,
            "reproducer": self.reproducer,
        }


def assert_conforms(*reports: Report) -> None:
    """Raise `AssertionError` with the summary (and reproducer) of every report that did not pass (failed, crashed or
    inconclusive); return quietly if all conform."""
    failed = [report for report in reports if not report.passed]
    if failed:
        raise AssertionError("\n\n".join(str(report) for report in failed))
