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
  rate so far (from a prior: the draft's measured acceptance, `mtdecode.tuning.draft_acceptance`,
  or an even chance), or, where that chance is known before the guess is made (a copied token's
  position, in prompt lookup), that;
- t and c are measured on the host (`mtdecode.tuning.draft_costs`);
- the first guess of a step also pays for the draft reading what it missed (the prompt, at
  first), c (t(u) / t(1) - 1) for u unread tokens, spread over the tokens the row has left, since
  a draft that has caught up costs no more in later steps.

Where every guess's chance is known before any is verified (prompt lookup's copied tokens, whose
positions' acceptance is on record), `DraftLength.plan` picks the number of guesses k at once, as
the k that maximises E(k) - r T(k), with r the row's rate so far (tokens per unit of cost): unlike
growing the draft one guess at a time, it sees past a dearer width to a cheaper wider one (on some
hosts a forward over 2 tokens costs more than one over 4).

A row whose acceptance says that not even a first guess pays drafts nothing, at greedy cost;
so that a bad start does not stop it for good, it tries one guess after `PATIENCE` steps
without drafting, and waits twice as long after each try that is rejected; it tries only while
a first guess could pay at an optimistic acceptance (its rate plus one standard error, at most 1)
and more than twice as many tokens are left as it waited (a try near the end teaches nothing
that could still be used). The rule counts
those row steps (`DraftLength.declined`), and `drafting_choice` words what it chose over a run
for `Stats.choices`: a run in which no row step drafted because no guess paid decoded greedily.

**A batch's goodput.** In a batch every row's tokens go through the same forward, padded to the
widest row, and the draft runs for every row while any row drafts: a step costs t_B(w) + (w - 1) c_B,
with w the widest row's tokens and B the batch's rows, whatever the other rows feed. On a CPU a forward
over B rows grows with their tokens much faster than one over a single row (`mtdecode.tuning`
measures t(B, n)), so a guess that pays for one row can cost more than it brings in a batch. And a
batch of prompts runs until its last row ends: a row that guesses well and ends early leaves its
place idle, so the batch's tokens per second rise only when its slowest rows go faster. Given
`BatchCosts` (the default, measured), the rule weighs the batch as one, by when it would end if
every step were like this one (`DraftLength.finish`):

    F(step) = T_B(step) * max over the rows in play of  m_b / E_b(step)                 (batch rule)

with m_b the tokens left in row b's budget and E_b(step) the tokens row b is expected to commit in
the step. It drafts one more guess for every row while that lowers F, and where the chances are known
in advance it picks the width w with the lowest F (row b verifies min(w, its guesses)). Costs are in
units of t_1(1), so that steps of any batch compare.

- The first guess of a step also pays for the draft's catch-up, where the draft must first read what
  was committed while the batch did not draft (the prompt, on the first step; `DraftLength.catch_up`).
- A row whose guesses do not pay still verifies what the batch's width holds for it, at no extra cost.
- The rows share their calibration (the draft and the target are the same for every row), each row's chances
  scaled by how its own guesses fared against the pool's, and a row's acceptance a is its own record with the
  pool's rate as prior (`DraftLength.own_acceptance`): the rows that set the batch's end are the ones whose
  guesses fail most, and a pooled chance alone overrates them.
- When the guesses do not pay, the batch decodes at greedy cost. It tries one guess in every row after
  `PATIENCE` such steps (twice as long after each try that did not pay, or after which the batch at once
  drafted nothing) while a first guess could
  still pay at an optimistic estimate of the rows' acceptance, so rows rejoin when guesses pay again.
  A strategy whose drafting costs work before the rule can weigh its guesses (EAGLE's head), or whose draft must
  first read the prompts (a draft model), starts as a rested batch (`wait_first`): its first drafting step is a try
  that pays for that work, since the prior acceptance cannot say whether this batch's slowest row will repay it. It
  asks `DraftLength.idle` whether the batch should rest, and skips that work then; so does every strategy whose
  guesses' chances change only when guesses are verified (a draft's acceptance, Jacobi's record), which rests on
  without weighing them again until its next try.
- At batch 1 the rule above decides. With `DraftCosts` (one row's), each row weighs its own steps
  alone, as if the batch were free: then a row decodes exactly as its prompt alone.

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
from typing import no_type_check

import torch
from einops import pack, reduce, repeat, unpack

from mtdecode.costs import BatchCosts, DraftCosts
from mtdecode.strategy import check_chance
from mtdecode.tensor_types import Bool, Float, Int, Tensor

#: confidence bins of the per-row calibration (equal widths over [0, 1])
BINS = 10
#: pseudo-observations per bin at the draft's own confidence, before the row has seen any; and guesses at the prior
#: acceptance (`DraftLength`'s `acceptance`) in the row's acceptance
PRIOR = 2.0
#: a row that stopped drafting altogether tries one guess again after this many steps without (then
#: after twice as many each time the try is rejected), so a bad start does not stop it for good
PATIENCE = 4


class DraftLength:
    """The rule above, for each row of a batch; `start` a step, ask `more` after each guess, then `record`
    (or, where the guesses' chances are known in advance, `plan` the step, then `record`).

    **Arguments:**

    - `costs`: the measured costs: `BatchCosts` to weigh the batch's goodput (the batch rule), or one row's
      `DraftCosts` to weigh each row alone. At batch 1 the two are one rule.
    - `batch`: rows.
    - `device`: where the row tensors live.
    - `remaining`: a function giving each row's tokens left in its budget (`Session.remaining`); the batch rule
      weighs how soon the batch's last row ends by it (None: every row's alike).
    - `acceptance`: the chance that a first guess is accepted before any was verified, the prior of the rows'
      acceptance (worth `PRIOR` guesses): 1/2 by default; `Speculative` and `MTAD` pass their draft's, measured
      once per host (`mtdecode.tuning.draft_acceptance`), so that a draft that is seldom right is not tried
      and one that is often right drafts from the first step.
    - `wait_first`: with the batch rule, start as a batch that has rested its patience, so that its first drafting
      step is a try that `batch_may_try` weighs with the catch-up it needs (`idle`'s `reading`; `start` lets no row
      draft more until the batch has drafted once): for a draft whose first guess costs work the rule cannot weigh
      before it is done (`Eagle`'s head reading the prompts' features), or whose first read of the prompts is a bet
      on an acceptance no row has shown yet (`Speculative`'s and `MTAD`'s draft model: the batch's end is set by its
      slowest row, and the prior cannot tell which prompts' rows will be slow).
    """

    def __init__(
        self,
        costs: DraftCosts | BatchCosts,
        batch: int,
        device: torch.device,
        remaining: Callable[[], Int[Tensor, " batch"]] | None = None,
        acceptance: float = 0.5,
        wait_first: bool = False,
    ) -> None:
        check_chance("acceptance", acceptance)
        self.prior = acceptance
        #: whether the batch is weighed as one (the batch rule); else each row alone
        self.together = isinstance(costs, BatchCosts) and batch > 1
        #: each row's tokens left in its budget, now (the batch rule weighs how soon the last row ends)
        self.remaining = remaining
        #: the batch rule's margin (`BatchCosts.margin`): guesses must end the batch this much sooner to count
        self.margin = costs.margin if self.together else 0.0
        self.costs = costs.at(batch) if isinstance(costs, BatchCosts) else costs
        self.hits = torch.zeros(batch, BINS, dtype=torch.float64, device=device)  # accepted guesses per bin
        self.tries = torch.zeros(batch, BINS, dtype=torch.float64, device=device)  # verified guesses per bin
        self.judged = torch.zeros(batch, dtype=torch.float64, device=device)  # verified guesses' confidences, summed
        # the most guesses of a chain the row verified (with the batch rule, any row): the places its scale has seen
        self.reached = torch.zeros(batch, dtype=torch.long, device=device)
        # what the calibration above gives, kept until `calibrate` changes it (most steps verify nothing): the rows'
        # acceptance and its optimistic bound by name, and the last `plan`'s chances with their expected tokens
        self.known: dict[str, Tensor] = {}
        self.planned: tuple[Tensor, list[Tensor], Tensor] | None = None
        self.rested = torch.zeros(batch, dtype=torch.long, device=device)  # steps since the row last drafted
        self.patience = torch.full((batch,), PATIENCE, dtype=torch.long, device=device)
        # the row's rate so far, tokens per unit of cost (one greedy step as the prior): what a planned step must beat
        self.gained = torch.ones(batch, dtype=torch.float64, device=device)
        self.spent = torch.ones(batch, dtype=torch.float64, device=device)
        # row steps that could have drafted but drafted nothing because no guess paid (for `Stats.choices`)
        self.declined = torch.zeros((), dtype=torch.long, device=device)
        # the batch rule's own record: its steps without drafting and its patience (the rows' move in step with them)
        self.batch_rested, self.batch_patience = (PATIENCE if wait_first else 0), PATIENCE
        # with `wait_first`, the batch has not drafted yet: its first drafting step must be a try (`start`)
        self.waiting = wait_first and self.together
        self.asked = 0.0  # the catch-up that `idle` last weighed a try against
        self.tried = False  # the batch's last step was a try that paid for its guess (`record_batch`)
        self.playing = torch.ones(batch, dtype=torch.bool, device=device)  # the rows that take part in this step
        self.table = torch.empty(0, dtype=torch.float64, device="cpu")  # T(0), T(1), ... (`step_costs`)
        self.start()

    def start(
        self,
        upcoming: Float[Tensor, " batch"] | None = None,
        possible: Bool[Tensor, " batch"] | None = None,
        unread: int | Sequence[int] = 1,
    ) -> Bool[Tensor, " batch"]:
        """A new step, no guess drafted yet: which rows should draft a first guess (the rule with i = 0,
        pi_0 = 1, E(0) = 1, T(0) = 1: a draft whose acceptance cannot pay for a guess is not used).
        `upcoming`: the first guess's chance of acceptance where it is known before drafting (default: a).
        `possible`: the rows that may draft this step (unfinished, with room in their budget); those the rule
        stops are counted in `declined` (None: nothing is counted). `unread`: the tokens the draft must read
        before its first guess, per row (the prompt at first, then what was committed while the row did not draft;
        one number: every row's); the first guess pays for that catch-up too (`catch_up`; with the batch rule, the
        widest row's, since every row feeds as many), spread over the tokens the row (the batch) has left, since a
        draft that has caught up costs no more in later steps."""
        batch, device = self.hits.shape[0], self.hits.device
        self.survive = torch.ones(batch, dtype=torch.float64, device=device)  # pi_i
        self.expected = torch.ones(batch, dtype=torch.float64, device=device)  # E(i)
        self.confidences: list[Float[Tensor, " batch"]] = []
        self.upcoming = upcoming
        # copies: the caller goes on to narrow its own mask in place
        self.playing = torch.ones(batch, dtype=torch.bool, device=device) if possible is None else possible.clone()
        self.going = self.playing.clone()
        # the catch-up is paid once and serves every later step while the rows draft: spread over their budgets
        unread = [unread] * batch if isinstance(unread, int) else list(unread)
        left = (self.remaining() if self.remaining is not None else torch.ones(batch)).clamp(min=1).tolist()
        if self.together:
            self.reading = self.catch_up(max(unread))  # the whole catch-up, which a try weighs (`batch_may_try`)
            self.setup = self.reading / max(left)
        else:  # each row's own
            reading = [self.catch_up(n) for n in unread]
            self.reading = torch.tensor(reading, dtype=torch.float64, device=device)
            self.setup = self.reading / torch.tensor(left, dtype=torch.float64, device=device)
        if self.together:  # the batch rule: every row in play drafts, or none; a waiting batch begins with a try
            pays = torch.zeros_like(self.playing) if self.waiting else self.pays().expand(batch)
            self.probing = self.playing & ~pays & self.batch_may_try()
        else:
            pays = self.pays()
            self.probing = ~pays & self.may_try()  # a rested row tries one guess
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
        """After guess i, drawn with the draft's `confidence` in it (one number for every row where the
        guesses carry none): which rows should draft guess i + 1. `upcoming`: guess i + 1's chance of
        acceptance where it is known before drafting it (default: the row's acceptance a). `rows`: the rows
        that drew guess i and may draw another (within their budget; default: those still drafting), which
        the batch rule weighs."""
        if isinstance(confidence, float):
            confidence = torch.full_like(self.survive, confidence)
        confidence = confidence.double().clamp(0, 1)
        self.upcoming = upcoming
        self.confidences.append(confidence)
        place = len(self.confidences) - 1  # guess i's place in the chain, from 0
        self.survive = self.survive * self.calibrated(confidence, place)  # pi_i = pi_{i-1} * P(guess i accepted)
        if self.together:  # the rows that drew guess i: their E(i) grows, the others' stays (their place counts)
            self.expected = self.expected + torch.where(self.going, self.survive, 0.0)  # E(i)
        else:  # a row that drew nothing is not asked about
            self.expected = self.expected + self.survive
        if rows is not None:
            self.going = self.going & rows
        pays = self.pays()
        if self.together:
            self.going = self.going & pays
        return pays

    def pays(self) -> Bool[Tensor, " batch"]:
        """(rule) for guess i + 1, i the guesses drafted so far; with the batch rule, (batch rule) over the rows
        still drafting, the same answer for every row."""
        i = len(self.confidences)
        added = self.costs.step(i + 1) - self.costs.step(i)  # c + t(i + 2) - t(i + 1), and o for the first guess
        a = self.own_acceptance() if self.upcoming is None else self.upcoming.to(self.survive)
        if self.together:  # (batch rule): the batch's finish with guess i + 1 against without it
            added += self.setup if i == 0 else 0.0
            gain = torch.where(self.going, self.survive * a, 0.0)  # each row's expected extra tokens from guess i + 1
            spent = self.costs.step(i) + (self.setup if i > 0 else 0.0)
            both = torch.stack([self.expected, self.expected + gain], dim=1)  # (batch, 2): without and with it
            costs = torch.tensor([spent, spent + added], dtype=torch.float64, device=both.device)
            now, more = self.finish(both, costs).tolist()
            pays = more < now * (1 - self.margin) and (i == 0 or not bool(self.probing.any()))
            return torch.full_like(self.going, pays)
        if i == 0:  # the first guess also pays for the row's catch-up
            added = added + self.setup
        pays = self.survive * a * self.costs.step(i) > self.expected * added
        return pays & ~self.probing if i > 0 else pays  # a try is one guess

    def plan(
        self,
        chances: Float[Tensor, "batch guesses"],
        available: Int[Tensor, " batch"],
        rows: Bool[Tensor, " batch"] | None = None,
    ) -> Int[Tensor, " batch"]:
        """A step whose guesses' chances are all known before any is verified: how many of row b's guesses to
        verify, the k <= `available[b]` that maximises E(k) - r T(k), r being the row's rate so far (tokens per
        unit of cost over its recorded steps; 1 before any); k = 0 (none) scores 1 - r, and the fewest guesses
        win among equals. That is the choice that raises the row's overall rate most (Dinkelbach's rule for a
        ratio of sums): a step that merely maximised its own E / T would stop a good copy early, where each
        further token still beats the run's rate but not the step's. `chances[b, i]` is guess i + 1's chance of
        acceptance given guesses 1..i were accepted; it is calibrated as a confidence is in `more`. A row that
        plans none tries one guess after `PATIENCE` idle steps, as with `start`. Call `record` after
        verification."""
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
        """`plan` given E(0), E(1), ... per row directly (for guesses that are not a chain, such as lookahead's
        candidates, whose expected tokens the caller models): the k <= `available[b]` that maximises
        E(k) - r T(k). No confidences are recorded for calibration. A row with guesses available that plans none
        is counted in `declined`. With the batch rule: the width w with which the batch would end soonest (`finish`,
        over the rows in play, `rows`, default all; E_b(min(w, available[b])) per row); row b verifies
        min(w, available[b]). `expected` may be a function that gives E(0..width), called only where the rule
        weighs it: with the batch rule, a step that `batch_stays` is planned without it."""
        device = self.hits.device
        available = available.to(device)
        self.playing = torch.ones_like(available, dtype=torch.bool) if rows is None else rows.to(device).clone()
        self.confidences = []
        if self.together:
            stays = self.batch_stays(available)
            best = 0 if stays else self.batch_width(expected() if callable(expected) else expected, available)
            could = (available > 0) & self.playing
            probe = best == 0 and bool(could.any()) and self.batch_may_try()
            self.probing = could & probe
            self.declined += (could & (best == 0) & ~self.probing).sum().to(self.declined)
            return available.clamp(max=1 if probe else best) * self.playing
        expected = (expected() if callable(expected) else expected).to(device)
        width = expected.shape[1] - 1
        cost = self.step_costs(range(width + 1)).to(device)  # T(0..width)
        beyond = torch.arange(width + 1, device=device) > available[:, None]
        rate = self.rate()[:, None]  # (batch, 1)
        k = (expected.double() - rate * cost).masked_fill(beyond, -torch.inf).argmax(1)  # the first of equals
        self.probing = (k == 0) & (available > 0) & self.may_try()
        self.declined += ((k == 0) & (available > 0) & ~self.probing).sum().to(self.declined)
        return torch.where(self.probing, 1, k)

    def batch_stays(self, available: Int[Tensor, " batch"]) -> bool:
        """With the batch rule, before any guess's chance is weighed: whether `batch_width` is 0 whatever the chances,
        because a row in play with nothing to verify (`available[b]` 0) has as many tokens left as any row in play.
        That row makes one token a step (E(0) = 1), so the batch ends with it whatever the others verify (`finish`),
        and a wider step only costs more, unless some T(w) undercuts T(0) by the margin (a measured curve may dip).
        Most steps of a batch whose rows find a copy now and then are such (prompt lookup on chat-like prompts); they
        spare weighing the chances (0.3 to 0.5 ms of small tensors a step at 4 rows)."""
        if not self.together:
            return False
        playing, guesses = self.playing.tolist(), available.tolist()  # a few numbers: Python, not small tensors
        left = self.remaining().tolist() if self.remaining is not None else [1] * len(guesses)
        resting = [n for n, play, k in zip(left, playing, guesses, strict=True) if play and k == 0]
        if not resting or max(resting) < max(n for n, play in zip(left, playing, strict=True) if play):
            return False
        dearer = [self.costs.step(k) for k in range(1, max(guesses) + 1)]  # T(1..most guesses)
        return min(dearer, default=torch.inf) >= self.costs.step(0) * (1 - self.margin)

    def batch_width(
        self,
        expected: Float[Tensor, "batch options"],
        available: Int[Tensor, " batch"],
        cost: Float[Tensor, " options"] | None = None,
        extra: float = 0.0,
    ) -> int:
        """With the batch rule: the width w with which the batch would end soonest (`finish` over the rows in play),
        row b verifying min(w, `available[b]`) guesses worth `expected[b]` E(0..width), a step with guesses costing
        `extra` more than its verification; 0 unless w ends it sooner than none by the margin. No w beyond the most
        guesses of any row is weighed: it would verify nothing more."""
        width = min(expected.shape[1] - 1, int(available.max()))
        expected = expected[:, : width + 1]
        device = expected.device
        cost = self.step_costs(range(width + 1)).to(device) if cost is None else cost[: width + 1]
        cost = cost + torch.where(torch.arange(width + 1, device=device) > 0, extra, 0.0).to(cost)
        widths = torch.arange(width + 1, device=device)
        upto = torch.minimum(widths, available.to(device).clamp(max=width)[:, None])  # (batch, options)
        ends = self.finish(expected.double().gather(1, upto), cost)  # (options,)
        best = int(ends.argmin())  # the first of equals
        return best if ends[best] < ends[0] * (1 - self.margin) else 0

    def idle(
        self,
        expected: Float[Tensor, "batch options"] | None = None,
        available: Int[Tensor, " batch"] | None = None,
        reading: float = 0.0,
        extra: float = 0.0,
        rows: Bool[Tensor, " batch"] | None = None,
    ) -> bool:
        """With the batch rule: whether the batch should rest this step, drafting nothing and skipping the work that
        drafting needs before the rule can weigh its guesses (`Eagle`'s head reading the target's features and
        scoring its first depth, which costs `extra` every step it drafts, and first `reading`, its catch-up on
        what it has not read): its last step verified no guess (or it waits first, `wait_first`), it is not due to
        try one (`batch_may_try`, whose try pays for the catch-up), and no guess whose chances are known before
        drafting (`expected`, E(0..width) per row, of `available` guesses, such as a copy) would pay on its own,
        with that work. Call `rest` for such a step.

        A strategy whose guesses' chances the batch has learned nothing about since it chose to rest (a draft's
        acceptance, Jacobi's record of each place: they change only when guesses are verified) leaves `expected`
        out and passes the `rows` that may draft now: the batch then rests on while they are the rows of its last
        step (a row that ended may have been the slowest, whose end the batch rule weighs), until its next try. Its
        rows' budgets fall by a token each at every plain step and the draft's catch-up grows, which moves the
        weighing only where the rows' chances differ; the try weighs the batch afresh. This spares the rule's
        weighing at every plain step: 0.5 to 1 ms of Python and small tensors beside the forward."""
        if not self.together:
            return False
        self.asked = reading  # the catch-up a try would pay for now, as last weighed here (`rule_choice` words it)
        if self.batch_rested == 0 or self.batch_may_try(reading, extra):
            return False
        if rows is not None and not torch.equal(rows.to(self.playing.device), self.playing):
            return False
        if expected is None or available is None:
            return True
        return self.batch_width(expected, available, extra=extra + reading) == 0

    def rest(self, possible: Bool[Tensor, " batch"]) -> None:
        """Record a step in which the batch drafted nothing without drafting at all (`idle`): the `possible` rows
        (those still decoding) count as declined, and the batch's steps without drafting grow by one."""
        none = torch.zeros_like(possible, dtype=torch.long)
        self.playing, self.probing, self.confidences = possible.clone(), torch.zeros_like(possible), []
        self.declined += possible.sum().to(self.declined)
        self.record(none, none)

    def batch_may_try(self, reading: float | None = None, extra: float = 0.0) -> bool:
        """Whether a batch that drafts nothing should try one guess in every row: it has rested `PATIENCE` steps
        (more after tries that did not pay), and a first guess could still pay at an optimistic acceptance, the
        rows' pooled rate plus one standard error, at most 1 (a try teaches the rule about every row at once, so
        after one or two tries that did not pay, a batch whose guesses cannot pay stops trying; where one more token
        per row costs nearly a step, not even a guess that is always accepted pays, and the batch never tries). A try
        also pays for the draft's whole catch-up (the prompt, if the batch never drafted): a guess the draft's
        measured acceptance says will not pay is not worth reading the prompts again to learn about. `reading`: that
        catch-up, where the caller weighs it (default: the one `start` weighed); `extra`: any other work a step with
        a guess needs (`idle`)."""
        if self.batch_rested < self.batch_patience or not self.left_for_try(self.batch_patience).any():
            return False
        reading = self.reading if reading is None else reading
        added = self.costs.step(1) - self.costs.step(0) + reading + extra
        return bool(self.optimistic()[0] * self.costs.step(0) * (1 - self.margin) > added)

    def optimistic(self) -> Float[Tensor, " batch"]:
        """The rows' acceptance (`acceptance`) plus one standard error, at most 1: what a try hopes for."""
        if "optimistic" not in self.known:
            a = self.acceptance()
            tries = self.record_of_rows()[1].sum(1)
            self.known["optimistic"] = (a + (a * (1 - a) / (tries + PRIOR)).sqrt()).clamp(max=1)
        return self.known["optimistic"]

    def may_try(self) -> Bool[Tensor, " batch"]:
        """The one-row rule's tries: the rows that rested `PATIENCE` steps (more after tries that were rejected), with
        enough of their budget left to use what a try teaches (`left_for_try`), whose first guess could pay at their
        `optimistic` acceptance, with the whole catch-up (as in `batch_may_try`)."""
        due = self.rested >= self.patience
        if not bool(due.any()):  # most steps: no row is due, and neither its budget nor its hopes need be weighed
            return due
        due = due & self.left_for_try(self.patience)
        added = self.costs.step(1) - self.costs.step(0) + self.reading
        return due & (self.optimistic() * self.costs.step(0) > added)  # as `batch_may_try`, row by row

    def left_for_try(self, patience: int | Int[Tensor, " batch"]) -> Bool[Tensor, " batch"]:
        """The rows with more than twice `patience` tokens left in their budget: a try near a row's end teaches the
        rule nothing it could still use (all rows, where the budget is not known)."""
        if self.remaining is None:
            return torch.ones_like(self.rested, dtype=torch.bool)
        return self.remaining().to(self.rested.device) > 2 * patience

    def idle_before_catch_up(self, unread: Sequence[int], rows: Bool[Tensor, " batch"]) -> bool:
        """`idle` for a strategy whose draft model must read `unread` tokens per row before its next guess: the
        `rows` that may draft now, and the widest row's catch-up (`catch_up`) as the `reading` a try pays for, as
        `start` weighs it."""
        return self.idle(reading=self.catch_up(max(unread)), rows=rows)

    @no_type_check
    def catch_up(self, unread: int) -> float:
        """What the draft's first forward of a step costs beyond one token per row when it must read `unread` tokens
        per row first: c (t(unread) / t(1) - 1), the draft's forward taken to grow with its tokens as the target's
        does."""
        return self.costs.draft * (self.costs.t(max(unread, 1)) / self.costs.t(1) - 1)

    def worth(
        self,
        gain: Float[Tensor, " batch"],
        cost: float,
        rows: Bool[Tensor, " batch"],
        expected: Float[Tensor, " batch"] | None = None,
        spent: float = 1.0,
    ) -> Bool[Tensor, " batch"]:
        """Whether work of `cost` (units of a 1-token target forward of one row) that adds `gain[b]` expected
        tokens to row b pays, for each of `rows`: row b's gain beats its rate so far times the cost; with the batch
        rule, the batch finishes sooner with it (`finish`, the step so far making `expected[b]` tokens in row b at
        a cost of `spent`; the same answer for every row). (`Eagle` asks this before growing its trees one more
        depth.)"""
        if self.together:
            expected = torch.ones_like(gain) if expected is None else expected.double()
            costs = torch.tensor([spent, spent + cost], dtype=torch.float64, device=gain.device)
            both = torch.stack([expected, expected + torch.where(rows, gain.double(), 0.0)], dim=1)  # (batch, 2)
            now, more = self.finish(both, costs, rows).tolist()
            return rows & (more < now * (1 - self.margin))
        return rows & (gain > self.rate() * cost)

    def finish(
        self,
        expected: Float[Tensor, "batch options"],
        cost: Float[Tensor, " options"],
        rows: Bool[Tensor, " batch"] | None = None,
    ) -> Float[Tensor, " options"]:
        """The batch's time to its last row's end if every step were like this one, for each option: the step's
        `cost` times the most steps any row in play (`rows`, default those of this step) still needs, its remaining
        budget over its `expected` tokens per step. A batch runs until its last row ends, so a row that guesses
        well but finishes early leaves its place idle: what counts is how soon the slowest row ends."""
        rows = self.playing if rows is None else rows
        left = self.remaining().double().clamp(min=1) if self.remaining is not None else torch.ones_like(expected[:, 0])
        steps = torch.where(rows[:, None], left.to(expected)[:, None] / expected.clamp(min=1e-9), 0.0)
        return cost.to(expected) * steps.max(0).values

    def rate(self) -> Float[Tensor, " batch"]:
        """Each row's tokens per unit of cost over its recorded steps (1 before any), never below 1: the one-row
        rule's r (the batch rule weighs the batch's end instead, `finish`). Plain steps alone make a token per
        t(1) = 1, so the best rate a row can reach, which Dinkelbach's rule weighs a step against, is at least 1: a row
        whose guesses have so far cost more than they gained must not lower its bar for more of them."""
        return (self.gained / self.spent).clamp(min=1.0)

    def step_costs(self, guesses: Sequence[int] | Int[Tensor, " steps"]) -> Float[Tensor, " steps"]:
        """T(k) for each k in `guesses`, as a float64 tensor (on the CPU), read from a table of T(0), T(1), ...
        that is made once and grown as needed (the costs never change)."""
        first_ones = isinstance(guesses, range) and guesses.start == 0 and guesses.step == 1
        guesses = guesses if first_ones else torch.as_tensor(guesses, dtype=torch.long, device="cpu")
        most = len(guesses) - 1 if first_ones else int(guesses.max()) if guesses.numel() else 0
        if most >= len(self.table):
            steps = [self.costs.step(k) for k in range(2 * most + 1)]
            self.table = torch.tensor(steps, dtype=torch.float64, device="cpu")
        return self.table[: len(guesses)] if first_ones else self.table[guesses]

    def calibrated(
        self, confidence: Float[Tensor, "batch ..."], place: int | Int[Tensor, "..."] | None = None
    ) -> Float[Tensor, "batch ..."]:
        """P(accepted | confidence), from this row's history in the confidence's bin, starting at the confidence
        scaled by how far the row's guesses of every bin were accepted more or less often than their confidence said
        (with the batch rule, from every row's: the rows share the draft and the target, so the batch learns how far
        to trust the draft's confidence as many times faster as it has rows). The scale learns from every verified
        guess, a bin only from its own, so an overconfident draft is distrusted in every bin after a few rejections.
        With the batch rule the pooled chance is then scaled, per row, by how far the row's own verified guesses were
        accepted more or less often than the pool's at their confidences (the pool's ratio worth `PRIOR` guesses'
        confidences): rows of one batch can differ (a quote, a sum), and the batch's finish weighs its slowest rows,
        which are the ones whose guesses fail most, so the pooled chance alone overrates the rows that decide.

        `place`: each guess's place in its chain (from 0), where the guesses form one. A scale above 1 reaches no
        place deeper than the row's verified chains reached (with the batch rule, any row's): guesses that held
        more often than their confidence said at the first place say nothing of the tenth (a batch whose first
        tries all held would otherwise count every later guess as sure, its chance scaled past 1), while distrust,
        a scale below 1, holds at every place."""
        flat, shape = pack([confidence], "batch *")  # (batch, guesses): any axes after the batch's as one
        columns = bin_of(flat)
        hits, tries = self.record_of_rows()
        judged = self.judged.sum().expand_as(self.judged) if self.together else self.judged
        ratio = (hits.sum(1) + 1) / (judged + 1)  # (batch,): accepted over expected, a sure hit as prior
        scale = ratio[:, None]
        if place is not None:
            reached = self.reached.max().expand_as(self.reached) if self.together else self.reached
            unseen = torch.as_tensor(place, device=flat.device).reshape(-1) >= reached[:, None]  # (batch, guesses)
            scale = torch.where(unseen, scale.clamp(max=1), scale)
        prior = (flat * scale).clamp(max=1)
        chance = (hits.gather(1, columns) + PRIOR * prior) / (tries.gather(1, columns) + PRIOR)
        if self.together:  # the pooled chance, scaled by how far this row's own guesses beat or missed the pool's ratio
            own = (self.hits.sum(1) + PRIOR * ratio) / (self.judged + PRIOR)
            chance = (chance * (own / ratio)[:, None]).clamp(max=1)
        return unpack(chance, shape, "batch *")[0]

    def acceptance(self) -> Float[Tensor, " batch"]:
        """The row's acceptance rate so far (`PRIOR` guesses at the prior `acceptance`; with the batch rule, the rows'
        together)."""
        if "acceptance" not in self.known:
            hits, tries = self.record_of_rows()
            self.known["acceptance"] = (hits.sum(1) + PRIOR * self.prior) / (tries.sum(1) + PRIOR)
        return self.known["acceptance"]

    def own_acceptance(self) -> Float[Tensor, " batch"]:
        """The chance that a row's next guess is accepted, where the draft's confidence is not weighed (a): with the
        batch rule, the row's own acceptance so far with the rows' pooled rate (`acceptance`) as its prior, worth
        `PRIOR` guesses (the batch's end is set by the rows whose guesses fail most, and the pooled rate alone
        overrates them, as in `calibrated`); else the row's rate, `acceptance`."""
        if not self.together:
            return self.acceptance()
        if "own" not in self.known:
            self.known["own"] = (self.hits.sum(1) + PRIOR * self.acceptance()) / (self.tries.sum(1) + PRIOR)
        return self.known["own"]

    def record_of_rows(self) -> tuple[Float[Tensor, "batch bins"], Float[Tensor, "batch bins"]]:
        """Accepted and verified guesses per confidence bin, per row: each row's own, or with the batch rule the
        rows' pooled, the same for every row."""
        if not self.together:
            return self.hits, self.tries
        return pooled(self.hits), pooled(self.tries)

    def record(
        self,
        drafted: Int[Tensor, " batch"],
        accepted: Int[Tensor, " batch"],
        extra_cost: float | Float[Tensor, " batch"] = 0.0,
    ) -> None:
        """After verification: guesses 1..accepted were accepted, guess accepted + 1 (if drafted) was not.
        `extra_cost`: what the step cost besides T(drafted) (a tree's drafting, in `Eagle`), for the row's rate."""
        if self.together:
            self.record_batch(drafted, accepted)
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
        self.reached = torch.maximum(self.reached, drafted.to(self.reached))
        confidence = torch.stack(self.confidences, dim=1)  # (batch, guesses)
        self.calibrate(confidence, *chain_outcome(drafted, accepted, confidence.shape[1]))

    def record_batch(self, drafted: Int[Tensor, " batch"], accepted: Int[Tensor, " batch"]) -> None:
        """The batch rule's record: its steps without drafting, and its patience: reset by a try whose accepted
        guesses paid for the guess and after which the batch drafted on, doubled by one that did not pay or after
        which the batch at once drafted nothing (the rows paid for the guess on average, not its slowest rows, whose
        end the batch rule weighs)."""
        playing = self.playing
        width = int(drafted[playing].max()) if bool(playing.any()) else 0
        tried, self.tried = self.tried, False
        if width == 0:
            if tried:  # the step after a try drafted nothing: the try did not pay after all
                self.batch_patience = 2 * self.batch_patience
            self.batch_rested += 1
            return
        self.waiting = False
        if bool(self.probing.any()):
            added = self.costs.step(1) - self.costs.step(0)
            paid = float(accepted[playing].sum()) * self.costs.step(0) > float(playing.sum()) * added
            self.batch_patience = PATIENCE if paid else 2 * self.batch_patience
            self.tried = paid
        self.batch_rested = 0

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
        self.judged += torch.where(tried, confidence.double().clamp(0, 1), 0.0).sum(1)
        self.known.clear()
        self.planned = None


def pooled(record: Float[Tensor, "batch column"]) -> Float[Tensor, "batch column"]:
    """Every row's record summed over the rows, given to every row (the batch rule's shared records)."""
    return repeat(reduce(record, "batch column -> column", "sum"), "column -> batch column", batch=record.shape[0])


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


def bin_of(confidence: Float[Tensor, "*shape"]) -> Int[Tensor, "*shape"]:
    """The calibration bin of each confidence in [0, 1]."""
    return (confidence * BINS).long().clamp(0, BINS - 1)
