"""mtdecode's adaptive policy: guess while a guess is expected to pay for itself, on measured costs.

`Adaptive` holds what the rule weighs (costs and a prior acceptance, measured on this host and kept on disk where
not given: `mtdecode.tuning`). Each kind of guess gets its plan for a run from it, which asks the rule
(`mtdecode.policy.rule.DraftLength`) at the strategy's fixed points and words what it chose for `Stats.choices`
(`mtdecode.policy.report`).
"""

from collections.abc import Callable
from dataclasses import dataclass

import torch

from mtdecode import tuning
from mtdecode.costs import BatchCosts, DraftCosts
from mtdecode.model import Runner
from mtdecode.policy.records import SUITE_RATES, CopyRecord, PlaceRecord
from mtdecode.policy.report import block_choice, copy_choice, rule_choice
from mtdecode.policy.rule import DraftLength, expected_tokens
from mtdecode.session import Session
from mtdecode.strategy import check_chance
from mtdecode.tensor_types import Bool, Float, Int, Tensor


@dataclass(frozen=True)
class Adaptive:
    """Guess while it pays (`mtdecode.policy.rule`), weighing `costs` and `acceptance`.

    **Arguments:**

    - `costs`: what the rule weighs: `BatchCosts` to weigh the batch's goodput (a batch's rows draft together, as
      many guesses as pay for the whole batch), or one row's `DraftCosts` to weigh each row alone (a row then
      decodes exactly as its prompt alone); None: the batch's, measured on this host once and kept on disk
      (`mtdecode.tuning`), so that every process weighs the same numbers.
    - `acceptance`: the rule's prior chance that a first guess is accepted, before the run has verified any; None:
      the draft's (or the model's own, for Jacobi), measured once on this host and kept on disk. Pass it with
      `costs` to make a seeded run repeat on another host.
    """

    costs: DraftCosts | BatchCosts | None = None
    acceptance: float | None = None

    def __post_init__(self) -> None:
        if self.acceptance is not None:
            check_chance("acceptance", self.acceptance)

    def chain(self, s: Session, draft: Runner, *, most: int, name: str, drafting: str = "a draft forward") -> "Chain":
        """A draft model's chain of guesses (`Speculative`): a guess costs a draft forward."""
        costs = self.costs or tuning.batch_draft_costs(s.target.model, draft.model, s.batch)
        return Chain(s, costs, self.prior(s, draft), most, name, drafting)

    def beams(self, s: Session, draft: Runner, *, width: int, most: int) -> "Chain":
        """MTAD's block: a guess costs a depth of the beams (a draft forward over `width` tokens per row, then the
        scoring of their children)."""
        costs = self.costs
        if costs is None:
            depth = tuning.measure_beam_depth_cost(s.target.model, draft.model, width, s.batch)
            costs = tuning.batch_draft_costs(s.target.model, draft.model, s.batch, draft_cost=depth)
        return Chain(s, costs, self.prior(s, draft), most, "MTAD", "a depth of the beams")

    def copies(self, s: Session, *, most: int) -> "Copies":
        """Prompt lookup's copies: a copied token costs no draft, only its place in the target's forward."""
        return Copies(s, self.costs or tuning.batch_draft_costs(s.target.model, None, s.batch), most)

    def block(self, s: Session, *, most: int) -> "Block":
        """Jacobi's block of `most` guesses: a guess costs its place in the target's forward; the prior is the
        model's own acceptance of its first guesses, measured once on this host (`tuning.jacobi_acceptance`)."""
        costs = self.costs or tuning.batch_draft_costs(s.target.model, None, s.batch, longest=most + 1)
        prior = tuning.jacobi_acceptance(s.target.model) if self.acceptance is None else self.acceptance
        return Block(s, costs, prior, most)

    def prior(self, s: Session, draft: Runner) -> float:
        """The prior acceptance: as given, else the draft's, measured once on this host."""
        return tuning.draft_acceptance(s.target.model, draft.model) if self.acceptance is None else self.acceptance


class Chain:
    """A run's plan for a chain of guesses from a draft: the rule asked before the first guess and after each."""

    def __init__(
        self, s: Session, costs: DraftCosts | BatchCosts, prior: float, most: int, name: str, drafting: str
    ) -> None:
        self.most = most
        # in a batch, the draft's first read of the prompts bets on an acceptance not yet seen: only a try makes it
        self.rule = DraftLength(costs, s.batch, s.device, remaining=lambda: s.remaining, acceptance=prior,
                                wait_first=True)  # fmt: skip
        s.record_choice(lambda: rule_choice(name, self.rule, s.steps, drafting=drafting))  # for `Stats.choices`

    def rests(self, rows: Bool[Tensor, " batch"], unread: list[int]) -> bool:
        """Whether the batch rests this step (a plain step, recorded as such), weighing the draft's catch-up on
        `unread` tokens per row when it drafts again; `rows`: those that could draft."""
        if not self.rule.idle_before_catch_up(unread, rows=rows):
            return False
        self.rule.rest(rows)
        return True

    def first(self, rows: Bool[Tensor, " batch"], unread: list[int]) -> Bool[Tensor, " batch"]:
        """Of `rows`, those that draft a first guess, which also pays for reading `unread` tokens per row."""
        return rows & self.rule.start(possible=rows, unread=unread)

    def more(
        self, rows: Bool[Tensor, " batch"], confidence: Callable[[], Float[Tensor, " batch"]]
    ) -> Bool[Tensor, " batch"]:
        """Of `rows` (those that drew a guess and have room for another), those that draft one more, given q's
        `confidence` in the guess just drawn."""
        return rows & self.rule.more(confidence(), rows=rows)

    def record(self, drafted: Int[Tensor, " batch"], accepted: Int[Tensor, " batch"]) -> None:
        """After verifying: each row drafted `drafted` guesses and kept `accepted`."""
        self.rule.record(drafted, accepted)


class Copies:
    """A run's plan for prompt lookup's copies: how many of each row's copied tokens to verify, from how often the
    row's copied tokens held after runs of agreeing tokens as long (`CopyRecord`, starting from the rates measured
    over greedy's answers to the benchmark suite), weighed against the forward's cost for them."""

    def __init__(self, s: Session, costs: DraftCosts | BatchCosts, most: int) -> None:
        self.most = most
        self.rule = DraftLength(costs, s.batch, s.device, remaining=lambda: s.remaining)
        self.copies = CopyRecord(s.batch, SUITE_RATES)
        s.record_choice(lambda: copy_choice("PromptLookup", self.rule, s.steps))  # for `Stats.choices`

    def verify(self, copied: list[list[int]], matched: list[int], rows: Bool[Tensor, " batch"]) -> list[list[int]]:
        """The prefix of each row's copy to verify (`DraftLength.plan_expected`), each copied token counting with its
        row's rate of acceptance after a run as long as the one before it (the copy followed `matched[b]` agreeing
        tokens), known before anything is verified. Those rates are the row's record of acceptance already, so they
        are not calibrated again as a draft's confidence is. `rows`: those still decoding."""
        available = torch.tensor([len(row) for row in copied], device="cpu")  # (batch,)

        def expected() -> Float[Tensor, "batch options"]:  # E(0..longest copy), where the rule weighs it
            chances = self.copies.chances(max(map(len, copied), default=0), matched)  # (batch, longest copy)
            return expected_tokens(chances.to(self.rule.hits.device).cumprod(1))

        keep = self.rule.plan_expected(expected, available, rows).tolist()
        return [row[:n] for row, n in zip(copied, keep, strict=True)]

    def record(self, verified: list[list[int]], matched: list[int], accepted: Int[Tensor, " batch"]) -> None:
        """After verifying the `verified` copies (which followed `matched` agreeing tokens): `accepted` held."""
        drafted = torch.tensor([len(c) for c in verified], device="cpu")
        self.rule.record(drafted.to(accepted.device), accepted)
        self.copies.add(drafted, accepted.cpu(), matched)


class Block:
    """A run's plan for Jacobi's block of guesses: how many to verify, judging each place of the block by how often
    guesses there were accepted so far (`PlaceRecord`, starting from how often the model's first guesses are
    accepted), and whether the batch rests."""

    def __init__(self, s: Session, costs: DraftCosts | BatchCosts, prior: float, most: int) -> None:
        self.most = most
        self.rule = DraftLength(costs, s.batch, s.device, remaining=lambda: s.remaining, acceptance=prior)
        self.places = PlaceRecord(s.batch, most, pooled=self.rule.together, first=prior)
        self.resting = False
        s.record_choice(lambda: block_choice(self.rule, s.steps))  # for `Stats.choices`

    def verify(self, available: Int[Tensor, " batch"], rows: Bool[Tensor, " batch"]) -> Int[Tensor, " batch"]:
        """How many of its first `available[b]` guesses row b verifies (0: a plain step; `rows`: those decoding)."""
        self.resting = self.rule.idle(rows=available > 0)  # its record unchanged since it rested
        if self.resting:
            self.rule.rest(available > 0)  # (a finished row's budget is 0)
            return torch.zeros_like(available)
        return self.rule.plan(self.places.chances(self.most).to(available.device), available, rows)

    def record(self, verified: Int[Tensor, " batch"], accepted: Int[Tensor, " batch"]) -> None:
        """After verifying: row b verified `verified[b]` guesses and kept `accepted[b]`."""
        if not self.resting:
            self.rule.record(verified, accepted)
            self.places.add(verified.cpu(), accepted.cpu())
