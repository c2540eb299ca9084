"""Guesses taken from the text itself, which cost no draft model: prompt lookup's copy of what followed the last
n-gram's previous occurrence (`lookup`), used by `PromptLookup` and by `Eagle`'s copy branch, and random prompt
tokens to start a window of guesses from (`prompt_tokens`), used by `Jacobi` and `Lookahead`.
"""

from typing import no_type_check

import torch

from mtdecode.session import Session
from mtdecode.tensor_types import Int, Tensor

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
