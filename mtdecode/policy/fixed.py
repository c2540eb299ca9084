"""The paper's own setting: k guesses every step, as given, nothing measured."""

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import torch

from mtdecode.model import Runner
from mtdecode.session import Session
from mtdecode.strategy import check_counts
from mtdecode.tensor_types import Bool, Float, Int, Tensor
from mtdecode.zoo.eagle import HeadRunner

#: what a step found to verify: copies (lists of tokens per row) or counts of guesses per row
Found = TypeVar("Found")


@dataclass(frozen=True)
class Fixed:
    """Draft and verify `k` guesses every step (fewer where a row's budget ends), never rest.

    It keeps nothing from step to step, so it is its own plan for every kind of guess, and a run with it makes the
    same forwards on any host and on every rank.
    """

    k: int

    @property
    def most(self) -> int:
        """The most guesses of a step: k."""
        return self.k

    def __post_init__(self) -> None:
        check_counts(self, ("k",))

    # ------------------------------------------------------------------ the plans of a run (`mtdecode.policy`)

    def chain(self, s: Session, draft: Runner, *, most: int, name: str, drafting: str = "") -> "Fixed":
        return self

    def beams(self, s: Session, draft: Runner, *, width: int, most: int) -> "Fixed":
        return self

    def copies(self, s: Session, *, most: int) -> "Fixed":
        return self

    def block(self, s: Session, *, most: int) -> "Fixed":
        return self

    def tree(self, s: Session, head: HeadRunner, *, depth: int, width: int, lookup: int, timed: Callable) -> "Fixed":
        return self

    # ------------------------------------------------------------------ the plans' fixed points

    def rests(self, *before: object) -> bool:
        """Never: every step drafts."""
        return False

    def first(self, rows: Bool[Tensor, " batch"], unread: list[int]) -> Bool[Tensor, " batch"]:
        return rows

    def more(
        self, rows: Bool[Tensor, " batch"], confidence: Callable[[], Float[Tensor, " batch"]]
    ) -> Bool[Tensor, " batch"]:
        return rows

    def verify(self, available: Found, *facts: object) -> Found:
        """Verify everything found (copies, guesses: each row's own, within its budget)."""
        return available

    def record(self, *outcome: object) -> None:
        """Nothing to learn."""

    # ------------------------------------------------------------------ a tree's (`Eagle`'s tree_size=k)

    def calibrated(self, confidence: Float[Tensor, "batch node"]) -> Float[Tensor, "batch node"]:
        """A node's worth is the head's own confidence (times its parent's: the path value)."""
        return confidence

    def grows(self, depth: int, nodes: int, gain: Tensor, expected: Tensor, rows: Bool[Tensor, " batch"]) -> Tensor:
        """Every row grows the whole depth."""
        return torch.ones_like(rows)

    def size(self, worth: Float[Tensor, "batch node"], available: Int[Tensor, " batch"]) -> Int[Tensor, " batch"]:
        """The best k nodes, as many as there are."""
        return available.clamp(max=self.k)

    def rests_after(self, verified: Int[Tensor, " batch"]) -> bool:
        return False
