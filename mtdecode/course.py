"""Graded exercises for the course's notebooks (`tutorials/`).

Each exercise in a notebook has three cells:

1. the question, in the `## Exercises` section;
2. an answer cell that assigns named answers (`iterations = ...`). In the teacher's notebook it holds the
   solution, tagged `solution` and folded on the docs site; the student version (`make students`) replaces it
   with the same names set to `...`;
3. a check cell, tagged `check`, that calls `check` or `check_that`. It prints a confirmation for a right
   answer and raises `WrongAnswer` (an `AssertionError`) with a hint for a wrong or missing one.

A check recomputes the truth from the notebook's own data (the run, the model, the enumeration) wherever it
can, so that it holds on every host; where the answer is a choice between explanations, the choices are
listed in the question and the answer is a letter.
"""

import math
from collections.abc import Sequence
from typing import Any

__all__ = ["NotAnswered", "WrongAnswer", "check", "check_that"]


class WrongAnswer(AssertionError):
    """An exercise's answer is wrong; the message says which exercise and gives a hint."""


class NotAnswered(WrongAnswer):
    """An exercise's answer is still `...` (the student version's placeholder)."""


def check(exercise: str, answer: Any, expected: Any, *, hint: str, tolerance: float = 0.0) -> None:
    """Check an answer against the expected value: equal, or for numbers within `tolerance` (absolute).

    **Arguments:**

    - `exercise`: the exercise's number as the notebook prints it, e.g. `"4.2"`.
    - `answer`: the student's answer. `...` means not answered yet.
    - `expected`: the right answer, recomputed by the check cell from the notebook's data.
    - `hint`: what to look at again when the answer is wrong (never the answer itself).
    - `tolerance`: for numbers, the largest absolute difference still counted as right.

    **Raises:** `NotAnswered` if `answer` is `...`; `WrongAnswer` if it differs from `expected`.
    """
    _require_answer(exercise, answer)
    check_that(exercise, _same(answer, expected, tolerance), hint=hint)


def check_that(exercise: str, correct: bool, *, hint: str) -> None:
    """Pass when `correct` holds, for answers a single value cannot state (a property of a run, say).

    **Raises:** `WrongAnswer` with the exercise's number and the hint when `correct` is false.
    """
    if not correct:
        raise WrongAnswer(f"Exercise {exercise}: not yet. Hint: {hint}")
    print(f"Exercise {exercise}: correct.")


def _require_answer(exercise: str, answer: Any) -> None:
    if answer is ... or (isinstance(answer, tuple) and any(part is ... for part in answer)):
        raise NotAnswered(f"Exercise {exercise}: no answer yet; replace the `...` in the answer cell above.")


def _same(answer: Any, expected: Any, tolerance: float) -> bool:
    if isinstance(expected, str):  # a letter or a word: case and surrounding blanks do not matter
        return isinstance(answer, str) and answer.strip().lower() == expected.strip().lower()
    if isinstance(expected, bool) or isinstance(answer, bool):
        return answer is expected
    if isinstance(expected, int | float) and isinstance(answer, int | float):
        return math.isclose(answer, expected, rel_tol=0.0, abs_tol=tolerance)
    if isinstance(expected, Sequence) and isinstance(answer, Sequence):
        if len(answer) != len(expected):
            return False
        return all(_same(a, e, tolerance) for a, e in zip(answer, expected, strict=True))
    return answer == expected
