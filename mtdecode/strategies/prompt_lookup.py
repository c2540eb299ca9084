"""Prompt-lookup decoding: the text so far is the draft model.

Saxena (2023), "Prompt lookup decoding"; transformers' `prompt_lookup_num_tokens`. When an
answer quotes its prompt (code editing, summaries, question answering over a document),
the tokens after the latest n-gram usually continue as they did the last time that
n-gram appeared. Per step, with x0 the newest committed token:

1. lookup: find the most recent earlier occurrence of the last `ngram` tokens in the prompt
   and the text so far (falling back to shorter n-grams down to 1) and copy the up to
   `num_draft_tokens` tokens that followed it;
2. verify: one target forward over [x0, copied tokens]; keep the longest accepted prefix
   and one token of the target's own (`mtdecode.verification`: exact greedy at
   temperature 0, exactly p when sampling).

With no match the step is a plain decoding step.

How many of the copied tokens to verify: by default the number with the best expected tokens
per unit of cost (`DraftLength.plan` in `mtdecode.drafting`: copying costs nothing, but a target
forward over 11 tokens costs more than one over 1, by the curve measured on this host), judged
from how often this row's copied tokens at each position were accepted so far (`CopyRecord`);
at most `max_draft_tokens`. The rule never looks at p, so the output stays exact.
`num_draft_tokens=k` copies up to k instead. `result.stats.choices` says how many copied tokens
the rule verified per step and how many row steps left a copy unverified because it did not pay
(`copy_choice`); when every copy found was left so, the run decoded greedily and `generate` warns
(`GreedyFallbackWarning`).
"""

from collections.abc import Iterator
from dataclasses import dataclass

import torch

from mtdecode import tuning
from mtdecode.drafting import BatchCosts, DraftCosts, DraftLength, chain_outcome, check_counts, drafting_choice
from mtdecode.session import Choice, Session, Step
from mtdecode.tensor_types import Bool, Float, Int, Tensor
from mtdecode.verification import NONE, verify_chain


@dataclass(frozen=True)
class PromptLookup:
    """Draft by copying what followed the last n-gram's previous occurrence; verify in one forward.

    **Arguments:**

    - `ngram`: the longest n-gram to match (at least 1); shorter ones are tried if it has no match.
    - `num_draft_tokens`: copy up to this many tokens per step (at least 1); None (the default): as
      many as pay (`mtdecode.drafting`), at most `max_draft_tokens`.
    - `max_draft_tokens`, `costs`: the most copied tokens when the rule decides, and the costs it
      weighs (`BatchCosts` or one row's `DraftCosts`, as in `Speculative`; None: the batch's forward-cost
      curve measured on this host).
    """

    ngram: int = 3
    num_draft_tokens: int | None = None
    max_draft_tokens: int = 10
    costs: DraftCosts | BatchCosts | None = None

    def __post_init__(self) -> None:
        check_counts(self, ("ngram", "num_draft_tokens", "max_draft_tokens"), optional=["num_draft_tokens"])

    def decode(self, s: Session) -> Iterator[list[Step]]:
        length = record = None
        if self.num_draft_tokens is None:
            costs = self.costs or tuning.batch_draft_costs(s.target.model, None, s.batch)
            length = DraftLength(costs, s.batch, s.device, remaining=lambda: s.remaining)
            record = CopyRecord(s.batch)
            s.record_choice(lambda: copy_choice("PromptLookup", length, s.steps))  # for `Stats.choices`
        while not s.done:
            k = s.budget(self.num_draft_tokens or self.max_draft_tokens).tolist()  # the step adds one token
            copied = [lookup(tokens, self.ngram, k_b) for tokens, k_b in zip(s.tokens, k, strict=True)]  # step 1
            if length is not None:
                copied = worth_verifying(copied, length, record, s.active)
            steps, _, accepted = verify_chain(s, padded(copied, s.device))  # step 2
            if length is not None:
                drafted = torch.tensor([len(c) for c in copied], device="cpu")
                length.record(drafted.to(s.device), accepted)
                record.add(drafted, accepted.cpu())
            yield steps


class CopyRecord:
    """How often this row's copied tokens were accepted, given the ones before them were: a copy's first token, its
    second, and its later tokens together.

    Copies hold or break as a whole (a quote goes on until the answer departs from it): a copy's first token is
    the likeliest to fail, its second less so once the first held, and a later one seldom once a few held, about
    alike at every depth. So the first and second tokens have their own rates and the later ones share one, which
    learns fast and does not leave deep positions that were seldom tried at their prior.

    Before a row has seen any copy, the copy itself is the evidence: token i + 1 of a copy whose i tokens held
    holds with chance (i + 1) / (i + 2), Laplace's rule of succession (1/2 for the first token, 2/3 for the
    second, 10/11 for the tenth). That is each position's prior, worth two tokens of the row's record."""

    #: the first `DEPTHS - 1` positions have a rate each; the later ones share the last
    DEPTHS = 3
    #: tokens of record the prior is worth
    PRIOR = 2.0

    def __init__(self, batch: int) -> None:
        # columns: first, second, later tokens (bookkeeping on the host)
        self.hits = torch.zeros(batch, self.DEPTHS, dtype=torch.float64, device="cpu")
        self.tries = torch.zeros(batch, self.DEPTHS, dtype=torch.float64, device="cpu")

    def chances(self, width: int) -> Float[Tensor, "batch width"]:
        """P(copied token i + 1 accepted | tokens 1..i accepted) for i < `width`, per row: its depth's record and its
        prior, or a shallower position's chance where that is higher (a copy that held so far holds on at least as
        often)."""
        position = torch.arange(width, device="cpu")
        depth = position.clamp(max=self.DEPTHS - 1)
        prior = (position + 1.0) / (position + 2.0)  # (width,): the rule of succession within the copy
        rate = (self.hits[:, depth] + self.PRIOR * prior) / (self.tries[:, depth] + self.PRIOR)  # (batch, width)
        return rate.cummax(dim=1).values if width else rate

    def add(self, drafted: Int[Tensor, " batch"], accepted: Int[Tensor, " batch"]) -> None:
        """After verification: copied tokens 1..accepted held, token accepted + 1 (if drafted) did not."""
        tried, hit = chain_outcome(drafted, accepted, int(drafted.max()) if drafted.numel() else 0)  # (batch, drafted)
        depth = torch.arange(tried.shape[1], device="cpu").clamp(max=self.DEPTHS - 1).expand_as(tried)
        self.tries.scatter_add_(1, depth, tried.double())
        self.hits.scatter_add_(1, depth, hit.double())


def worth_verifying(
    copied: list[list[int]], length: DraftLength, record: CopyRecord, rows: Bool[Tensor, " batch"]
) -> list[list[int]]:
    """The prefix of each row's copy that `length` plans to verify (`DraftLength.plan`), each copied token counting
    with its acceptance so far in this row (`CopyRecord`), known before anything is verified; `rows`: those still
    decoding."""
    available = torch.tensor([len(row) for row in copied], device="cpu")  # (batch,)
    chances = record.chances(max(map(len, copied), default=0))  # (batch, longest copy)
    keep = length.plan(chances.to(length.hits.device), available, rows).tolist()
    return [row[:n] for row, n in zip(copied, keep, strict=True)]


def copy_choice(name: str, length: DraftLength, steps: list[Step]) -> Choice:
    """What the rule chose over the run (`Stats.choices`), with its break-even: verifying a copy's first token pays
    only while its chance of acceptance exceeds r (t(2) - t(1)), r the row's rate so far (`DraftLength.plan`)."""
    added = length.costs.t(2) - length.costs.t(1)
    pays = (
        f"no prefix of the copy was expected to pay for its tokens in the forward (one more verified token costs "
        f"{added:.2f} of a 1-token forward, weighed at the row's tokens per unit of cost so far)"
    )
    fix = f"{name}(num_draft_tokens=k) verifies up to k copied tokens every step"
    return drafting_choice(name, length, steps, guesses="copied tokens", pays=pays, fix=fix)


def lookup(tokens: list[int], ngram: int, k: int) -> list[int]:
    """Step 1: up to k tokens that followed the most recent earlier occurrence of the last n tokens,
    for n = ngram, ngram - 1, ..., 1 (the first n with a match wins); [] if none matches."""
    if k < 1:
        return []
    for n in range(min(ngram, len(tokens) - 1), 0, -1):
        tail = tokens[-n:]
        for start in range(len(tokens) - n - 1, -1, -1):  # latest first; the tail itself is excluded
            if tokens[start : start + n] == tail:
                return tokens[start + n : start + n + k]
    return []


def padded(rows: list[list[int]], device: torch.device, fill: int = NONE) -> Int[Tensor, "batch guesses"]:
    """Rows of guesses of different lengths as one tensor, padded with `fill` (by default -1, no guess)."""
    width = max(map(len, rows), default=0)
    return torch.tensor([row + [fill] * (width - len(row)) for row in rows], dtype=torch.long, device=device).reshape(
        len(rows), width
    )
