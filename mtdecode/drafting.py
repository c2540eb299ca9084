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
  guesses of that confidence were accepted earlier in the run;
- a, the chance that the next, not yet drafted guess is accepted, is the row's acceptance
  rate so far, or, where that chance is known before the guess is made (a copied token's
  position, in prompt lookup), that;
- t and c are measured on the host (`mtdecode.tuning.draft_costs`).

Where every guess's chance is known before any is verified (prompt lookup's copied tokens, whose
positions' acceptance is on record), `DraftLength.plan` picks the number of guesses k at once, as
the k that maximises E(k) - r T(k), with r the row's rate so far (tokens per unit of cost): unlike
growing the draft one guess at a time, it sees past a dearer width to a cheaper wider one (on some
hosts a forward over 2 tokens costs more than one over 4).

A row whose acceptance says that not even a first guess pays drafts nothing, at greedy cost;
so that a bad start does not stop it for good, it tries one guess after `PATIENCE` steps
without drafting, and waits twice as long after each try that is rejected. The rule counts
those row steps (`DraftLength.declined`), and `drafting_choice` words what it chose over a run
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

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from mtdecode.session import Choice, Step
from mtdecode.tensor_types import Bool, Float, Int, Tensor

#: confidence bins of the per-row calibration (equal widths over [0, 1])
BINS = 10
#: pseudo-observations per bin at the draft's own confidence, before the row has seen any
PRIOR = 2.0
#: a row that stopped drafting altogether tries one guess again after this many steps without (then
#: after twice as many each time the try is rejected), so a bad start does not stop it for good
PATIENCE = 4


@dataclass(frozen=True)
class DraftCosts:
    """What a step costs, in units of one 1-token target forward.

    **Arguments:**

    - `draft`: c, one draft forward (over one token per row); 0 for guesses that cost nothing to make
      (copied from the text, as in prompt lookup).
    - `target`: t(1), t(2), ...: a target forward over 1, 2, ... tokens (so `target[0]` is 1).
    """

    draft: float | int
    target: Sequence[float | int]

    def __post_init__(self) -> None:
        if not self.draft >= 0 or len(self.target) < 2 or any(not t > 0 for t in self.target):
            raise ValueError(f"costs must be positive (c may be 0), with t(1) and t(2) at least, got {self}")

    def t(self, tokens: int) -> float:
        """t(tokens); past the last measured size the last step is continued."""
        if tokens <= len(self.target):
            return self.target[tokens - 1]
        step = self.target[-1] - self.target[-2]
        return self.target[-1] + step * (tokens - len(self.target))

    def step(self, guesses: int) -> float:
        """T(k) = t(k + 1) + k c."""
        return self.t(guesses + 1) + guesses * self.draft


class DraftLength:
    """The rule above, for each row of a batch; `start` a step, ask `more` after each guess, then `record`
    (or, where the guesses' chances are known in advance, `plan` the step, then `record`).

    **Arguments:**

    - `costs`: the measured `DraftCosts`.
    - `batch`: rows.
    - `device`: where the row tensors live.
    """

    def __init__(self, costs: DraftCosts, batch: int, device: torch.device) -> None:
        self.costs = costs
        self.hits = torch.zeros(batch, BINS, dtype=torch.float64, device=device)  # accepted guesses per bin
        self.tries = torch.zeros(batch, BINS, dtype=torch.float64, device=device)  # verified guesses per bin
        self.rested = torch.zeros(batch, dtype=torch.long, device=device)  # steps since the row last drafted
        self.patience = torch.full((batch,), PATIENCE, dtype=torch.long, device=device)
        # the row's rate so far, tokens per unit of cost (one greedy step as the prior): what a planned step must beat
        self.gained = torch.ones(batch, dtype=torch.float64, device=device)
        self.spent = torch.ones(batch, dtype=torch.float64, device=device)
        # row steps that could have drafted but drafted nothing because no guess paid (for `Stats.choices`)
        self.declined = torch.zeros((), dtype=torch.long, device=device)
        self.start()

    def start(
        self, upcoming: Float[Tensor, " batch"] | None = None, possible: Bool[Tensor, " batch"] | None = None
    ) -> Bool[Tensor, " batch"]:
        """A new step, no guess drafted yet: which rows should draft a first guess (the rule with i = 0,
        pi_0 = 1, E(0) = 1, T(0) = 1: a draft whose acceptance cannot pay for a guess is not used).
        `upcoming`: the first guess's chance of acceptance where it is known before drafting (default: a).
        `possible`: the rows that may draft this step (unfinished, with room in their budget); those the rule
        stops are counted in `declined` (None: nothing is counted)."""
        batch, device = self.hits.shape[0], self.hits.device
        self.survive = torch.ones(batch, dtype=torch.float64, device=device)  # pi_i
        self.expected = torch.ones(batch, dtype=torch.float64, device=device)  # E(i)
        self.confidences: list[Float[Tensor, " batch"]] = []
        self.upcoming = upcoming
        pays = self.pays()
        self.probing = ~pays & (self.rested >= self.patience)  # a rested row tries one guess
        if possible is not None:
            self.declined += (possible & ~pays & ~self.probing).sum()
        return pays | self.probing

    def more(
        self, confidence: Float[Tensor, " batch"] | float, upcoming: Float[Tensor, " batch"] | None = None
    ) -> Bool[Tensor, " batch"]:
        """After guess i, drawn with the draft's `confidence` in it (one number for every row where the
        guesses carry none): which rows should draft guess i + 1. `upcoming`: guess i + 1's chance of
        acceptance where it is known before drafting it (default: the row's acceptance a)."""
        if isinstance(confidence, float):
            confidence = torch.full_like(self.survive, confidence)
        confidence = confidence.double().clamp(0, 1)
        self.upcoming = upcoming
        self.confidences.append(confidence)
        self.survive = self.survive * self.calibrated(confidence)  # pi_i = pi_{i-1} * P(guess i accepted)
        self.expected = self.expected + self.survive  # E(i)
        return self.pays()

    def pays(self) -> Bool[Tensor, " batch"]:
        """(rule) for guess i + 1, i the guesses drafted so far."""
        i = len(self.confidences)
        added = self.costs.draft + self.costs.t(i + 2) - self.costs.t(i + 1)
        a = self.acceptance() if self.upcoming is None else self.upcoming.to(self.survive)
        pays = self.survive * a * self.costs.step(i) > self.expected * added
        return pays & ~self.probing if i > 0 else pays  # a try is one guess

    def plan(self, chances: Float[Tensor, "batch guesses"], available: Int[Tensor, " batch"]) -> Int[Tensor, " batch"]:
        """A step whose guesses' chances are all known before any is verified: how many of row b's guesses to
        verify, the k <= `available[b]` that maximises E(k) - r T(k), r being the row's rate so far (tokens per
        unit of cost over its recorded steps; 1 before any); k = 0 (none) scores 1 - r, and the fewest guesses
        win among equals. That is the choice that raises the row's overall rate most (Dinkelbach's rule for a
        ratio of sums): a step that merely maximised its own E / T would stop a good copy early, where each
        further token still beats the run's rate but not the step's. `chances[b, i]` is guess i + 1's chance of
        acceptance given guesses 1..i were accepted; it is calibrated as a confidence is in `more`. A row that
        plans none tries one guess after `PATIENCE` idle steps, as with `start`. Call `record` after
        verification."""
        batch = chances.shape[0]
        chances = chances.double().clamp(0, 1)
        survive = self.calibrated(chances).cumprod(1)  # (batch, guesses): pi_1..pi_width
        ones = torch.ones(batch, 1, dtype=torch.float64, device=chances.device)
        k = self.plan_expected(torch.cat([ones, 1 + survive.cumsum(1)], dim=1), available)  # E(0..width)
        self.confidences = list(chances.unbind(1))  # `record` counts those of guesses 1..k that were judged
        return k

    def plan_expected(
        self, expected: Float[Tensor, "batch options"], available: Int[Tensor, " batch"]
    ) -> Int[Tensor, " batch"]:
        """`plan` given E(0), E(1), ... per row directly (for guesses that are not a chain, such as lookahead's
        candidates, whose expected tokens the caller models): the k <= `available[b]` that maximises
        E(k) - r T(k). No confidences are recorded for calibration. A row with guesses available that plans none
        is counted in `declined`."""
        width = expected.shape[1] - 1
        device = expected.device
        cost = self.step_costs(range(width + 1)).to(device)  # T(0..width)
        beyond = torch.arange(width + 1, device=device) > available.to(device)[:, None]
        rate = self.rate()[:, None]  # (batch, 1)
        k = (expected.double() - rate * cost).masked_fill(beyond, -torch.inf).argmax(1)  # the first of equals
        self.probing = (k == 0) & (available.to(device) > 0) & (self.rested >= self.patience)
        self.declined += ((k == 0) & (available.to(device) > 0) & ~self.probing).sum().to(self.declined)
        self.confidences = []
        return torch.where(self.probing, 1, k)

    def rate(self) -> Float[Tensor, " batch"]:
        """Each row's tokens per unit of cost over its recorded steps (1 before any)."""
        return self.gained / self.spent

    def step_costs(self, guesses: Sequence[int]) -> Float[Tensor, " steps"]:
        """T(k) for each k in `guesses`, as a float64 tensor (on the CPU)."""
        return torch.tensor([self.costs.step(k) for k in guesses], dtype=torch.float64, device="cpu")

    def calibrated(self, confidence: Float[Tensor, "batch ..."]) -> Float[Tensor, "batch ..."]:
        """P(accepted | confidence), from this row's history in the confidence's bin, starting at the confidence."""
        columns = bin_of(confidence).reshape(confidence.shape[0], -1)  # (batch, guesses)
        hits = self.hits.gather(1, columns).reshape(confidence.shape)
        tries = self.tries.gather(1, columns).reshape(confidence.shape)
        return (hits + PRIOR * confidence) / (tries + PRIOR)

    def acceptance(self) -> Float[Tensor, " batch"]:
        """The row's acceptance rate so far (one accepted and one rejected guess as a prior)."""
        return (self.hits.sum(1) + 1) / (self.tries.sum(1) + 2)

    def record(
        self,
        drafted: Int[Tensor, " batch"],
        accepted: Int[Tensor, " batch"],
        extra_cost: float | Float[Tensor, " batch"] = 0.0,
    ) -> None:
        """After verification: guesses 1..accepted were accepted, guess accepted + 1 (if drafted) was not.
        `extra_cost`: what the step cost besides T(drafted) (a tree's drafting, in `Eagle`), for the row's rate."""
        drew = drafted > 0
        self.patience = torch.where(
            self.probing & drew, torch.where(accepted > 0, PATIENCE, 2 * self.patience), self.patience
        )
        self.rested = torch.where(drew, 0, self.rested + 1)
        self.gained += accepted.double() + 1
        self.spent += self.step_costs(drafted.tolist()).to(self.spent) + extra_cost
        if not self.confidences:
            return
        confidence = torch.stack(self.confidences, dim=1)  # (batch, guesses)
        position = torch.arange(confidence.shape[1], device=confidence.device)
        tried = (position <= accepted[:, None]) & (position < drafted[:, None])
        hit = position < accepted[:, None]
        self.calibrate(confidence, tried, hit)

    def calibrate(
        self,
        confidence: Float[Tensor, "batch guesses"],
        tried: Bool[Tensor, "batch guesses"],
        hit: Bool[Tensor, "batch guesses"],
    ) -> None:
        """Add verified guesses to each row's calibration: those `tried` at their `confidence`, and which of them
        were accepted (`hit`). `record` does this for a chain; a strategy whose guesses form a tree calls it
        itself."""
        bins = bin_of(confidence)
        self.tries.scatter_add_(1, bins, tried.double())
        self.hits.scatter_add_(1, bins, (hit & tried).double())


def drafting_choice(
    strategy: str, rule: DraftLength, steps: Sequence[Step], *, guesses: str, pays: str, fix: str, fallback: bool = True
) -> Choice:
    """What `rule` chose over a run, for `Stats.choices`: how many `guesses` (e.g. "guesses", "copied tokens") the
    row `steps` that drafted verified on average, and how many row steps drafted nothing because no guess paid.

    **Arguments:**

    - `strategy`: the strategy's name; `rule`: its `DraftLength`; `steps`: every row step of the run.
    - `pays`: the rule's break-even, worded to follow "because" (e.g. "the row's acceptance stayed below 62%").
    - `fix`: how to fix the number of guesses instead of leaving it to the rule.
    - `fallback`: whether a run with no drafting step decoded greedily (False for a strategy that does other work
      besides its guesses, such as lookahead's window).

    **Returns:** a `Choice`; when no row step drafted and the rule stopped at least one, the run decoded greedily
    because of the rule, and the choice says so (`Choice.greedy`, with `fix` as the way out).
    """
    drafting = [step.drafted for step in steps if step.drafted > 0]
    declined = int(rule.declined)
    if fallback and not drafting and declined:
        reason = f"{declined} of its {len(steps)} row steps drafted nothing because {pays}; {fix}"
        return Choice(strategy, "decodes greedily", reason, greedy=True)
    mean = sum(drafting) / len(drafting) if drafting else 0.0
    setting = f"{mean:.1f} {guesses} verified per drafting step ({len(drafting)} of {len(steps)} row steps drafted)"
    return Choice(strategy, setting, f"{declined} row steps drafted nothing because {pays}")


def check_counts(strategy: object, names: Sequence[str], *, optional: Sequence[str] = ()) -> None:
    """Raise ValueError unless each named setting of `strategy` is an integer >= 1 (None allowed for `optional`)."""
    for name in names:
        value = getattr(strategy, name)
        if value is None and name in optional:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")


def bin_of(confidence: Float[Tensor, "*shape"]) -> Int[Tensor, "*shape"]:
    """The calibration bin of each confidence in [0, 1]."""
    return (confidence * BINS).long().clamp(0, BINS - 1)
