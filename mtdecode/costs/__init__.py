"""What a step costs: the records a drafting policy weighs, in units of one 1-token target forward of one row.

A speculative step with k guesses costs T(k) = t(k + 1) + k c (+ o when it verifies any), with t(n) a target forward
over n tokens and c a draft forward (`DraftCosts`); a batch's forwards cost more with its rows (`BatchCosts`). The
records are plain data: measured on a host (`mtdecode.costs.curves`), kept on disk, shipped as reference values,
or written by hand, and every process that holds the same record makes the same choices.
"""

import bisect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import no_type_check


@no_type_check  # plain numbers, called per row per step (see `mtdecode.tensor_types`)
def on_line(x: int, known: Sequence[int], value: Callable[[int], float]) -> float:
    """The cost at `x` on the broken line through the `known` points (ascending, at least two; `value(k)` is the
    cost at point k, asked for at the two points used only): exact at a known point, linear between two, and past
    either end the nearest segment continued. Every cost curve of the package is read this way."""
    i = bisect.bisect_left(known, x)
    if i < len(known) and known[i] == x:
        return value(x)
    i = min(max(i, 1), len(known) - 1)  # the segment [known[i - 1], known[i]], or the nearest one past an end
    below, above = known[i - 1], known[i]
    low = value(below)
    return low + (value(above) - low) * (x - below) / (above - below)


@dataclass(frozen=True)
class DraftCosts:
    """What a step costs, in units of one 1-token target forward.

    **Arguments:**

    - `draft`: c, one draft forward (over one token per row); 0 for guesses that cost nothing to make
      (copied from the text, as in prompt lookup).
    - `target`: t(1), t(2), ...: a target forward over 1, 2, ... tokens (so `target[0]` is 1).
    - `overhead`: o, what a step that verifies guesses spends besides its forwards beyond what a plain step spends
      (verifying, rolling the caches back, the rule itself); 0 by default. `mtdecode.costs.curves` sets it for one row
      (`curves.BOOKKEEPING`); for a batch the rule's margin holds it instead (`BatchCosts.margin`).
    """

    draft: float | int
    target: Sequence[float | int]
    overhead: float | int = 0.0

    def __post_init__(self) -> None:
        if not self.draft >= 0 or len(self.target) < 2 or any(not t > 0 for t in self.target):
            raise ValueError(f"costs must be positive (c may be 0), with t(1) and t(2) at least, got {self}")
        if not self.overhead >= 0:
            raise ValueError(f"overhead must be >= 0, got {self.overhead}")

    @no_type_check  # plain numbers, called per row per step (see `mtdecode.tensor_types`)
    def t(self, tokens: int) -> float:
        """t(tokens); past the last measured size the last step is continued (`on_line`)."""
        if tokens <= len(self.target):
            return self.target[tokens - 1]
        return on_line(tokens, range(1, len(self.target) + 1), lambda n: self.target[n - 1])

    @no_type_check
    def catch_up(self, unread: int) -> float:
        """What the draft's first forward of a step costs beyond one token per row when it must first read `unread`
        tokens per row: c (t(unread) / t(1) - 1), its forward taken to grow with its tokens as the target's does."""
        return self.draft * (self.t(max(unread, 1)) / self.t(1) - 1)

    def step(self, guesses: int) -> float:
        """T(k) = t(k + 1) + k c, and + o for k > 0."""
        return self.t(guesses + 1) + guesses * self.draft + (self.overhead if guesses > 0 else 0.0)


@dataclass(frozen=True)
class BatchCosts:
    """What a step of a whole batch costs, by the number of rows in its forwards: weighed as one (the batch's
    goodput, see the module's docstring).

    **Arguments:**

    - `by_rows`: rows B -> the `DraftCosts` of forwards over B rows side by side (t_B(n): a target forward over n
      tokens per row; c_B: a draft forward over one token per row), in units of one 1-token target forward of
      one row, so that steps of different batches compare. Between measured numbers of rows they are
      interpolated linearly, and continued past the largest.
    - `margin`: how much sooner a step with guesses must be predicted to end the batch than one without, as a
      fraction, before it counts as a gain: how uncertain the measured costs are and what the model leaves out (each
      step's bookkeeping). `mtdecode.costs.curves.batch_draft_costs` sets it from the measurement.
    """

    by_rows: Mapping[int, DraftCosts]
    margin: float = 0.0

    def __post_init__(self) -> None:
        if not self.by_rows or any(isinstance(r, bool) or not isinstance(r, int) or r < 1 for r in self.by_rows):
            raise ValueError(f"by_rows must map numbers of rows >= 1 to DraftCosts, got {dict(self.by_rows)}")
        if not 0 <= self.margin < 1:
            raise ValueError(f"margin must be in [0, 1), got {self.margin}")

    def at(self, rows: int) -> DraftCosts:
        """The costs of forwards over `rows` rows: each cost on the line through the measured numbers of rows
        (`on_line`)."""
        if rows in self.by_rows:
            return self.by_rows[rows]
        measured = sorted(self.by_rows)
        if len(measured) == 1:
            raise ValueError(f"costs for {rows} rows were not given, only for {measured[0]}")

        def at(cost: Callable[[DraftCosts], float]) -> float:
            return on_line(rows, measured, lambda r: cost(self.by_rows[r]))

        width = max(len(costs.target) for costs in self.by_rows.values())
        target = [at(lambda costs, n=n: costs.t(n)) for n in range(1, width + 1)]
        return DraftCosts(max(0.0, at(lambda c: c.draft)), target, max(0.0, at(lambda c: c.overhead)))


def candidate_costs(
    curve: DraftCosts | BatchCosts, rows: int, window: int, ngram: int, guesses: int
) -> DraftCosts | BatchCosts:
    """What a lookahead step of `rows` rows costs with 0, 1, ..., `guesses` candidates verified, read off the forward
    costs `curve` (`step(g)` is the forward over x0, the window's (W + g)(N - 1) - 1 other cells and g candidates of
    N - 1 tokens, in every row; as `DraftCosts.target`, indexed by candidates), with the curve's overhead and
    margin: a batch's (`BatchCosts`) from a batch's curve, one row's from one row's."""
    base = curve.at(rows) if isinstance(curve, BatchCosts) else curve
    steps = [base.t((window + g) * (ngram - 1)) for g in range(guesses + 1)]
    candidates = DraftCosts(draft=0.0, target=steps, overhead=base.overhead)
    return BatchCosts({rows: candidates}, margin=curve.margin) if isinstance(curve, BatchCosts) else candidates
