"""When to stop drafting: draft one more guess while it is expected to pay for itself.

A speculative step with k guesses costs, in units of one 1-token target forward,

    T(k) = t(k + 1) + k c          t(n): a target forward over n tokens;  c: a draft forward

and yields E(k) = 1 + pi_1 + ... + pi_k tokens on average, where pi_i is the chance that
guesses 1..i are all accepted. Over many steps the speed is E/T (tokens per unit of cost), so
one more guess raises it if and only if its expected tokens per added cost beat the step's
rate so far:

    pi_i * a / (c + t(i + 2) - t(i + 1))  >  E(i) / T(i)                        (rule)

- pi_i is estimated from the draft's own confidence in each guess (q's probability of the
  token it drew; at temperature 0 the draft's softmax), calibrated per row by how often
  guesses of that confidence were accepted earlier in the run, starting from the confidence
  scaled by how often the row's guesses of every confidence were accepted against it (a scale
  above 1 only at the places of a chain that the row's verified chains reached);
- a, the chance that the next, not yet drafted guess is accepted, is the row's acceptance
  rate so far (from a prior: the draft's measured acceptance, `mtdecode.costs.priors.draft_acceptance`,
  or an even chance), or, where that chance is known before the guess is made (a copied token's
  position, in prompt lookup), that;
- t and c are measured on the host (`mtdecode.costs.curves.draft_costs`);
- the first guess of a step also pays for the draft reading what it missed (the prompt, at
  first), c (t(u) / t(1) - 1) for u unread tokens, spread over the tokens the row has left, since
  a draft that has caught up costs no more in later steps.

Where every guess's chance is known before any is verified (prompt lookup's copied tokens, whose
positions' acceptance is on record), `Rule.plan` picks the number of guesses k at once, as
the k that maximises E(k) - r T(k), with r the row's rate so far (tokens per unit of cost): unlike
growing the draft one guess at a time, it sees past a dearer width to a cheaper wider one (on some
hosts a forward over 2 tokens costs more than one over 4).

A row whose acceptance says that not even a first guess pays drafts nothing, at greedy cost;
so that a bad start does not stop it for good, it tries one guess after `PATIENCE` steps
without drafting, and waits twice as long after each try that is rejected; it tries only while
a first guess could pay at an optimistic acceptance (its rate plus one standard error, at most 1)
and more than twice as many tokens are left as it waited (a try near the end teaches nothing
that could still be used). The rule counts
those row steps (`Rule.declined`), and `drafting_choice` words what it chose over a run
for `Stats.choices`: a run in which no row step drafted because no guess paid decoded greedily.

This is transformers' `assistant_confidence_threshold` (stop when the draft's confidence in
its last guess falls below 0.4) with the threshold derived from measured costs and acceptance
instead of fixed, and with the whole chain's survival instead of the last guess alone.

**Exactness.** The rule reads only q and the results of earlier steps, never this step's p:
the number of guesses is fixed before the target verifies them, and Leviathan et al.'s
argument (each position's output is p whatever the guess was) holds for any such k. A rule
that looks at p is wrong (`mtdecode.testing.mutants.stop_rule_peeks_at_p`). A guess is never
dropped after it was drawn: that would condition it on its own value, and it would no longer
be a draw from q.
"""

from collections.abc import Callable, Sequence
from typing import ClassVar

import torch

from mtdecode.costs import BatchCosts, DraftCosts
from mtdecode.policy.calibration import PRIOR, Calibration
from mtdecode.tensor_types import Bool, Float, Int, Tensor

#: a row that stopped drafting altogether tries one guess again after this many steps without (then
#: after twice as many each time the try is rejected), so a bad start does not stop it for good
PATIENCE = 4


def rule_for(costs: DraftCosts | BatchCosts, batch: int, *args: object, **kwargs: object) -> "Rule":
    """The rule for `batch` rows weighing `costs`: the batch rule (`mtdecode.policy.batch.BatchRule`) for a batch
    given `BatchCosts`, else the row rule (`RowRule`: each row weighs its own steps alone); the other arguments are
    the rule's (`Rule`):

    - `costs`: the measured costs: `BatchCosts` to weigh the batch's goodput, or one row's `DraftCosts` to weigh
      each row alone. At batch 1 the two are one rule.
    - `batch`: rows; `device`: where the row tensors live.
    - `remaining`: a function giving each row's tokens left in its budget (`Session.remaining`); the batch rule
      weighs how soon the batch's last row ends by it (None: every row's alike).
    - `acceptance`: the chance that a first guess is accepted before any was verified, the prior of the rows'
      acceptance (worth `PRIOR` guesses): 1/2 by default; a draft's own, measured once per host
      (`mtdecode.costs.priors.draft_acceptance`), keeps a draft that is seldom right from being tried and lets one
      that is often right draft from the first step.
    - `wait_first`: with the batch rule, start as a batch that has rested its patience, so that its first drafting
      step is a try that pays for the work it needs first (`BatchRule`).
    """
    from mtdecode.policy.batch import BatchRule

    together = isinstance(costs, BatchCosts) and batch > 1
    return (BatchRule if together else RowRule)(costs, batch, *args, **kwargs)


class Rule:
    """The row rule and the batch rule's shared part: `start` a step, ask `more` after each guess, then `record` (or
    `plan` a step whose chances are known in advance, then `record`). Arguments as listed under `rule_for`."""

    pools_rows: ClassVar[bool] = False  # whether the rows share their records (the batch rule)
    calibration_of: ClassVar[type[Calibration]] = Calibration  # the record of verified guesses: each row's own

    def __init__(
        self,
        costs: DraftCosts | BatchCosts,
        batch: int,
        device: torch.device,
        remaining: Callable[[], Int[Tensor, " batch"]] | None = None,
        acceptance: float = 0.5,
        wait_first: bool = False,
    ) -> None:
        self.prepare(costs, wait_first)
        self.costs = costs.at(batch) if isinstance(costs, BatchCosts) else costs
        self.batch, self.device, self.remaining = batch, device, remaining  # remaining(): each row's tokens left
        self.calibration = self.calibration_of(batch, device, acceptance)
        self.planned: tuple[Tensor, list[Tensor], Tensor] | None = None  # `plan`'s last chances and E
        self.rested = torch.zeros(batch, dtype=torch.long, device=device)  # steps since the row last drafted
        self.patience = torch.full((batch,), PATIENCE, dtype=torch.long, device=device)
        self.gained, self.spent = torch.ones(2, batch, dtype=torch.float64, device=device)  # the rate, greedy's prior
        self.declined = torch.zeros((), dtype=torch.long, device=device)  # row steps no guess paid for
        self.playing = torch.ones(batch, dtype=torch.bool, device=device)  # the rows that take part in this step
        self.table = torch.empty(0, dtype=torch.float64, device="cpu")  # T(0), T(1), ... (`step_costs`)
        self.start()

    def prepare(self, costs: DraftCosts | BatchCosts, wait_first: bool) -> None:
        """What a rule sets up before its first step besides the rows' state (the batch rule's own record)."""

    def start(
        self,
        upcoming: Float[Tensor, " batch"] | None = None,
        possible: Bool[Tensor, " batch"] | None = None,
        unread: int | Sequence[int] = 1,
    ) -> Bool[Tensor, " batch"]:
        """A new step: which rows draft a first guess (the rule with i = 0). `upcoming`: the first guess's chance
        where it is known before drafting (default: a). `possible`: the rows that may draft (those the rule stops
        count in `declined`). `unread`: the tokens the draft must read first, per row; the first guess pays for that
        catch-up too (`DraftCosts.catch_up`), spread over the tokens left."""
        batch, device = self.batch, self.device
        self.survive = torch.ones(batch, dtype=torch.float64, device=device)  # pi_i
        self.expected = torch.ones(batch, dtype=torch.float64, device=device)  # E(i)
        self.confidences: list[Float[Tensor, " batch"]] = []
        self.upcoming = upcoming
        # copies: the caller goes on to narrow its own mask in place
        self.playing = torch.ones(batch, dtype=torch.bool, device=device) if possible is None else possible.clone()
        self.going = self.playing.clone()
        unread = [unread] * batch if isinstance(unread, int) else list(unread)
        left = (self.remaining() if self.remaining is not None else torch.ones(batch)).clamp(min=1).tolist()
        pays = self.first(unread, left)
        if possible is not None:
            self.declined += (possible & ~pays & ~self.probing).sum()
        self.going = self.playing & (pays | self.probing)
        return pays | self.probing

    def more(
        self,
        confidence: Float[Tensor, " batch"] | float,
        upcoming: Float[Tensor, " batch"] | None = None,
        rows: Bool[Tensor, " batch"] | None = None,
    ) -> Bool[Tensor, " batch"]:
        """After guess i, drawn with the draft's `confidence` in it: which rows draft guess i + 1. `upcoming`: its
        chance where known before drafting (default: a); `rows`: those that drew guess i and may draw another."""
        if isinstance(confidence, float):
            confidence = torch.full_like(self.survive, confidence)
        confidence = confidence.double().clamp(0, 1)
        self.upcoming = upcoming
        self.confidences.append(confidence)
        place = len(self.confidences) - 1  # guess i's place in the chain, from 0
        self.survive = self.survive * self.calibrated(confidence, place)  # pi_i = pi_{i-1} * P(guess i accepted)
        self.expected = self.expected + self.grown()  # E(i)
        if rows is not None:
            self.going = self.going & rows
        pays = self.pays()
        self.going = self.still_going(pays)
        return pays

    def still_going(self, pays: Bool[Tensor, " batch"]) -> Bool[Tensor, " batch"]:  # the rows drafting on
        return self.going

    def grown(self) -> Float[Tensor, " batch"]:  # what guess i adds to each row's E(i - 1)
        return self.survive

    def upcoming_chance(self) -> Float[Tensor, " batch"]:  # a: the next guess's chance, its confidence not weighed
        return self.calibration.own_acceptance() if self.upcoming is None else self.upcoming.to(self.survive)

    def plan(
        self,
        chances: Float[Tensor, "batch guesses"],
        available: Int[Tensor, " batch"],
        rows: Bool[Tensor, " batch"] | None = None,
    ) -> Int[Tensor, " batch"]:
        """A step whose guesses' chances are known before any is verified (`chances[b, i]`: guess i + 1's, given
        1..i held, calibrated as a confidence is): how many of row b's guesses to verify (`plan_expected`)."""
        if self.planned is None or self.planned[0] is not chances:  # the same chances as last time: the same E
            clamped = chances.double().clamp(0, 1)
            places = torch.arange(clamped.shape[1], device=clamped.device)
            survive = self.calibrated(clamped, places).cumprod(1)  # (batch, guesses): pi_1..pi_width
            self.planned = (chances, list(clamped.unbind(1)), expected_tokens(survive))
        _, confidences, expected = self.planned
        k = self.plan_expected(expected, available, rows)  # E(0..width)
        self.confidences = list(confidences)  # `record` counts those of guesses 1..k that were judged
        return k

    def plan_expected(
        self,
        expected: Float[Tensor, "batch options"] | Callable[[], Float[Tensor, "batch options"]],
        available: Int[Tensor, " batch"],
        rows: Bool[Tensor, " batch"] | None = None,
    ) -> Int[Tensor, " batch"]:
        """`plan` given E(0), E(1), ... per row (or a function giving them, called only where weighed), for guesses
        whose expected tokens the caller models: how many of its `available[b]` guesses row b verifies (`rows`: in
        play). Nothing is calibrated; a row with guesses that plans none counts in `declined`."""
        available = available.to(self.device)
        self.playing = torch.ones_like(available, dtype=torch.bool) if rows is None else rows.to(self.device).clone()
        self.confidences = []
        return self.choose(expected, available)

    def record(
        self,
        drafted: Int[Tensor, " batch"],
        accepted: Int[Tensor, " batch"],
        extra_cost: float | Float[Tensor, " batch"] = 0.0,
    ) -> None:
        """After verification: guesses 1..accepted held, guess accepted + 1 (if drafted) did not. `extra_cost`: what
        the step cost besides T(drafted) (a tree's drafting), for the row's rate."""
        self.recorded(drafted, accepted)
        drew = drafted > 0
        if not bool(drew.any()):  # a step at rest: a plain token per row, no try, nothing to calibrate
            self.rested += 1
            self.gained += 1
            self.spent += self.costs.step(0) + extra_cost
            return
        self.patience = torch.where(
            self.probing & drew, torch.where(accepted > 0, PATIENCE, 2 * self.patience), self.patience
        )
        self.rested = torch.where(drew, 0, self.rested + 1)
        self.gained += accepted.double() + 1
        self.spent += self.step_costs(drafted.cpu()).to(self.spent) + extra_cost
        if not self.confidences:  # guesses without confidences (lookahead's candidates): nothing to calibrate
            return
        self.calibration.reach(drafted)
        confidence = torch.stack(self.confidences, dim=1)  # (batch, guesses)
        self.calibrate(confidence, *chain_outcome(drafted, accepted, confidence.shape[1]))

    def recorded(self, drafted: Int[Tensor, " batch"], accepted: Int[Tensor, " batch"]) -> None:
        """What a rule notes of a step before the rows' record (the batch rule: its rests and patience)."""

    def calibrate(self, *outcome: Tensor) -> None:
        """Add verified guesses to the calibration (`Calibration.calibrate`'s confidence, tried, hit; `record` does
        for a chain; a tree's plan calls it itself)."""
        self.calibration.calibrate(*outcome)
        self.planned = None

    def calibrated(
        self, confidence: Float[Tensor, "batch ..."], place: int | Int[Tensor, "..."] | None = None
    ) -> Float[Tensor, "batch ..."]:
        """P(accepted | confidence), by the rows' record (`Calibration.calibrated`)."""
        return self.calibration.calibrated(confidence, place)

    def idle(self, *how: object, **much: object) -> bool:
        """Whether the batch should rest this step: never for rows weighed alone."""
        return False

    def idle_before_catch_up(self, unread: Sequence[int], rows: Bool[Tensor, " batch"]) -> bool:
        """`idle` where a draft must first read `unread` tokens per row: the widest row's catch-up as the reading."""
        return self.idle(reading=self.costs.catch_up(max(unread)), rows=rows)

    def rest(self, possible: Bool[Tensor, " batch"]) -> None:
        """Record a step in which the batch rested (`idle`): the `possible` rows (still decoding) count as declined."""
        none = torch.zeros_like(possible, dtype=torch.long)
        self.playing, self.probing, self.confidences = possible.clone(), torch.zeros_like(possible), []
        self.declined += possible.sum().to(self.declined)
        self.record(none, none)

    def rate(self) -> Float[Tensor, " batch"]:
        """Each row's tokens per unit of cost so far, never below 1 (plain steps alone make 1): the row rule's r,
        so that a row whose guesses cost more than they gained does not lower its bar for more of them."""
        return (self.gained / self.spent).clamp(min=1.0)

    def step_costs(self, guesses: Sequence[int] | Int[Tensor, " steps"]) -> Float[Tensor, " steps"]:
        """T(k) for each k in `guesses` (float64, on the CPU), from a table of T(0), T(1), ... grown as needed."""
        first_ones = isinstance(guesses, range) and guesses.start == 0 and guesses.step == 1
        guesses = guesses if first_ones else torch.as_tensor(guesses, dtype=torch.long, device="cpu")
        most = len(guesses) - 1 if first_ones else int(guesses.max()) if guesses.numel() else 0
        if most >= len(self.table):
            steps = [self.costs.step(k) for k in range(2 * most + 1)]
            self.table = torch.tensor(steps, dtype=torch.float64, device="cpu")
        return self.table[: len(guesses)] if first_ones else self.table[guesses]

    def left_for_try(self, patience: int | Int[Tensor, " batch"]) -> Bool[Tensor, " batch"]:
        """The rows with more than twice `patience` tokens left: a try near a row's end teaches nothing usable."""
        if self.remaining is None:  # the budgets unknown: every row
            return torch.ones_like(self.rested, dtype=torch.bool)
        return self.remaining().to(self.rested.device) > 2 * patience


class RowRule(Rule):
    """The rule for each row alone (the module's docstring): one row's costs, each row's own record."""

    def first(self, unread: list[int], left: list[int] | list[float]) -> Bool[Tensor, " batch"]:
        """`start`'s choice for each row alone: its first guess pays for its own catch-up; a rested row tries one."""
        self.reading = torch.tensor([self.costs.catch_up(n) for n in unread], dtype=torch.float64, device=self.device)
        self.setup = self.reading / torch.tensor(left, dtype=torch.float64, device=self.device)
        pays = self.pays()
        self.probing = ~pays & self.may_try()  # a rested row tries one guess
        return pays

    def pays(self) -> Bool[Tensor, " batch"]:
        """(rule) for guess i + 1, i the guesses drafted so far."""
        i = len(self.confidences)
        added = self.costs.step(i + 1) - self.costs.step(i)  # c + t(i + 2) - t(i + 1), and o for the first guess
        if i == 0:  # the first guess also pays for the row's catch-up
            added = added + self.setup
        pays = self.survive * self.upcoming_chance() * self.costs.step(i) > self.expected * added
        return pays & ~self.probing if i > 0 else pays  # a try is one guess

    def choose(
        self,
        expected: Float[Tensor, "batch options"] | Callable[[], Float[Tensor, "batch options"]],
        available: Int[Tensor, " batch"],
    ) -> Int[Tensor, " batch"]:
        """`plan_expected` for each row alone: the k <= `available[b]` that maximises E(k) - r T(k), r being the row's
        rate so far (k = 0 scores 1 - r; the fewest guesses win among equals). That is the choice that raises the
        row's overall rate most (Dinkelbach's rule for a ratio of sums): a step that merely maximised its own E / T
        would stop a good copy early, where each further token still beats the run's rate but not the step's. A row
        that plans none tries one guess after `PATIENCE` idle steps."""
        expected = (expected() if callable(expected) else expected).to(self.device)
        width = expected.shape[1] - 1
        cost = self.step_costs(range(width + 1)).to(self.device)  # T(0..width)
        beyond = torch.arange(width + 1, device=self.device) > available[:, None]
        rate = self.rate()[:, None]  # (batch, 1)
        k = (expected.double() - rate * cost).masked_fill(beyond, -torch.inf).argmax(1)  # the first of equals
        self.probing = (k == 0) & (available > 0) & self.may_try()
        self.declined += ((k == 0) & (available > 0) & ~self.probing).sum().to(self.declined)
        return torch.where(self.probing, 1, k)

    def may_try(self) -> Bool[Tensor, " batch"]:
        """The rows that rested `PATIENCE` steps (more after tries that were rejected), with enough of their budget
        left to use what a try teaches (`left_for_try`), whose first guess could pay at their optimistic acceptance
        (`Calibration.optimistic`), with the whole catch-up."""
        due = self.rested >= self.patience
        if not bool(due.any()):  # most steps: no row is due, and neither its budget nor its hopes need be weighed
            return due
        due = due & self.left_for_try(self.patience)
        added = self.costs.step(1) - self.costs.step(0) + self.reading
        return due & (self.calibration.optimistic() * self.costs.step(0) > added)

    def worth(self, gain: Float[Tensor, " batch"], cost: float, rows: Bool[Tensor, " batch"], *step: object) -> Tensor:
        """Whether work of `cost` (units of a 1-token target forward of one row) that adds `gain[b]` expected
        tokens to row b pays, for each of `rows`: row b's gain beats its rate so far times the cost (a tree's plan
        asks this before growing one more depth; the step so far, which the batch rule weighs, does not count)."""
        return rows & (gain > self.rate() * cost)


def expected_tokens(survive: Float[Tensor, "batch guesses"]) -> Float[Tensor, "batch options"]:
    """E(0..width) of a chain of guesses: E(k) = 1 + pi_1 + ... + pi_k, from pi_i, the chance that guesses 1..i
    all hold (the step's own token is the 1)."""
    return torch.cat([survive.new_ones(survive.shape[0], 1), 1 + survive.cumsum(1)], dim=1)


def chain_outcome(
    drafted: Int[Tensor, " batch"], accepted: Int[Tensor, " batch"], width: int
) -> tuple[Bool[Tensor, "batch width"], Bool[Tensor, "batch width"]]:
    """Which of the places 0..`width` - 1 of each row's verified chain were tried and which held: guesses
    1..accepted held, guess accepted + 1 (if drafted) was tried and did not, the rest were never judged."""
    place = torch.arange(width, device=accepted.device)
    return (place <= accepted[:, None]) & (place < drafted[:, None]), place < accepted[:, None]


__all__ = ["PATIENCE", "PRIOR", "Rule", "RowRule", "chain_outcome", "expected_tokens", "rule_for"]
