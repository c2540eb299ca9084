"""Lookahead's window (Section 3.1): the last N - 1 Jacobi iterates of every row."""

import torch

from mtdecode.tensor_types import Int, Tensor


class Window:
    """The lookahead branch of every row: rows of Jacobi guesses; cell (0, 0) is always x0, the newest committed token.

    Row 0 is stored without x0 (`columns - 1` tokens); rows 1.. have `columns` tokens; each is a
    `(batch, tokens)` tensor. Warm-up (as the paper's code does it) starts from one row of
    W + N - 3 tokens: each step adds a row and drops a column, so after N - 2 steps the window
    has N - 1 rows of W columns.
    """

    def __init__(self, rows: list[Int[Tensor, "batch tokens"]], depth: int) -> None:
        self.rows = rows
        self.depth = depth  # N - 1, the number of rows once warmed up

    @property
    def columns(self) -> int:
        return self.rows[0].shape[1] + 1

    @property
    def full(self) -> bool:
        return len(self.rows) == self.depth

    def grid(self, x0: Int[Tensor, " batch"]) -> Int[Tensor, "batch rows columns"]:
        """The rows with x0 put in front of row 0."""
        return torch.stack([torch.cat([x0[:, None], self.rows[0]], dim=1), *self.rows[1:]], dim=1)

    def slide(self, new_row: Int[Tensor, "batch columns"]) -> None:
        """Move the window one Jacobi iteration on, after the step committed a token.

        While warming up, every row (and the new one) drops its first column, the position
        just committed, and the new row is added below. Once full, every row moves up a level:
        row 1 becomes row 0 (its first cell is now the committed token), the new row comes last.
        """
        if not self.full:
            self.rows = [row[:, 1:] for row in self.rows] + [new_row[:, 1:]]
        else:
            levels = [*self.rows[1:], new_row]
            self.rows = [levels[0][:, 1:], *levels[1:]]
