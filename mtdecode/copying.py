"""Guesses taken from the text itself, which cost no draft model: prompt lookup's copy of what followed the last
n-gram's previous occurrence (`lookup`), used by `PromptLookup` and, as a branch of its tree, by `Eagle` (`Copy`,
`find_copies`), and random prompt tokens to start a window of guesses from (`prompt_tokens`), used by `Jacobi` and
`Lookahead`."""

from dataclasses import dataclass
from typing import no_type_check

import torch

from mtdecode.policy.records import CopyRecord
from mtdecode.policy.rule import expected_tokens
from mtdecode.session import Session
from mtdecode.tensor_types import Bool, Float, Int, Tensor

#: `lookup_matched` counts agreeing tokens up to this many
MATCHED = 16

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


def prompt_tokens(s: Session, n: int) -> Int[Tensor, "batch n"]:
    """n tokens drawn at random from each row's prompt, with the row's random stream (a seed repeats them)."""
    lengths = torch.tensor(s.prompt_lengths, device=s.device)  # (batch,)
    width = max(s.prompt_lengths)
    rows = [row[:n] + [0] * (width - n) for row, n in zip(s.tokens, s.prompt_lengths, strict=True)]
    prompts = torch.tensor(rows, device="cpu")
    picks = (s.random.uniform(n).to(s.device)[:, :n] * lengths[:, None]).long()  # (batch, n): uniform over positions
    return prompts.to(s.device).gather(1, torch.minimum(picks, lengths[:, None] - 1))


@dataclass(frozen=True)
class Copy:
    """Each row's copy (step 1): `tokens[b]`, the tokens prompt lookup copied for row b (maybe none); `holds`,
    the chance that the copy's tokens 1..i all hold, the product of the row's `CopyRecord` chances for them (-1 past
    the row's copy); and `matched[b]`, how many tokens before the copy agreed with those before its source
    (`lookup_matched`), by which the record reads it."""

    tokens: list[list[int]]
    holds: Float[Tensor, "batch copy"]
    matched: list[int]

    def follows(self, tokens: Int[Tensor, "batch node"], depth: int) -> Bool[Tensor, "batch node"]:
        """Which of the nodes at `depth` carry their row's copied token at that depth."""
        if depth > self.holds.shape[1]:
            return torch.zeros_like(tokens, dtype=torch.bool)
        column = [row[depth - 1] if len(row) >= depth else -1 for row in self.tokens]
        return tokens == torch.tensor(column, device=tokens.device)[:, None]

    def holds_at(self, depth: int) -> Float[Tensor, "batch 1"]:
        """The chance that each row's copy holds to `depth` (-1 past its end)."""
        if depth > self.holds.shape[1]:
            return self.holds.new_full((self.holds.shape[0], 1), -1.0)
        return self.holds[:, depth - 1 : depth]


def find_copies(s: Session, most: int, ngram: int, record: CopyRecord) -> Copy:
    """Step 1, the copy: up to `most` tokens per row that followed the latest earlier occurrence of its last n-gram
    (`mtdecode.copying.lookup_rows`, as prompt lookup copies; no more than the row's budget leaves room for), with
    the chances that they hold by the row's record after the run that matched. The copy reads the committed text
    only, never p."""
    room = s.budget(most).tolist()
    tokens, matched = lookup_rows(s.tokens, ngram, room)
    longest = max(map(len, tokens), default=0)
    holds = record.chances(longest, matched).cumprod(1).to(s.device)  # (batch, copy)
    short = (
        torch.arange(longest, device=s.device) >= torch.tensor([len(row) for row in tokens], device=s.device)[:, None]
    )
    return Copy(tokens, holds.masked_fill(short, -1.0), matched)


def copy_alone(
    copy: Copy | None, active: Bool[Tensor, " batch"]
) -> tuple[Float[Tensor, "batch options"] | None, Int[Tensor, " batch"] | None]:
    """What each row's copy alone would bring, for the plan's rests: E(0..longest) if row b verified its first k
    copied tokens, and how many it has (0 for a finished row); (None, None) without a copy."""
    if copy is None:
        return None, None
    expected = expected_tokens(copy.holds.clamp(min=0))  # holds: the copy's chance of holding to each token
    available = torch.tensor([len(row) for row in copy.tokens], device=active.device)
    return expected, torch.where(active, available, 0)
