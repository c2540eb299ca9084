"""Guesses taken from the text itself, which cost no draft model: prompt lookup's copy of what followed the last
n-gram's previous occurrence (`lookup`) and its record of how often copied tokens held (`CopyRecord`), used by
`PromptLookup` and by `Eagle`'s copy branch, and random prompt tokens to start a window of guesses from
(`prompt_tokens`), used by `Jacobi` and `Lookahead`.
"""

from collections.abc import Sequence
from typing import no_type_check

import torch

from mtdecode.policy.rule import chain_outcome
from mtdecode.session import Session
from mtdecode.tensor_types import Float, Int, Tensor

#: `lookup_matched` counts agreeing tokens up to this many
MATCHED = 16

#: how often a copied token held after a run of 1, 2, ..., 8 or more agreeing tokens, over greedy's answers to the
#: benchmark suite (`python benchmarks/copy_rates.py`, 64 new tokens: 109 of 472 after one token, 295 of 586 after two
#: or three, 2487 of 2694 after seven or more; the four tasks' rates after one token lie between 0.19 and 0.28):
#: prompt lookup's prior (`CopyRecord`). L / (L + 2) lies above it after one and three tokens (0.33 and 0.60).
SUITE_RATES = (0.23, 0.50, 0.50, 0.71, 0.71, 0.84, 0.92, 0.92)


@no_type_check  # plain ints and lists, per row per step (see `mtdecode.tensor_types`)
def lookup(tokens: list[int], ngram: int, k: int) -> list[int]:
    """Prompt lookup's step 1: up to k tokens that followed the most recent earlier occurrence of the last n tokens,
    for n = ngram, ngram - 1, ..., 1 (the first n with a match wins); [] if none matches."""
    return lookup_matched(tokens, ngram, k)[0]


@no_type_check  # plain ints and lists, per row per step
def lookup_matched(tokens: list[int], ngram: int, k: int) -> tuple[list[int], int]:
    """`lookup`'s copy, and how many of the text's last tokens agree with those before the occurrence it copies from:
    its n-gram, and further back while they agree, up to `MATCHED` (0 with no copy)."""
    if k < 1 or len(tokens) < 2:
        return [], 0
    last = tokens[-1]
    ends = [i for i, token in enumerate(tokens[:-1]) if token == last]  # where an earlier occurrence can end
    for n in range(min(ngram, len(tokens) - 1), 0, -1):
        tail = tokens[-n:]
        for end in reversed(ends):  # latest first; the tail itself is excluded
            if end >= n - 1 and tokens[end - n + 1 : end + 1] == tail:
                matched = n
                while matched < min(MATCHED, end + 1) and tokens[end - matched] == tokens[-1 - matched]:
                    matched += 1
                return tokens[end + 1 : end + 1 + k], matched
    return [], 0


@no_type_check  # plain ints and lists, per row per step
def lookup_rows(rows: list[list[int]], ngram: int, room: list[int]) -> tuple[list[list[int]], list[int]]:
    """`lookup_matched` for every row (up to `room[b]` tokens for row b): the rows' copies, and their matched runs."""
    found = [lookup_matched(tokens, ngram, k) for tokens, k in zip(rows, room, strict=True)]
    return [copy for copy, _ in found], [matched for _, matched in found]


class CopyRecord:
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
        # columns: by the agreeing run's length (bookkeeping on the host)
        self.hits = torch.zeros(batch, self.RUNS, dtype=torch.float64, device="cpu")
        self.tries = torch.zeros(batch, self.RUNS, dtype=torch.float64, device="cpu")
        self.known: dict[tuple, Float[Tensor, "batch width"]] = {}  # `chances` by width and runs, until it changes

    def chances(self, width: int, matched: list[int]) -> Float[Tensor, "batch width"]:
        """P(copied token i + 1 accepted | tokens 1..i accepted) for i < `width`, per row, its copy following
        `matched[b]` agreeing tokens: its run's record and its prior, or a shorter run's chance where that is higher
        (a copy that held so far holds on at least as often)."""
        key = (width, tuple(matched))
        if key not in self.known:
            self.known[key] = self.estimate(width, matched)
        return self.known[key]

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
        self.known.clear()
        tried, hit = chain_outcome(drafted, accepted, width)  # (batch, drafted)
        column = (self.run(width, matched) - 1).clamp(max=self.RUNS - 1)
        self.tries.scatter_add_(1, column, tried.double())
        self.hits.scatter_add_(1, column, hit.double())


def prompt_tokens(s: Session, n: int) -> Int[Tensor, "batch n"]:
    """n tokens drawn at random from each row's prompt, with the row's random stream (a seed repeats them)."""
    lengths = torch.tensor(s.prompt_lengths, device=s.device)  # (batch,)
    width = max(s.prompt_lengths)
    rows = [row[:n] + [0] * (width - n) for row, n in zip(s.tokens, s.prompt_lengths, strict=True)]
    prompts = torch.tensor(rows, device="cpu")
    picks = (s.random.uniform(n).to(s.device)[:, :n] * lengths[:, None]).long()  # (batch, n): uniform over positions
    return prompts.to(s.device).gather(1, torch.minimum(picks, lengths[:, None] - 1))
