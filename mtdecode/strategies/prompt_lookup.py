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

How many of the copied tokens to verify: by default as many as pay for their share of the
wider forward (`mtdecode.drafting`: copying costs nothing, but a target forward over 11
tokens costs more than one over 1), judged from how often this row's copied tokens at each
position were accepted so far (`CopyRecord`); at most `max_draft_tokens`. The rule never
looks at p, so the output stays exact. `num_draft_tokens=k` copies up to k instead.
"""

from collections.abc import Iterator
from dataclasses import dataclass

import torch

from mtdecode import tuning
from mtdecode.drafting import DraftCosts, DraftLength, check_counts
from mtdecode.session import Session, Step
from mtdecode.tensor_types import Float, Int, Tensor
from mtdecode.verification import NONE, verify_chain


@dataclass(frozen=True)
class PromptLookup:
    """Draft by copying what followed the last n-gram's previous occurrence; verify in one forward.

    **Arguments:**

    - `ngram`: the longest n-gram to match (at least 1); shorter ones are tried if it has no match.
    - `num_draft_tokens`: copy up to this many tokens per step (at least 1); None (the default): as
      many as pay (`mtdecode.drafting`), at most `max_draft_tokens`.
    - `max_draft_tokens`, `costs`: the most copied tokens when the rule decides, and the `DraftCosts`
      it weighs (None: the target's forward-cost curve measured on this host).
    """

    ngram: int = 3
    num_draft_tokens: int | None = None
    max_draft_tokens: int = 10
    costs: DraftCosts | None = None

    def __post_init__(self) -> None:
        check_counts(self, ("ngram", "num_draft_tokens", "max_draft_tokens"), optional=["num_draft_tokens"])

    def decode(self, s: Session) -> Iterator[list[Step]]:
        length = record = None
        if self.num_draft_tokens is None:
            length = DraftLength(self.costs or tuning.copy_costs(s.target.model), s.batch, s.device)
            record = CopyRecord(s.batch, self.max_draft_tokens)
        while not s.done:
            k = s.budget(self.num_draft_tokens or self.max_draft_tokens).tolist()  # the step adds one token
            copied = [lookup(tokens, self.ngram, k_b) for tokens, k_b in zip(s.tokens, k, strict=True)]  # step 1
            if length is not None:
                copied = worth_verifying(copied, length, record)
            steps, _, accepted = verify_chain(s, padded(copied, s.device))  # step 2
            if length is not None:
                drafted = torch.tensor([len(c) for c in copied])
                length.record(drafted.to(s.device), accepted)
                record.add(drafted, accepted.cpu())
            yield steps


class CopyRecord:
    """How often a copied token at each position of a copy was accepted, given the ones before it were, per row.

    Copies hold or break as a whole (a quote goes on until the answer departs from it), so the chance that
    token i + 1 holds after i held grows with i; this table gives each position its own rate, starting from
    an even chance (one accepted and one rejected token as the prior)."""

    def __init__(self, batch: int, positions: int) -> None:
        self.positions = positions
        self.hits = torch.ones(batch, positions, dtype=torch.float64)
        self.tries = torch.full((batch, positions), 2.0, dtype=torch.float64)

    def confidence(self, i: int) -> Float[Tensor, " batch"]:
        """P(copied token i + 1 accepted | tokens 1..i accepted), per row: the highest rate of positions 1..i + 1,
        since a copy that held so far holds on at least as often (and a deep position tried seldom would
        otherwise keep its even-chance prior)."""
        return (self.hits[:, : i + 1] / self.tries[:, : i + 1]).amax(dim=1)

    def add(self, drafted: Int[Tensor, " batch"], accepted: Int[Tensor, " batch"]) -> None:
        position = torch.arange(self.hits.shape[1])
        self.tries += ((position <= accepted[:, None]) & (position < drafted[:, None])).double()
        self.hits += (position < accepted[:, None]).double()


def worth_verifying(copied: list[list[int]], length: DraftLength, record: CopyRecord) -> list[list[int]]:
    """The prefix of each row's copy that `length`'s rule says pays for its verification; copied token i + 1
    counts with its position's acceptance so far in this row (`CopyRecord`) as its confidence, known before the
    rule decides whether to verify it."""
    available = torch.tensor([len(row) for row in copied])  # (batch,)
    device = length.hits.device
    going, keep = length.start(upcoming=record.confidence(0).to(device)).cpu(), torch.zeros_like(available)
    for i in range(max(map(len, copied), default=0)):  # copied token i + 1 is kept while the rule goes on
        keep += going & (available > i)
        upcoming = record.confidence(i + 1).to(device) if i + 1 < record.positions else None
        going = going & length.more(record.confidence(i).to(device), upcoming).cpu()
    return [row[:n] for row, n in zip(copied, keep.tolist(), strict=True)]


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


def padded(rows: list[list[int]], device: torch.device) -> Int[Tensor, "batch guesses"]:
    """Rows of guesses of different lengths as one tensor, padded with -1 (no guess)."""
    width = max(map(len, rows), default=0)
    return torch.tensor([row + [NONE] * (width - len(row)) for row in rows], dtype=torch.long, device=device).reshape(
        len(rows), width
    )
