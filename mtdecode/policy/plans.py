"""What a strategy asks a policy, by the kind of guesses it makes: the plans of one run."""

from collections.abc import Callable
from typing import Protocol, runtime_checkable

from mtdecode.tensor_types import Bool, Float, Int, Tensor


@runtime_checkable
class ChainPlan(Protocol):
    """A chain of guesses from a draft (`Speculative`, `MTAD`), asked before drafting, before the first guess, after
    each guess and after verifying."""

    #: the most guesses of a step
    most: int

    def rests(self, rows: Bool[Tensor, " batch"], unread: list[int]) -> bool:
        """Whether this step is a plain one, without drafting (`rows`: those that could draft; `unread`: the tokens
        the draft must read first, per row)."""
        ...

    def first(self, rows: Bool[Tensor, " batch"], unread: list[int]) -> Bool[Tensor, " batch"]:
        """Of `rows`, those that draft a first guess."""
        ...

    def more(
        self, rows: Bool[Tensor, " batch"], confidence: Callable[[], Float[Tensor, " batch"]]
    ) -> Bool[Tensor, " batch"]:
        """Of `rows`, those that draft one more guess, given q's `confidence` in the guess just drawn."""
        ...

    def record(self, drafted: Int[Tensor, " batch"], accepted: Int[Tensor, " batch"]) -> None:
        """After verifying: each row drafted `drafted` guesses and kept `accepted`."""
        ...
