"""The lookahead-decoding input: a Jacobi window and verification candidates in one forward pass.

Fu et al. (ICML 2024), Section 3 and Figure 2. One forward pass feeds, in this order:

    [context: u committed tokens, the last is x0] [window row 0: L-1] [rows 1..R-1: L each] [g candidates: m each]

- The **context** is what the model has not read yet: the newest committed token x0
  (the whole prompt on the first step). It is causal, like any left-to-right input.
- The **window** has R rows (the paper's N-1 levels) and L columns (W). Cell (0, 0) is
  x0 itself, so row 0 adds L-1 tokens. Cell (r, j) sits at position p + r + j, where p is
  x0's position, and sees row 0 up to column j and column j from row 1 down to row r:
  together one left-to-right sequence of guesses ending in (r, j).
- **Candidate** c (an n-gram from the pool) sees x0 and its own tokens up to k; its token
  k sits at p + 1 + k, where it would be if it were accepted.
- Everything sees the committed prefix in the cache and the context; nothing crosses
  between the window and the candidates, or between two candidates.

`LookaheadLayout` is the one place that knows where each token goes: strategies ask it for
the index of a cell or a candidate token, and for the matching mask and position ids.
"""

from dataclasses import dataclass

import torch

from mtdecode.tensor_types import Bool, Int, Tensor


@dataclass(frozen=True)
class LookaheadLayout:
    """Where the context, the window cells and the candidate tokens sit in one lookahead input.

    **Arguments:**

    - `context`: committed tokens fed first (at least 1; the last is x0 = cell (0, 0)).
    - `rows`, `columns`: the window's size, R (the paper's N-1) by L (the paper's W), each at least 1.
    - `candidates`, `length`: g candidate n-grams of m tokens each (g may be 0).
    """

    context: int
    rows: int
    columns: int
    candidates: int = 0
    length: int = 0

    def __post_init__(self) -> None:
        if self.context < 1 or self.rows < 1 or self.columns < 1:
            raise ValueError(f"context, rows and columns must be >= 1, got {self}")
        if self.candidates < 0 or self.length < 0 or (self.candidates > 0) != (self.length > 0):
            raise ValueError(f"candidates and length must both be 0 or both be >= 1, got {self}")

    @property
    def candidate_start(self) -> int:
        """Index of candidate 0's token 0."""
        return self.context + self.columns - 1 + (self.rows - 1) * self.columns

    @property
    def size(self) -> int:
        """Number of tokens fed in the forward pass."""
        return self.candidate_start + self.candidates * self.length

    def cell(self, r: int, j: int) -> int:
        """Index of window cell (r, j) in the input; (0, 0) is x0, the last context token."""
        if not (0 <= r < self.rows and 0 <= j < self.columns):
            raise IndexError(f"cell ({r}, {j}) is outside a {self.rows} x {self.columns} window")
        if r == 0:
            return self.context - 1 + j
        return self.context + self.columns - 1 + (r - 1) * self.columns + j

    def candidate(self, c: int, k: int) -> int:
        """Index of candidate c's token k in the input."""
        if not (0 <= c < self.candidates and 0 <= k < self.length):
            raise IndexError(f"candidate token ({c}, {k}) is outside {self.candidates} candidates of {self.length}")
        return self.candidate_start + c * self.length + k

    def row(self, r: int) -> list[int]:
        """Indices of window row r, columns 0..L-1 (row 0 starts with x0)."""
        return [self.cell(r, j) for j in range(self.columns)]

    def positions(self, prefix: int = 0, device: torch.device | str | None = None) -> Int[Tensor, " new"]:
        """Position ids: context token i at prefix + i; cell (r, j) at p + r + j; candidate token k at p + 1 + k."""
        p = prefix + self.context - 1  # x0's position
        positions = torch.empty(self.size, dtype=torch.long, device="cpu")
        positions[: self.context] = torch.arange(prefix, p + 1, device="cpu")
        for r in range(self.rows):
            for j in range(1 if r == 0 else 0, self.columns):
                positions[self.cell(r, j)] = p + r + j
        for c in range(self.candidates):
            start = self.candidate(c, 0)
            positions[start : start + self.length] = torch.arange(p + 1, p + 1 + self.length, device="cpu")
        return positions.to(device)

    def mask(self, prefix: int = 0, device: torch.device | str | None = None) -> Bool[Tensor, "query key"]:
        """The boolean mask over (prefix + new) keys described in the module docstring."""
        u, size = self.context, self.size
        among_new = torch.zeros(size, size, dtype=torch.bool, device="cpu")  # (query, new)
        among_new[:u, :u] = torch.ones(u, u, dtype=torch.bool, device="cpu").tril()  # the context is causal
        among_new[u:, :u] = True  # window and candidates see the whole context, x0 included
        for r in range(self.rows):
            for j in range(1 if r == 0 else 0, self.columns):
                query = self.cell(r, j)
                among_new[query, [self.cell(0, jj) for jj in range(1, j + 1)]] = True  # row 0 up to column j
                among_new[query, [self.cell(rr, j) for rr in range(1, r + 1)]] = True  # column j, rows 1..r
        for c in range(self.candidates):
            start = self.candidate(c, 0)
            own = slice(start, start + self.length)
            among_new[own, own] = torch.ones(self.length, self.length, dtype=torch.bool, device="cpu").tril()
        sees_prefix = torch.ones(size, prefix, dtype=torch.bool, device="cpu")  # (query, prefix)
        return torch.cat([sees_prefix, among_new], dim=1).to(device)
