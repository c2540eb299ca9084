"""Guesses taken from the text itself, which cost no draft model: prompt lookup's copy of what followed the last
n-gram's previous occurrence (`lookup`) and its record of how often copied tokens held (`CopyRecord`), used by
`PromptLookup` and by `Eagle`'s copy branch, and random prompt tokens to start a window of guesses from
(`prompt_tokens`), used by `Jacobi` and `Lookahead`.
"""

from typing import no_type_check

import torch
from einops import repeat

from mtdecode.drafting import chain_outcome
from mtdecode.session import Session
from mtdecode.tensor_types import Float, Int, Tensor


@no_type_check  # plain ints and lists, per row per step (see `mtdecode.tensor_types`)
def lookup(tokens: list[int], ngram: int, k: int) -> list[int]:
    """Prompt lookup's step 1: up to k tokens that followed the most recent earlier occurrence of the last n tokens,
    for n = ngram, ngram - 1, ..., 1 (the first n with a match wins); [] if none matches."""
    if k < 1 or len(tokens) < 2:
        return []
    last = tokens[-1]
    ends = [i for i, token in enumerate(tokens[:-1]) if token == last]  # where an earlier occurrence can end
    for n in range(min(ngram, len(tokens) - 1), 0, -1):
        tail = tokens[-n:]
        for end in reversed(ends):  # latest first; the tail itself is excluded
            if end >= n - 1 and tokens[end - n + 1 : end + 1] == tail:
                return tokens[end + 1 : end + 1 + k]
    return []


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
        self.known: dict[int, Float[Tensor, "batch width"]] = {}  # `chances` by width, until the record changes

    def chances(self, width: int) -> Float[Tensor, "batch width"]:
        """P(copied token i + 1 accepted | tokens 1..i accepted) for i < `width`, per row: its depth's record and its
        prior, or a shallower position's chance where that is higher (a copy that held so far holds on at least as
        often)."""
        if width not in self.known:
            self.known[width] = self.estimate(width)
        return self.known[width]

    def estimate(self, width: int) -> Float[Tensor, "batch width"]:
        """`chances`, worked out from the record."""
        position = torch.arange(width, device="cpu")
        depth = position.clamp(max=self.DEPTHS - 1)
        prior = (position + 1.0) / (position + 2.0)  # (width,): the rule of succession within the copy
        rate = (self.hits[:, depth] + self.PRIOR * prior) / (self.tries[:, depth] + self.PRIOR)  # (batch, width)
        return rate.cummax(dim=1).values if width else rate

    def add(self, drafted: Int[Tensor, " batch"], accepted: Int[Tensor, " batch"]) -> None:
        """After verification: copied tokens 1..accepted held, token accepted + 1 (if drafted) did not."""
        width = int(drafted.max()) if drafted.numel() else 0
        if width == 0:  # nothing verified: the record stays as it was
            return
        self.known.clear()
        tried, hit = chain_outcome(drafted, accepted, width)  # (batch, drafted)
        depth = repeat(torch.arange(tried.shape[1], device="cpu").clamp(max=self.DEPTHS - 1), "guess -> batch guess",
                       batch=tried.shape[0])  # fmt: skip
        self.tries.scatter_add_(1, depth, tried.double())
        self.hits.scatter_add_(1, depth, hit.double())


def prompt_tokens(s: Session, n: int) -> Int[Tensor, "batch n"]:
    """n tokens drawn at random from each row's prompt, with the row's random stream (a seed repeats them)."""
    lengths = torch.tensor(s.prompt_lengths, device=s.device)  # (batch,)
    width = max(s.prompt_lengths)
    rows = [row[:n] + [0] * (width - n) for row, n in zip(s.tokens, s.prompt_lengths, strict=True)]
    prompts = torch.tensor(rows, device="cpu")
    picks = (s.random.uniform(n).to(s.device)[:, :n] * lengths[:, None]).long()  # (batch, n): uniform over positions
    return prompts.to(s.device).gather(1, torch.minimum(picks, lengths[:, None] - 1))
