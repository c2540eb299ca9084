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
"""

from collections.abc import Iterator
from dataclasses import dataclass

import torch

from mtdecode.session import Session, Step
from mtdecode.tensor_types import Int, Tensor
from mtdecode.verification import NONE, verify_chain


@dataclass(frozen=True)
class PromptLookup:
    """Draft by copying what followed the last n-gram's previous occurrence; verify in one forward.

    **Arguments:**

    - `ngram`: the longest n-gram to match (at least 1); shorter ones are tried if it has no match.
    - `num_draft_tokens`: how many tokens to copy per step (at least 1).
    """

    ngram: int = 3
    num_draft_tokens: int = 10

    def __post_init__(self) -> None:
        for name in ("ngram", "num_draft_tokens"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")

    def decode(self, s: Session) -> Iterator[list[Step]]:
        while not s.done:
            k = s.budget(self.num_draft_tokens).tolist()  # the step adds one token of its own
            copied = [lookup(tokens, self.ngram, k_b) for tokens, k_b in zip(s.tokens, k, strict=True)]  # step 1
            steps, _, _ = verify_chain(s, padded(copied, s.device))  # step 2
            yield steps


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
