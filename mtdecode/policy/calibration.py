"""How far to trust the draft's confidence: per row, how often its guesses of each confidence were accepted.

A draft's probability of the token it drew is its confidence in the guess; how often guesses of that confidence are
accepted is something else, learnt as the run verifies them (`Calibration`). In a batch the rows share the draft
and the target, so they learn together, each row's chances scaled by how its own guesses fared against the pool's
(`PooledCalibration`).
"""

import torch
from einops import pack, reduce, repeat, unpack

from mtdecode.strategy import check_chance
from mtdecode.tensor_types import Bool, Float, Int, Tensor

#: confidence bins of the per-row calibration (equal widths over [0, 1])
BINS = 10
#: pseudo-observations per bin at the draft's own confidence, before the row has seen any; and guesses at the prior
#: acceptance in the row's acceptance
PRIOR = 2.0


class Calibration:
    """Each row's record of verified guesses by confidence, and what it says of the next guess.

    **Arguments:**

    - `batch`: rows; `device`: where the record lives.
    - `prior`: the chance that a first guess is accepted before any was verified, worth `PRIOR` guesses of the
      rows' acceptance.
    """

    def __init__(self, batch: int, device: torch.device, prior: float = 0.5) -> None:
        check_chance("acceptance", prior)
        self.prior = prior
        self.hits = torch.zeros(batch, BINS, dtype=torch.float64, device=device)  # accepted guesses per bin
        self.tries = torch.zeros(batch, BINS, dtype=torch.float64, device=device)  # verified guesses per bin
        self.judged = torch.zeros(batch, dtype=torch.float64, device=device)  # verified guesses' confidences, summed
        # the most guesses of a chain the row verified: the places its scale has seen
        self.reached = torch.zeros(batch, dtype=torch.long, device=device)
        # what the record gives, kept until `calibrate` changes it (most steps verify nothing), by name
        self.known: dict[str, Tensor] = {}

    def calibrated(
        self, confidence: Float[Tensor, "batch ..."], place: int | Int[Tensor, "..."] | None = None
    ) -> Float[Tensor, "batch ..."]:
        """P(accepted | confidence), from the row's history in the confidence's bin, starting at the confidence
        scaled by how far the row's guesses of every bin were accepted more or less often than their confidence said.
        The scale learns from every verified guess, a bin only from its own, so an overconfident draft is distrusted
        in every bin after a few rejections.

        `place`: each guess's place in its chain (from 0), where the guesses form one. A scale above 1 reaches no
        place deeper than the row's verified chains reached: guesses that held more often than their confidence said
        at the first place say nothing of the tenth, while distrust, a scale below 1, holds at every place."""
        flat, shape = pack([confidence], "batch *")  # (batch, guesses): any axes after the batch's as one
        columns = bin_of(flat)
        hits, tries = self.record_of_rows()
        ratio = (hits.sum(1) + 1) / (self.judged_of_rows() + 1)  # (batch,): accepted over expected, a sure hit as prior
        scale = ratio[:, None]
        if place is not None:
            unseen = torch.as_tensor(place, device=flat.device).reshape(-1) >= self.reached_of_rows()[:, None]
            scale = torch.where(unseen, scale.clamp(max=1), scale)
        prior = (flat * scale).clamp(max=1)
        chance = (hits.gather(1, columns) + PRIOR * prior) / (tries.gather(1, columns) + PRIOR)
        return unpack(self.own(chance, ratio), shape, "batch *")[0]

    def own(
        self, chance: Float[Tensor, "batch guesses"], ratio: Float[Tensor, " batch"]
    ) -> Float[Tensor, "batch guesses"]:
        """The row's chances as calibrated (a pooled record scales them by the row's own)."""
        return chance

    def record_of_rows(self) -> tuple[Float[Tensor, "batch bins"], Float[Tensor, "batch bins"]]:
        """Accepted and verified guesses per confidence bin, per row."""
        return self.hits, self.tries

    def judged_of_rows(self) -> Float[Tensor, " batch"]:
        """The verified guesses' confidences, summed, per row."""
        return self.judged

    def reached_of_rows(self) -> Int[Tensor, " batch"]:
        """The most guesses of a chain each row verified."""
        return self.reached

    def acceptance(self) -> Float[Tensor, " batch"]:
        """The row's acceptance rate so far (`PRIOR` guesses at the prior)."""
        if "acceptance" not in self.known:
            hits, tries = self.record_of_rows()
            self.known["acceptance"] = (hits.sum(1) + PRIOR * self.prior) / (tries.sum(1) + PRIOR)
        return self.known["acceptance"]

    def own_acceptance(self) -> Float[Tensor, " batch"]:
        """The chance that a row's next guess is accepted, where the draft's confidence is not weighed (a)."""
        return self.acceptance()

    def optimistic(self) -> Float[Tensor, " batch"]:
        """The rows' acceptance plus one standard error, at most 1: what a try hopes for."""
        if "optimistic" not in self.known:
            a = self.acceptance()
            tries = self.record_of_rows()[1].sum(1)
            self.known["optimistic"] = (a + (a * (1 - a) / (tries + PRIOR)).sqrt()).clamp(max=1)
        return self.known["optimistic"]

    def reach(self, drafted: Int[Tensor, " batch"]) -> None:
        """A chain of `drafted[b]` guesses was verified in row b."""
        self.reached = torch.maximum(self.reached, drafted.to(self.reached))

    def calibrate(
        self,
        confidence: Float[Tensor, "batch guesses"],
        tried: Bool[Tensor, "batch guesses"],
        hit: Bool[Tensor, "batch guesses"],
    ) -> None:
        """Add verified guesses: those `tried` at their `confidence`, and which of them were accepted (`hit`)."""
        bins = bin_of(confidence)
        self.tries.scatter_add_(1, bins, tried.double())
        self.hits.scatter_add_(1, bins, (hit & tried).double())
        self.judged += torch.where(tried, confidence.double().clamp(0, 1), 0.0).sum(1)
        self.known.clear()


class PooledCalibration(Calibration):
    """The rows' records pooled (they share the draft and the target, so the batch learns how far to trust the
    draft's confidence as many times faster as it has rows), each row's chance then scaled by how far its own
    verified guesses were accepted more or less often than the pool's at their confidences (the pool's ratio worth
    `PRIOR` guesses' confidences): rows of one batch can differ (a quote, a sum), and a batch's end is set by its
    slowest rows, whose guesses fail most, so the pooled chance alone overrates the rows that decide."""

    def own(
        self, chance: Float[Tensor, "batch guesses"], ratio: Float[Tensor, " batch"]
    ) -> Float[Tensor, "batch guesses"]:
        own = (self.hits.sum(1) + PRIOR * ratio) / (self.judged + PRIOR)
        return (chance * (own / ratio)[:, None]).clamp(max=1)

    def record_of_rows(self) -> tuple[Float[Tensor, "batch bins"], Float[Tensor, "batch bins"]]:
        return pooled(self.hits), pooled(self.tries)

    def judged_of_rows(self) -> Float[Tensor, " batch"]:
        return self.judged.sum().expand_as(self.judged)

    def reached_of_rows(self) -> Int[Tensor, " batch"]:
        return self.reached.max().expand_as(self.reached)

    def own_acceptance(self) -> Float[Tensor, " batch"]:
        """The row's own acceptance so far with the rows' pooled rate as its prior, worth `PRIOR` guesses."""
        if "own" not in self.known:
            self.known["own"] = (self.hits.sum(1) + PRIOR * self.acceptance()) / (self.tries.sum(1) + PRIOR)
        return self.known["own"]


def pooled(record: Float[Tensor, "batch column"]) -> Float[Tensor, "batch column"]:
    """Every row's record summed over the rows, given to every row (a batch's shared records)."""
    return repeat(reduce(record, "batch column -> column", "sum"), "column -> batch column", batch=record.shape[0])


def bin_of(confidence: Float[Tensor, "*shape"]) -> Int[Tensor, "*shape"]:
    """The calibration bin of each confidence in [0, 1]."""
    return (confidence * BINS).long().clamp(0, BINS - 1)
