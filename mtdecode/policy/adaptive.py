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
from mtdecode.costs import BatchCosts, DraftCosts, candidate_costs
from mtdecode.model import Runner
from mtdecode.policy.records import SUITE_RATES, CandidateRecord, CopyRecord, PlaceRecord
from mtdecode.policy.report import block_choice, candidate_choice, copy_choice, rule_choice
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

    def lookahead(
        self, s: Session, window: int | None, ngram: int | None, guesses: int | None, *, prompt_pool: bool
    ) -> "Candidates":
        """Lookahead's W, N and G: those given, the others chosen for this host's forward costs
        (`tuning.lookahead_plan`); where G is chosen it is the most candidates a step verifies, and each step
        verifies those that pay."""
        settings, choice = tuning.lookahead_plan(
            s.target.model, window, ngram, guesses, prompt_pool=prompt_pool, rows=s.batch
        )
        if choice is not None:  # what the tuning chose and why, for `Stats.choices`
            s.record_choice(choice)
        if settings is None or guesses is not None or settings[2] == 0:
            return Candidates(s, settings, None)
        w, n, g = settings
        if self.costs is None:
            return Candidates(s, settings, tuning.candidate_costs(s.target.model, w, n, g, rows=s.batch))
        return Candidates(s, settings, candidate_costs(self.costs, s.batch, w, n, g))

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


class Candidates:
    """A run's plan for lookahead's candidates: W, N and G (chosen for this host where not given), and, where G was
    chosen, how many of each row's candidates to verify (most recent first), from how often the row's candidates of
    each rank were the accepted one and how many tokens they brought (`CandidateRecord`)."""

    def __init__(
        self, s: Session, settings: tuple[int, int, int] | None, costs: DraftCosts | BatchCosts | None
    ) -> None:
        #: (W, N, G), or None where no setting is predicted to beat greedy decoding on this host
        self.settings = settings
        self.rule = None if costs is None else DraftLength(costs, s.batch, s.device, remaining=lambda: s.remaining)
        self.candidates = None
        if self.rule is not None and settings is not None:
            self.candidates = CandidateRecord(s.batch, settings[2])
            s.record_choice(lambda: candidate_choice(self.rule, settings[1], s.steps))  # for `Stats.choices`

    @property
    def greedy(self) -> bool:
        """Whether the run decodes greedily: no setting was predicted to beat it (`Stats.choices` says why)."""
        return self.settings is None

    def verify(self, found: list[list[list[int]]], rows: Bool[Tensor, " batch"]) -> list[list[list[int]]]:
        """Each row's first candidates, as many as pay (all where G was given); `rows`: those still decoding."""
        if self.candidates is None:
            return found
        available = torch.tensor([len(row) for row in found], device="cpu")
        expected = self.candidates.expected(max(map(len, found), default=0))
        keep = self.rule.plan_expected(expected.to(self.rule.hits.device), available, rows).tolist()
        return [row[:k] for row, k in zip(found, keep, strict=True)]

    def record(self, tried: list[list[list[int]]], candidate: Int[Tensor, " batch"], accepted: Int[Tensor, " batch"]):
        """After verifying: row b verified `tried[b]`; its `candidate[b]` brought `accepted[b]` tokens."""
        if self.candidates is None:
            return
        verified = torch.tensor([len(row) for row in tried], device="cpu")
        self.rule.record(verified.to(accepted.device), accepted)
        self.candidates.add(verified, candidate.cpu(), accepted.cpu())
