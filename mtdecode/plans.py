"""What a strategy asks a policy, by the kind of guesses it makes: the plans of one run."""

from collections.abc import Callable
from typing import Protocol, runtime_checkable

from mtdecode.tensor_types import Bool, Float, Int, Tensor

#: a count per row
PerRow = Int[Tensor, " batch"]
#: what a tree's verified nodes showed: the head's confidences, which were tried, which held (None: no node verified)
Tried = tuple[Float[Tensor, "batch n"], Bool[Tensor, "batch n"], Bool[Tensor, "batch n"]] | None


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


@runtime_checkable
class TreePlan(Protocol):
    """A tree of guesses (`Eagle`), asked before drafting, as the tree grows, when it is sized and after verifying."""

    def rests(
        self, expected: Float[Tensor, "batch options"] | None, available: Int[Tensor, " batch"] | None, unread: int
    ) -> bool:
        """Whether this step is a plain one and the head rests (`expected`, `available`: what each row's copy alone
        would bring, None without copies; `unread`: the features per row the head must read first)."""
        ...

    def calibrated(self, confidence: Float[Tensor, "batch node"]) -> Float[Tensor, "batch node"]:
        """P(a node is accepted | its parent is), from the head's confidence in it."""
        ...

    def grows(
        self, depth: int, nodes: int, gain: Float[Tensor, " batch"], expected: Float[Tensor, " batch"],
        rows: Bool[Tensor, " batch"],
    ) -> Bool[Tensor, " batch"]:  # fmt: skip
        """Which of `rows` grow their tree to `depth` (its nodes would add at most `gain` expected tokens)."""
        ...

    def size(self, worth: Float[Tensor, "batch node"], available: Int[Tensor, " batch"]) -> Int[Tensor, " batch"]:
        """How many of its `available` worthiest nodes each row verifies."""
        ...

    def record(self, verified: PerRow, accepted: PerRow, depths: PerRow, tried: Callable[[], Tried]) -> None:
        """After verifying (`tried()`: the head's verified nodes' confidences, which were tried, which held)."""
        ...

    def rests_after(self, verified: Int[Tensor, " batch"]) -> bool:
        """Whether the batch starts a rest at once after a step that verified `verified` nodes per row."""
        ...
