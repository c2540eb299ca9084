"""What a policy learns from verified guesses, by kind: how often each was accepted.

- `CopyRecord`: prompt lookup's copied tokens, by the run of agreeing tokens before each (`PromptLookup`, `Eagle`'s
  copy branch);
- `PlaceRecord`: Jacobi's guesses, by their place in the block;
- `CandidateRecord`: lookahead's candidates, by their rank in the pool.

Each starts from a prior worth a few guesses and keeps its estimate until a verified guess changes it.
"""

from collections.abc import Callable, Sequence

import torch

from mtdecode.policy.calibration import PRIOR, pooled
from mtdecode.policy.rule import chain_outcome
from mtdecode.tensor_types import Float, Int, Tensor

#: how often a copied token held after a run of 1, 2, ..., 8 or more agreeing tokens, over greedy's answers to the
#: benchmark suite (`python benchmarks/copy_rates.py`, 64 new tokens: 109 of 472 after one token, 295 of 586 after two
#: or three, 2487 of 2694 after seven or more; the four tasks' rates after one token lie between 0.19 and 0.28):
#: prompt lookup's prior (`CopyRecord`). L / (L + 2) lies above it after one and three tokens (0.33 and 0.60).
SUITE_RATES = (0.23, 0.50, 0.50, 0.71, 0.71, 0.84, 0.92, 0.92)


class Record:
    """Verified guesses per row and column (a place, a rank, a run) and how many of them held, with what the record
    says kept by question until a verified guess changes it (most steps verify nothing)."""

    def __init__(self, batch: int, columns: int) -> None:
        self.hits = torch.zeros(batch, columns, dtype=torch.float64, device="cpu")  # bookkeeping on the host
        self.tries = torch.zeros(batch, columns, dtype=torch.float64, device="cpu")
        self.known: dict[object, Float[Tensor, "batch width"]] = {}

    def kept(
        self, question: object, estimate: Callable[[], Float[Tensor, "batch width"]]
    ) -> Float[Tensor, "batch width"]:
        """`estimate()`, worked out once per `question` until the record changes (`changed`)."""
        if question not in self.known:
            self.known[question] = estimate()
        return self.known[question]

    def changed(self) -> None:
        """Forget what was kept: a verified guess changed the record."""
        self.known.clear()


class CopyRecord(Record):
    """How often this row's copied tokens were accepted, read by the length of the run of tokens that agreed before
    each one.

    Copies hold or break as a whole (a quote goes on until the answer departs from it), and the longer the run that
    already agrees with the copy's source, the likelier the next copied token holds. That run is the tokens before
    the copy that agreed with those before its source (`lookup_matched`), then the copy's own tokens that held. The
    copied token after a run of L is read with the rate of runs of L (1, 2, ..., `RUNS` - 1 a rate each, longer ones
    sharing the last), and a prior worth `PRIOR` tokens of the row's record: `rates[L - 1]` (runs longer than
    `rates` take its last), or L / (L + 2) with no `rates` (a third after one token, a half after two).

    **Arguments:**

    - `batch`: the rows.
    - `rates`: the prior after runs of 1, 2, ... agreeing tokens (`SUITE_RATES`: as measured over greedy's answers
      to the benchmark suite); None: L / (L + 2).
    """

    #: runs of 1 to `RUNS` - 1 agreeing tokens have a rate each; longer ones share the last
    RUNS = 4
    #: tokens of record the prior is worth
    PRIOR = 2.0

    def __init__(self, batch: int, rates: Sequence[float] | None = None) -> None:
        if rates is not None and (not rates or not all(0 < rate < 1 for rate in rates)):
            raise ValueError(f"rates must be chances strictly between 0 and 1, one per run length, got {rates!r}")
        self.rates = None if rates is None else torch.tensor(rates, dtype=torch.float64, device="cpu")
        super().__init__(batch, self.RUNS)  # columns: by the agreeing run's length

    def chances(self, width: int, matched: list[int]) -> Float[Tensor, "batch width"]:
        """P(copied token i + 1 accepted | tokens 1..i accepted) for i < `width`, per row, its copy following
        `matched[b]` agreeing tokens: its run's record and its prior, or a shorter run's chance where that is higher
        (a copy that held so far holds on at least as often)."""
        return self.kept((width, tuple(matched)), lambda: self.estimate(width, matched))

    def run(self, width: int, matched: list[int]) -> Int[Tensor, "batch width"]:
        """The run before copied token i + 1, i < `width`: `matched[b]` + i (at least 1)."""
        before = torch.tensor(matched, dtype=torch.long, device="cpu").reshape(self.hits.shape[0])
        return before.clamp(min=1)[:, None] + torch.arange(width, device="cpu")  # (batch, width)

    def estimate(self, width: int, matched: list[int]) -> Float[Tensor, "batch width"]:
        """`chances`, worked out from the record."""
        run = self.run(width, matched)
        column = (run - 1).clamp(max=self.RUNS - 1)
        if self.rates is None:
            prior = run.double() / (run.double() + 2.0)
        else:
            prior = self.rates[(run - 1).clamp(max=len(self.rates) - 1)]
        rate = (self.hits.gather(1, column) + self.PRIOR * prior) / (self.tries.gather(1, column) + self.PRIOR)
        return rate.cummax(dim=1).values if width else rate

    def add(self, drafted: Int[Tensor, " batch"], accepted: Int[Tensor, " batch"], matched: list[int]) -> None:
        """After verification: copied tokens 1..accepted held, token accepted + 1 (if drafted) did not; the copies
        followed `matched` agreeing tokens."""
        width = int(drafted.max()) if drafted.numel() else 0
        if width == 0:  # nothing verified: the record stays as it was
            return
        self.changed()
        tried, hit = chain_outcome(drafted, accepted, width)  # (batch, drafted)
        column = (self.run(width, matched) - 1).clamp(max=self.RUNS - 1)
        self.tries.scatter_add_(1, column, tried.double())
        self.hits.scatter_add_(1, column, hit.double())


class PlaceRecord(Record):
    """How often a guess at each place of the block was accepted, given the guesses before it were, over the steps
    that verified it; with `pooled`, every row's record together (the batch rule: the rows share the model and learn
    as many times faster as they are). The prior of the first place is `first` (`Jacobi` passes the model's measured
    `priors.jacobi_acceptance`), that of each later place the estimate of the place before it (`PRIOR` guesses'
    worth each): a later place is verified only after the guesses before it were accepted, so its own record stays
    short, and an even chance there would keep a block whose first guess is seldom right worth verifying."""

    def __init__(self, batch: int, places: int, pooled: bool = False, first: float = 0.5) -> None:
        super().__init__(batch, places)
        self.pooled = pooled
        self.first = first

    def chances(self, width: int) -> Float[Tensor, "batch place"]:
        """P(guess i + 1 accepted | guesses 1..i were) for the first `width` places, per row."""
        return self.kept(width, lambda: self.estimate(width))

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
        self.changed()


class CandidateRecord(Record):
    """How often this row's candidate of each rank (0: the pool's most recent) was the accepted one, and how many
    tokens an accepted candidate brought, over the steps that verified it; one token, and for rank j a chance of
    1 / 2^(j + 1) (two steps' worth), as priors.

    The candidates of one step start with different tokens or share a prefix; a step accepts one of them at most,
    so the expected tokens of verifying the first g are about 1 + L (h_0 + ... + h_{g-1}), with h_j the rank's
    rate and L the tokens per accepted candidate. For the same reason the ranks' chances add up to at most 1, and
    so do their priors: an even chance for each rank, as before, expected a row's first step that verified 7
    candidates to gain 3.5 candidates' tokens."""

    def __init__(self, batch: int, ranks: int) -> None:
        super().__init__(batch, ranks)
        self.tokens = torch.zeros(batch, dtype=torch.float64, device="cpu")  # tokens brought by accepted candidates

    def expected(self, width: int) -> Float[Tensor, "batch options"]:
        """E(0..width): expected tokens of a step that verifies the first g candidates, g = 0..width."""
        return self.kept(width, lambda: self.estimate(width))

    def estimate(self, width: int) -> Float[Tensor, "batch options"]:
        """`expected`, worked out from the record."""
        prior = 0.5 ** torch.arange(1, width + 1, dtype=torch.float64, device="cpu")  # (width,): 1/2, 1/4, ...
        rate = (self.hits[:, :width] + 2 * prior) / (self.tries[:, :width] + 2)  # (batch, width)
        per_hit = (self.tokens + 1) / (self.hits.sum(1) + 1)  # (batch,)
        gain = torch.cat([rate.new_zeros(rate.shape[0], 1), rate.cumsum(1)], dim=1)  # (batch, width + 1)
        return 1 + per_hit[:, None] * gain

    def add(
        self, tried: Int[Tensor, " batch"], candidate: Int[Tensor, " batch"], accepted: Int[Tensor, " batch"]
    ) -> None:
        """After verification: row b verified its first `tried[b]` candidates; `candidate[b]` brought `accepted[b]`."""
        if not bool((tried > 0).any()):  # a step without candidates leaves the record as it was
            return
        rank = torch.arange(self.hits.shape[1], device="cpu")
        hit = (accepted > 0) & (candidate >= 0)
        self.tries += (rank < tried[:, None]).double()
        self.hits += ((rank == candidate[:, None]) & hit[:, None]).double()
        self.tokens += torch.where(hit, accepted, 0).double()
        self.changed()
