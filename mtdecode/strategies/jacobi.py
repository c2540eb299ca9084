"""Jacobi decoding: guess a whole block, let the model correct every guess at once.

Santilli et al. (2023) and Fu et al. (2024, Section 2) view greedy decoding of m tokens as
a system of m equations y_i = argmax p(. | prompt, y_1..y_{i-1}) and solve it by fixed-point
(Jacobi) iteration: start from any guess, recompute every y_i from the current guesses in
one forward pass, repeat. Per step, with x0 the newest committed token:

1. feed [x0, g_1..g_b] left to right: one forward gives a prediction after x0 and after each g_i;
2. the prediction after x0 is right by construction; g_i is right if it equals the prediction
   before it, so keep the longest prefix of guesses that agree, then the next prediction
   (`mtdecode.verification`: at temperature 0 this is exactly greedy);
3. the predictions made after the first wrong guess become the next step's guesses
   (the Jacobi update), padded back to `block` tokens.

Every step emits at least one token, so it is never slower in forward passes than greedy;
it is faster when several guesses converge at once. Lookahead decoding
(`mtdecode.strategies.lookahead`) keeps this update and adds an n-gram pool.

A forward over 1 + b tokens costs more than one over 1 token, though (on a CPU, and for a batch
of rows far more), and on real text plain Jacobi's guesses seldom converge. So by default
(`block=None`) each step verifies only as many guesses as are expected to pay for their place in
the forward, at most `max_block`, down to none: a plain step at greedy cost, after which the row's
guesses wait, one place on, for the next step that verifies them. The rule is `DraftLength.plan` in
`mtdecode.policy.rule`, judging each place by how often guesses there were accepted so far
(`PlaceRecord`), starting from how often the model's first guesses are accepted
(`tuning.jacobi_acceptance`), and calibrating those chances as it does prompt lookup's.
`Jacobi(block=b)` verifies b guesses every step, as the papers do.
"""

from collections.abc import Iterator
from dataclasses import dataclass

import torch

from mtdecode import tuning
from mtdecode.copying import prompt_tokens
from mtdecode.costs import BatchCosts, DraftCosts
from mtdecode.policy.report import drafting_choice
from mtdecode.policy.rule import PRIOR, DraftLength, chain_outcome, pooled
from mtdecode.session import Choice, Session, Step
from mtdecode.strategy import check_chance, check_counts
from mtdecode.tensor_types import Float, Int, Tensor
from mtdecode.verification import NONE, verify_chain


@dataclass(frozen=True)
class Jacobi:
    """Plain Jacobi decoding: guess a block of tokens, verify them all in one forward.

    Exact at temperature 0; with sampling, the guesses are verified by the one-hot rule of
    `mtdecode.verification`, which keeps the target distribution.

    **Arguments:**

    - `block`: verify this many guesses every step (at least 1); None (the default): as many as are expected to pay,
      at most `max_block`, down to none (the module's docstring).
    - `max_block`: the guesses the rows keep, and the most a step verifies when `block` is None.
    - `costs`: what the rule weighs: `BatchCosts` or one row's `DraftCosts`, as in `Speculative`; None: the batch's
      forward-cost curve measured on this host (`mtdecode.tuning.batch_draft_costs`).
    - `acceptance`: the rule's prior chance that a guess at the block's first place is accepted, before the run has
      verified any; None: the model's, measured once on this host and kept on disk
      (`mtdecode.tuning.jacobi_acceptance`). Pass it with `costs` to make a run repeat on another host.
    """

    block: int | None = None
    max_block: int = 8
    costs: DraftCosts | BatchCosts | None = None
    acceptance: float | None = None

    def __post_init__(self) -> None:
        check_counts(self, ("block", "max_block"), optional=["block"])
        if self.acceptance is not None:
            check_chance("acceptance", self.acceptance)

    def decode(self, s: Session) -> Iterator[list[Step]]:
        most = self.block or self.max_block
        guesses = prompt_tokens(s, most)  # (batch, most): any start converges; prompt tokens are a cheap one
        rule = record = None
        if self.block is None:
            costs = self.costs or tuning.batch_draft_costs(s.target.model, None, s.batch, longest=most + 1)
            prior = tuning.jacobi_acceptance(s.target.model) if self.acceptance is None else self.acceptance
            rule = DraftLength(costs, s.batch, s.device, remaining=lambda: s.remaining, acceptance=prior)
            record = PlaceRecord(s.batch, most, pooled=rule.together, first=prior)
            s.record_choice(lambda: block_choice(rule, s.steps))  # for `Stats.choices`
        while not s.done:
            k = s.budget(most)  # (batch,): the step adds one token of its own
            resting = rule is not None and rule.idle(rows=k > 0)  # its record unchanged since it rested
            if resting:
                rule.rest(k > 0)  # (a finished row's budget is 0)
                k = torch.zeros_like(k)
            elif rule is not None:  # how many of them pay, by the record of each place
                k = rule.plan(record.chances(most).to(s.device), k, s.active)
            steps, logits, accepted = verify_chain(s, up_to(guesses, k))  # steps 1-2
            if rule is not None and not resting:
                rule.record(k, accepted)
                record.add(k.cpu(), accepted.cpu())
            yield steps
            verified = (k > 0)[:, None]  # a row that verified none moves its guesses on one place and waits
            if bool(verified.any()):
                guesses = torch.where(verified, jacobi_update(logits, accepted, k, most), moved_on(guesses))  # step 3
            else:
                guesses = moved_on(guesses)


class PlaceRecord:
    """How often a guess at each place of the block was accepted, given the guesses before it were, over the steps
    that verified it; with `pooled`, every row's record together (the batch rule: the rows share the model and learn
    as many times faster as they are). The prior of the first place is `first` (`Jacobi` passes the model's measured
    `tuning.jacobi_acceptance`), that of each later place the estimate of the place before it (`PRIOR` guesses'
    worth each): a later place is verified only after the guesses before it were accepted, so its own record stays
    short, and an even chance there would keep a block whose first guess is seldom right worth verifying."""

    def __init__(self, batch: int, places: int, pooled: bool = False, first: float = 0.5) -> None:
        self.hits = torch.zeros(batch, places, dtype=torch.float64, device="cpu")
        self.tries = torch.zeros(batch, places, dtype=torch.float64, device="cpu")
        self.pooled = pooled
        self.first = first
        self.known: dict[int, Float[Tensor, "batch place"]] = {}  # `chances` by width, until the record changes

    def chances(self, width: int) -> Float[Tensor, "batch place"]:
        """P(guess i + 1 accepted | guesses 1..i were) for the first `width` places, per row."""
        if width not in self.known:
            self.known[width] = self.estimate(width)
        return self.known[width]

    def estimate(self, width: int) -> Float[Tensor, "batch place"]:
        """`chances`, worked out from the record."""
        hits, tries = self.hits[:, :width], self.tries[:, :width]
        if self.pooled:
            hits, tries = pooled(hits), pooled(tries)
        chance, prior = torch.empty_like(hits), hits.new_full((hits.shape[0],), self.first)  # (batch, place)
        for place in range(hits.shape[1]):  # P(guess i accepted | guesses before it were), the next place's prior
            prior = (hits[:, place] + PRIOR * prior) / (tries[:, place] + PRIOR)
            chance[:, place] = prior
        return chance

    def add(self, verified: Int[Tensor, " batch"], accepted: Int[Tensor, " batch"]) -> None:
        """After verification: guesses 1..accepted held, guess accepted + 1 (if verified) did not."""
        if not bool((verified > 0).any()):  # a step without guesses leaves the record as it was
            return
        tried, hit = chain_outcome(verified, accepted, self.hits.shape[1])
        self.tries += tried.double()
        self.hits += hit.double()
        self.known.clear()


def block_choice(rule: DraftLength, steps: list[Step]) -> Choice:
    """What the rule chose over the run (`Stats.choices`): how many guesses the steps verified, and how many row
    steps verified none because none was expected to pay for its place in the forward."""
    added = rule.costs.t(2) - rule.costs.t(1)
    pays = (
        f"no guess was expected to pay for its place in the forward (one more verified token costs {added:.2f} of a "
        "1-token forward; by how often guesses at each place of the block were accepted so far)"
    )
    fix = "Jacobi(block=b) verifies b guesses every step"
    return drafting_choice("Jacobi", rule, steps, guesses="guesses", pays=pays, fix=fix)


def moved_on(guesses: Int[Tensor, "batch block"]) -> Int[Tensor, "batch block"]:
    """A row's guesses after a step that committed one token without verifying them: the first guess was for the
    place just committed, so the others move up one place, and the last is repeated at the end."""
    return torch.cat([guesses[:, 1:], guesses[:, -1:]], dim=1)


def up_to(guesses: Int[Tensor, "batch block"], k: Int[Tensor, " batch"]) -> Int[Tensor, "batch guesses"]:
    """Each row's first k[b] guesses, the rest padded with -1 (cut to the widest row)."""
    width = int(k.max())
    column = torch.arange(width, device=guesses.device)
    return torch.where(column < k[:, None], guesses[:, :width], NONE)


def jacobi_update(
    logits: Float[Tensor, "batch rows vocab"], accepted: Int[Tensor, " batch"], k: Int[Tensor, " batch"], block: int
) -> Int[Tensor, "batch block"]:
    """Step 3: the predictions after the first rejected guess, padded to `block` by repeating the last one.

    Row i of a row's `logits` was computed after guess i (row 0 after x0), up to its k guesses. The
    step committed guesses 1..accepted and the prediction of row `accepted`; rows accepted+1..k
    predict the positions after that.
    """
    predictions = logits.argmax(dim=-1)  # (batch, rows)
    index = accepted[:, None] + 1 + torch.arange(block, device=logits.device)  # (batch, block)
    return predictions.gather(1, torch.minimum(index, k[:, None]))  # past a row's last guess: its last prediction
