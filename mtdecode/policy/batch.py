"""The batch rule.

**A batch's goodput.** In a batch every row's tokens go through the same forward, padded to the
widest row, and the draft runs for every row while any row drafts: a step costs t_B(w) + (w - 1) c_B,
with w the widest row's tokens and B the batch's rows, whatever the other rows feed. On a CPU a forward
over B rows grows with their tokens much faster than one over a single row (`mtdecode.costs`
measures t(B, n)), so a guess that pays for one row can cost more than it brings in a batch. And a
batch of prompts runs until its last row ends: a row that guesses well and ends early leaves its
place idle, so the batch's tokens per second rise only when its slowest rows go faster. Given
`BatchCosts` (the default, measured), the rule weighs the batch as one, by when it would end if
every step were like this one (`BatchRule.finish`):

    F(step) = T_B(step) * max over the rows in play of  m_b / E_b(step)                 (batch rule)

with m_b the tokens left in row b's budget and E_b(step) the tokens row b is expected to commit in
the step. It drafts one more guess for every row while that lowers F, and where the chances are known
in advance it picks the width w with the lowest F (row b verifies min(w, its guesses)). Costs are in
units of t_1(1), so that steps of any batch compare.

- The first guess of a step also pays for the draft's catch-up, where the draft must first read what
  was committed while the batch did not draft (the prompt, on the first step; `DraftCosts.catch_up`).
- A row whose guesses do not pay still verifies what the batch's width holds for it, at no extra cost.
- The rows share their calibration (the draft and the target are the same for every row), each row's chances
  scaled by how its own guesses fared against the pool's, and a row's acceptance a is its own record with the
  pool's rate as prior (`BatchRule.own_acceptance`): the rows that set the batch's end are the ones whose
  guesses fail most, and a pooled chance alone overrates them.
- When the guesses do not pay, the batch decodes at greedy cost. It tries one guess in every row after
  `PATIENCE` such steps (twice as long after each try that did not pay, or after which the batch at once
  drafted nothing) while a first guess could
  still pay at an optimistic estimate of the rows' acceptance, so rows rejoin when guesses pay again.
  A strategy whose drafting costs work before the rule can weigh its guesses (EAGLE's head), or whose draft must
  first read the prompts (a draft model), starts as a rested batch (`wait_first`): its first drafting step is a try
  that pays for that work, since the prior acceptance cannot say whether this batch's slowest row will repay it. It
  asks `BatchRule.idle` whether the batch should rest, and skips that work then; so does every strategy whose
  guesses' chances change only when guesses are verified (a draft's acceptance, Jacobi's record), which rests on
  without weighing them again until its next try.
- At batch 1 the rule above decides. With `DraftCosts` (one row's), each row weighs its own steps
  alone, as if the batch were free: then a row decodes exactly as its prompt alone.
"""

from collections.abc import Callable

import torch

from mtdecode.costs import BatchCosts
from mtdecode.policy.calibration import PooledCalibration
from mtdecode.policy.rule import PATIENCE, Rule
from mtdecode.tensor_types import Bool, Float, Int, Tensor


class BatchRule(Rule):
    """The batch rule (the module's docstring): the rows weighed as one, by when the batch would end. Arguments as
    `mtdecode.policy.rule.rule_for`'s; `wait_first` starts it rested, so that its first drafting step is a try that
    must pay for the work it needs first (a head reading the prompts' features, a draft model reading the prompts
    on an acceptance no row has shown yet: the batch's end is set by its slowest row)."""

    pools_rows = True

    calibration_of = PooledCalibration

    def prepare(self, costs: BatchCosts, wait_first: bool) -> None:
        self.margin = costs.margin  # guesses must end the batch this much sooner to count
        # the batch's steps without drafting and its patience; `waiting`: not drafted yet (its first step is a try)
        self.batch_rested, self.batch_patience, self.waiting = (PATIENCE if wait_first else 0), PATIENCE, wait_first
        self.asked = 0.0  # the catch-up that `idle` last weighed a try against
        self.tried = False  # the batch's last step was a try that paid for its guess (`record`)

    # ------------------------------------------------------------------ a chain

    def first(self, unread: list[int], left: list[int] | list[float]) -> Bool[Tensor, " batch"]:
        """`start`'s choice: every row in play drafts, or none; the first guess pays for the widest row's catch-up
        (every row feeds as many); a waiting batch begins with a try."""
        self.reading = self.costs.catch_up(max(unread))  # the whole catch-up, which a try weighs (`may_try`)
        self.setup = self.reading / max(left)
        pays = torch.zeros_like(self.playing) if self.waiting else self.pays().expand(self.batch)
        self.probing = self.playing & ~pays & self.may_try()
        return pays

    def grown(self) -> Float[Tensor, " batch"]:  # the rows that drew guess i: their E(i) grows, the others' stays
        return torch.where(self.going, self.survive, 0.0)

    def still_going(self, pays: Bool[Tensor, " batch"]) -> Bool[Tensor, " batch"]:  # every row in play, or none
        return self.going & pays

    def pays(self) -> Bool[Tensor, " batch"]:
        """(batch rule) for guess i + 1: the batch's finish with it against without it, one answer for every row."""
        i = len(self.confidences)
        added = self.costs.step(i + 1) - self.costs.step(i)  # c + t(i + 2) - t(i + 1), and o for the first guess
        added += self.setup if i == 0 else 0.0
        gain = torch.where(self.going, self.survive * self.upcoming_chance(), 0.0)  # each row's extra tokens
        spent = self.costs.step(i) + (self.setup if i > 0 else 0.0)
        both = torch.stack([self.expected, self.expected + gain], dim=1)  # (batch, 2): without and with it
        costs = torch.tensor([spent, spent + added], dtype=torch.float64, device=both.device)
        now, more = self.finish(both, costs, self.playing).tolist()
        pays = more < now * (1 - self.margin) and (i == 0 or not bool(self.probing.any()))
        return torch.full_like(self.going, pays)

    # ------------------------------------------------------------------ known chances

    def choose(
        self,
        expected: Float[Tensor, "batch options"] | Callable[[], Float[Tensor, "batch options"]],
        available: Int[Tensor, " batch"],
    ) -> Int[Tensor, " batch"]:
        """`plan_expected` for the batch: the width w with which it would end soonest (`finish`); row b verifies
        min(w, available[b]). A step that `stays` is planned without weighing `expected`."""
        best = 0 if self.stays(available) else self.width(expected() if callable(expected) else expected, available)
        could = (available > 0) & self.playing
        probe = best == 0 and bool(could.any()) and self.may_try()
        self.probing = could & probe
        self.declined += (could & (best == 0) & ~self.probing).sum().to(self.declined)
        return available.clamp(max=1 if probe else best) * self.playing

    def stays(self, available: Int[Tensor, " batch"]) -> bool:
        """Whether `width` is 0 whatever the chances: a row in play with nothing to verify has as many tokens left
        as any row in play, so the batch ends with it (one token a step) whatever the others verify, and a wider
        step only costs more, unless some T(w) undercuts T(0) by the margin. Such steps spare weighing chances."""
        playing, guesses = self.playing.tolist(), available.tolist()  # a few numbers: Python, not small tensors
        left = self.remaining().tolist() if self.remaining is not None else [1] * len(guesses)
        resting = [n for n, play, k in zip(left, playing, guesses, strict=True) if play and k == 0]
        if not resting or max(resting) < max(n for n, play in zip(left, playing, strict=True) if play):
            return False
        dearer = [self.costs.step(k) for k in range(1, max(guesses) + 1)]  # T(1..most guesses)
        return min(dearer, default=torch.inf) >= self.costs.step(0) * (1 - self.margin)

    def width(
        self,
        expected: Float[Tensor, "batch options"],
        available: Int[Tensor, " batch"],
        cost: Float[Tensor, " options"] | None = None,
        extra: float = 0.0,
    ) -> int:
        """The width w with which the batch would end soonest (`finish`), row b verifying min(w, `available[b]`)
        guesses worth `expected[b]` E(0..width), a step with guesses costing `extra` more; 0 unless w beats none by
        the margin."""
        width = min(expected.shape[1] - 1, int(available.max()))
        expected = expected[:, : width + 1]
        device = expected.device
        cost = self.step_costs(range(width + 1)).to(device) if cost is None else cost[: width + 1]
        cost = cost + torch.where(torch.arange(width + 1, device=device) > 0, extra, 0.0).to(cost)
        widths = torch.arange(width + 1, device=device)
        upto = torch.minimum(widths, available.to(device).clamp(max=width)[:, None])  # (batch, options)
        ends = self.finish(expected.double().gather(1, upto), cost, self.playing)  # (options,)
        best = int(ends.argmin())  # the first of equals
        return best if ends[best] < ends[0] * (1 - self.margin) else 0

    # ------------------------------------------------------------------ rests and tries

    def idle(
        self,
        expected: Float[Tensor, "batch options"] | None = None,
        available: Int[Tensor, " batch"] | None = None,
        reading: float = 0.0,
        extra: float = 0.0,
        rows: Bool[Tensor, " batch"] | None = None,
    ) -> bool:
        """Whether the batch rests this step, skipping the work drafting needs before its guesses can be weighed
        (`extra` each drafting step, and first `reading`, the catch-up): its last step verified no guess (or it
        waits first), no try is due (`may_try`), and no guess whose chances are known before drafting (`expected`,
        E(0..width) per row of `available` guesses, such as a copy) would pay with that work. Without `expected`
        (chances that change only when guesses are verified), it rests on while `rows` are its last step's rows."""
        self.asked = reading  # the catch-up a try would pay for now, as last weighed here (the choice words it)
        if self.batch_rested == 0 or self.may_try(reading, extra):
            return False
        if rows is not None and not torch.equal(rows.to(self.playing.device), self.playing):
            return False
        if expected is None or available is None:
            return True
        return self.width(expected, available, extra=extra + reading) == 0

    def may_try(self, reading: float | None = None, extra: float = 0.0) -> bool:
        """Whether a resting batch tries one guess in every row: it rested `PATIENCE` steps (more after tries that
        did not pay), and a first guess could pay at an optimistic acceptance (`Calibration.optimistic`) with the
        draft's whole catch-up (`reading`; default: `start`'s) and any other work it needs (`extra`)."""
        if self.batch_rested < self.batch_patience or not self.left_for_try(self.batch_patience).any():
            return False
        reading = self.reading if reading is None else reading
        added = self.costs.step(1) - self.costs.step(0) + reading + extra
        return bool(self.calibration.optimistic()[0] * self.costs.step(0) * (1 - self.margin) > added)

    def recorded(self, drafted: Int[Tensor, " batch"], accepted: Int[Tensor, " batch"]) -> None:
        """Before `Rule.record`: the batch's rests and patience, reset by a try that paid and after which the batch
        drafted on, doubled by one that did not pay or after which it at once drafted nothing."""
        playing = self.playing
        width = int(drafted[playing].max()) if bool(playing.any()) else 0
        tried, self.tried = self.tried, False
        if width == 0:
            if tried:  # the step after a try drafted nothing: the try did not pay after all
                self.batch_patience = 2 * self.batch_patience
            self.batch_rested += 1
        else:
            self.waiting = False
            if bool(self.probing.any()):
                added = self.costs.step(1) - self.costs.step(0)
                paid = float(accepted[playing].sum()) * self.costs.step(0) > float(playing.sum()) * added
                self.batch_patience = PATIENCE if paid else 2 * self.batch_patience
                self.tried = paid
            self.batch_rested = 0

    # ------------------------------------------------------------------ the batch's end

    def worth(
        self,
        gain: Float[Tensor, " batch"],
        cost: float,
        rows: Bool[Tensor, " batch"],
        expected: Float[Tensor, " batch"] | None = None,
        spent: float = 1.0,
    ) -> Bool[Tensor, " batch"]:
        """Whether work of `cost` adding `gain[b]` expected tokens to row b ends the batch sooner (`finish`, the step
        so far making `expected[b]` tokens at a cost of `spent`; one answer for every row of `rows`)."""
        expected = torch.ones_like(gain) if expected is None else expected.double()
        costs = torch.tensor([spent, spent + cost], dtype=torch.float64, device=gain.device)
        both = torch.stack([expected, expected + torch.where(rows, gain.double(), 0.0)], dim=1)  # (batch, 2)
        now, more = self.finish(both, costs, rows).tolist()
        return rows & (more < now * (1 - self.margin))

    def finish(
        self, expected: Float[Tensor, "batch options"], cost: Float[Tensor, " options"], rows: Bool[Tensor, " batch"]
    ) -> Float[Tensor, " options"]:
        """The batch's time to its last row's end if every step were like this one, for each option: the step's
        `cost` times the most steps any row in play (`rows`; `playing` for the whole batch) still needs, its budget
        over its `expected` tokens."""
        left = self.remaining().double().clamp(min=1) if self.remaining is not None else torch.ones_like(expected[:, 0])
        steps = torch.where(rows[:, None], left.to(expected)[:, None] / expected.clamp(min=1e-9), 0.0)
        return cost.to(expected) * steps.max(0).values
