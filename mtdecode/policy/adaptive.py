"""mtdecode's adaptive policy: guess while a guess is expected to pay for itself, on measured costs.

`Adaptive` holds what the rule weighs (costs and a prior acceptance, measured on this host and kept on disk where
not given: `mtdecode.costs`). Each kind of guess gets its plan for a run from it, which asks the rule
(`mtdecode.policy.rule`) at the strategy's fixed points and words what it chose for `Stats.choices`
(`mtdecode.policy.report`).
"""

from collections.abc import Callable
from dataclasses import dataclass

import torch

from mtdecode.costs import BatchCosts, DraftCosts, candidate_costs, curves, priors, probes
from mtdecode.model import Runner
from mtdecode.policy import search
from mtdecode.policy.records import SUITE_RATES, CandidateRecord, CopyRecord, PlaceRecord
from mtdecode.policy.report import block_choice, candidate_choice, copy_choice, rule_choice, tree_choice
from mtdecode.policy.rule import expected_tokens, rule_for
from mtdecode.session import Session
from mtdecode.strategy import check_chance
from mtdecode.tensor_types import Bool, Float, Int, Tensor
from mtdecode.zoo.eagle import HeadRunner


@dataclass(frozen=True)
class Adaptive:
    """Guess while it pays (`mtdecode.policy.rule`), weighing `costs` and `acceptance`.

    **Arguments:**

    - `costs`: what the rule weighs: `BatchCosts` to weigh the batch's goodput (a batch's rows draft together, as
      many guesses as pay for the whole batch), or one row's `DraftCosts` to weigh each row alone (a row then
      decodes exactly as its prompt alone); None: the batch's, measured on this host once and kept on disk
      (`mtdecode.costs`), so that every process weighs the same numbers.
    - `acceptance`: the rule's prior chance that a first guess is accepted, before the run has verified any; None:
      the draft's (or the model's own, for Jacobi), measured once on this host and kept on disk. Pass it with
      `costs` to make a seeded run repeat on another host.
    - `depth_cost`: for a tree (`Eagle`), what growing it one more depth costs (a head forward over W nodes per row,
      their scores and the choice of children), in units of a 1-token target forward of one row; None: measured on
      this host (in a run for a batch with measured costs, `probes.measure_eagle_steps`; else timed alone,
      `probes.measure_depth_cost`).
    - `read_cost`: for a tree, what the head's reading of the target's features costs per entry and row; None:
      measured on this host for the batch's rows. Only the batch rule weighs it: a batch drafts first, or again
      after resting, only if a try pays for that catch-up.
    """

    costs: DraftCosts | BatchCosts | None = None
    acceptance: float | None = None
    depth_cost: float | None = None
    read_cost: float | None = None

    def __post_init__(self) -> None:
        if self.acceptance is not None:
            check_chance("acceptance", self.acceptance)
        for name in ("depth_cost", "read_cost"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0):
                raise ValueError(f"{name} must be a cost >= 0 (None: measured on this host), got {value!r}")

    def chain(self, s: Session, draft: Runner, *, most: int, name: str, drafting: str = "a draft forward") -> "Chain":
        """A draft model's chain of guesses (`Speculative`): a guess costs a draft forward."""
        costs = self.costs or curves.batch_draft_costs(s.target.model, draft.model, s.batch)
        return Chain(s, costs, self.prior(s, draft), most, name, drafting)

    def beams(self, s: Session, draft: Runner, *, width: int, most: int) -> "Chain":
        """MTAD's block: a guess costs a depth of the beams (a draft forward over `width` tokens per row, then the
        scoring of their children)."""
        costs = self.costs
        if costs is None:
            depth = probes.measure_beam_depth_cost(s.target.model, draft.model, width, s.batch)
            costs = curves.batch_draft_costs(s.target.model, draft.model, s.batch, draft_cost=depth)
        return Chain(s, costs, self.prior(s, draft), most, "MTAD", "a depth of the beams")

    def copies(self, s: Session, *, most: int) -> "Copies":
        """Prompt lookup's copies: a copied token costs no draft, only its place in the target's forward."""
        return Copies(s, self.costs or curves.batch_draft_costs(s.target.model, None, s.batch), most)

    def block(self, s: Session, *, most: int) -> "Block":
        """Jacobi's block of `most` guesses: a guess costs its place in the target's forward; the prior is the
        model's own acceptance of its first guesses, measured once on this host (`priors.jacobi_acceptance`)."""
        costs = self.costs or curves.batch_draft_costs(s.target.model, None, s.batch, longest=most + 1)
        prior = priors.jacobi_acceptance(s.target.model) if self.acceptance is None else self.acceptance
        return Block(s, costs, prior, most)

    def lookahead(
        self, s: Session, window: int | None, ngram: int | None, guesses: int | None, *, prompt_pool: bool
    ) -> "Candidates":
        """Lookahead's W, N and G: those given, the others chosen for this host's forward costs
        (`search.lookahead_plan`); where G is chosen it is the most candidates a step verifies, and each step
        verifies those that pay."""
        settings, choice = search.lookahead_plan(
            s.target.model, window, ngram, guesses, prompt_pool=prompt_pool, rows=s.batch
        )
        if choice is not None:  # what the search chose and why, for `Stats.choices`
            s.record_choice(choice)
        if settings is None or guesses is not None or settings[2] == 0:
            return Candidates(s, settings, None)
        w, n, g = settings
        if self.costs is None:
            return Candidates(s, settings, curves.lookahead_costs(s.target.model, w, n, g, rows=s.batch))
        return Candidates(s, settings, candidate_costs(self.costs, s.batch, w, n, g))

    def tree(self, s: Session, head: HeadRunner, *, depth: int, width: int, lookup: int, timed: Callable) -> "Tree":
        """EAGLE's tree of `depth` x `width` head nodes and a copy of up to `lookup` tokens: a node costs its place in
        the target's forward, a depth of the tree one head forward (`depth_cost`). For a batch with measured costs,
        what a drafting step does beside its target forward is measured in a run of the strategy with fixed trees
        (`timed(depth, nodes)` gives one; `probes.measure_eagle_steps`), as the step's overhead and each verified
        node's share."""
        target, rows = s.target.model, s.batch
        beside = None
        if self.costs is None and rows > 1:  # a drafting step's work beside its target forward, in a run
            beside = probes.measure_eagle_steps(target, head.model, width, rows, timed, lookup=lookup > 0)
        costs = self.costs or curves.batch_draft_costs(
            target, None, rows, longest=depth * width + lookup + 1, planned=True,
            draft_cost=None if beside is None else beside.node, overhead=None if beside is None else beside.step,
        )  # fmt: skip
        depth_cost, read_cost = self.depth_cost, self.read_cost
        if depth_cost is None:
            depth_cost = (
                beside.depth if beside is not None else probes.measure_depth_cost(target, head.model, width, rows)
            )
        together = isinstance(costs, BatchCosts) and rows > 1
        if read_cost is None and (beside is not None or together):  # only the batch rule weighs it
            read_cost = beside.read if beside is not None else probes.measure_read_cost(target, head.model, rows)
        # the work a drafting step does before the rule weighs its tree, beyond its catch-up: the first depth's
        # scores (in the costs' overhead where a run measured the step's work)
        first = 0.0 if beside is not None else depth_cost
        return Tree(s, costs, depth_cost, read_cost or 0.0, first)

    def prior(self, s: Session, draft: Runner) -> float:
        """The prior acceptance: as given, else the draft's, measured once on this host."""
        return priors.draft_acceptance(s.target.model, draft.model) if self.acceptance is None else self.acceptance


class Chain:
    """A run's plan for a chain of guesses from a draft: the rule asked before the first guess and after each."""

    def __init__(
        self, s: Session, costs: DraftCosts | BatchCosts, prior: float, most: int, name: str, drafting: str
    ) -> None:
        self.most = most
        # in a batch, the draft's first read of the prompts bets on an acceptance not yet seen: only a try makes it
        self.rule = rule_for(costs, s.batch, s.device, remaining=lambda: s.remaining, acceptance=prior,
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
        self.rule = rule_for(costs, s.batch, s.device, remaining=lambda: s.remaining)
        self.copies = CopyRecord(s.batch, SUITE_RATES)
        s.record_choice(lambda: copy_choice("PromptLookup", self.rule, s.steps))  # for `Stats.choices`

    def verify(self, copied: list[list[int]], matched: list[int], rows: Bool[Tensor, " batch"]) -> list[list[int]]:
        """The prefix of each row's copy to verify (`Rule.plan_expected`), each copied token counting with its
        row's rate of acceptance after a run as long as the one before it (the copy followed `matched[b]` agreeing
        tokens), known before anything is verified. Those rates are the row's record of acceptance already, so they
        are not calibrated again as a draft's confidence is. `rows`: those still decoding."""
        available = torch.tensor([len(row) for row in copied], device="cpu")  # (batch,)

        def expected() -> Float[Tensor, "batch options"]:  # E(0..longest copy), where the rule weighs it
            chances = self.copies.chances(max(map(len, copied), default=0), matched)  # (batch, longest copy)
            return expected_tokens(chances.to(self.rule.device).cumprod(1))

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
        self.rule = rule_for(costs, s.batch, s.device, remaining=lambda: s.remaining, acceptance=prior)
        self.places = PlaceRecord(s.batch, most, pooled=self.rule.pools_rows, first=prior)
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
        self.rule = None if costs is None else rule_for(costs, s.batch, s.device, remaining=lambda: s.remaining)
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
        keep = self.rule.plan_expected(expected.to(self.rule.device), available, rows).tolist()
        return [row[:k] for row, k in zip(found, keep, strict=True)]

    def record(self, tried: list[list[list[int]]], candidate: Int[Tensor, " batch"], accepted: Int[Tensor, " batch"]):
        """After verifying: row b verified `tried[b]`; its `candidate[b]` brought `accepted[b]` tokens."""
        if self.candidates is None:
            return
        verified = torch.tensor([len(row) for row in tried], device="cpu")
        self.rule.record(verified.to(accepted.device), accepted)
        self.candidates.add(verified, candidate.cpu(), accepted.cpu())


class Tree:
    """A run's plan for EAGLE's tree: each node's chance of acceptance calibrated from the head's confidence by the
    row's record, how deep to grow (while a depth's chances pay for a head forward), how many nodes to verify (the
    best N by worth), and, for a batch, when the head rests."""

    def __init__(
        self, s: Session, costs: DraftCosts | BatchCosts, depth_cost: float, read_cost: float, first: float
    ) -> None:
        self.depth_cost, self.read_cost, self.first = depth_cost, read_cost, first
        # with the batch rule, the batch's first tree is a try: made only if it would pay for the prompts' read
        self.rule = rule_for(costs, s.batch, s.device, remaining=lambda: s.remaining, wait_first=True)
        self.active = lambda: s.active
        s.record_choice(lambda: tree_choice(self.rule, depth_cost, s.steps))  # for `Stats.choices`

    def rests(
        self,
        expected: Float[Tensor, "batch options"] | None,
        available: Int[Tensor, " batch"] | None,
        unread: int,
    ) -> bool:
        """Whether the batch rests this step (a plain step; the head does no work): nothing would pay for the head's
        reading of `unread` features per row and its first depth, not even the copies alone (E(0..longest) of
        `expected`, of `available` copied tokens per row; None without copies)."""
        playing = self.active()
        if not self.rule.idle(expected, available, reading=reading_cost(self.read_cost, unread), extra=self.first):
            return False
        self.rule.rest(playing)
        return True

    def calibrated(self, confidence: Float[Tensor, "batch node"]) -> Float[Tensor, "batch node"]:
        """P(a node accepted | its parent accepted), from the head's `confidence` in it, by the rows' record."""
        return self.rule.calibrated(confidence)

    def grows(
        self, depth: int, nodes: int, gain: Float[Tensor, " batch"], expected: Float[Tensor, " batch"],
        rows: Bool[Tensor, " batch"],
    ) -> Bool[Tensor, " batch"]:  # fmt: skip
        """Which of `rows` grow their tree to `depth`, whose nodes add at most `gain` expected tokens to a step that
        verifies the `nodes` made so far and expects `expected`: with the batch rule, when the batch would end with
        the tree so far against with one more depth."""
        spent = self.rule.costs.step(nodes) + (depth - 2) * self.depth_cost
        return self.rule.worth(gain, self.depth_cost, rows, expected, spent)

    def size(self, worth: Float[Tensor, "batch node"], available: Int[Tensor, " batch"]) -> Int[Tensor, " batch"]:
        """How many of its `available` worthiest nodes each row verifies: the N that maximises E(N) - r T(N)."""
        ranked = worth.sort(dim=1, descending=True).values.clamp(min=0)  # (batch, node)
        return self.rule.plan_expected(expected_tokens(ranked), available)  # E(0..node)

    def record(
        self,
        verified: Int[Tensor, " batch"],
        accepted: Int[Tensor, " batch"],
        depths: Int[Tensor, " batch"],
        tried: Callable[[], tuple[Tensor, Tensor, Tensor] | None],
    ) -> None:
        """After verifying: row b verified `verified[b]` nodes of a tree grown `depths[b]` deep (a head forward each)
        and kept `accepted[b]`; `tried()` gives the head's verified nodes' confidences, which were tried and which
        were hits, for the calibration (None: no node was verified)."""
        self.rule.record(verified, accepted, extra_cost=depths.double() * self.depth_cost)
        nodes = tried()
        if nodes is not None:
            self.rule.calibrate(*nodes)

    def rests_after(self, verified: Int[Tensor, " batch"]) -> bool:
        """Whether a batch whose rows verified `verified` nodes starts a rest at once (no row verified one)."""
        return self.rule.pools_rows and not bool(verified.any())


def reading_cost(read_cost: float, entries: int) -> float:
    """What the head's reading of `entries` features per row costs the batch (the widest row's, since the rows are
    read side by side): `read_cost` per entry, in proportion to the entries (the head's read grows a little faster
    with its entries than the target's forward does; `docs/strategies/eagle.md`); 0 with nothing to read."""
    return read_cost * entries if entries and read_cost else 0.0
