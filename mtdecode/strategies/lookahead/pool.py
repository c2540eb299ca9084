"""Lookahead's n-gram pool (Section 3.2): n-grams keyed by their first token, and the candidates it offers."""

from collections import OrderedDict
from collections.abc import Sequence
from typing import no_type_check

import torch

from mtdecode.tensor_types import Int, Tensor
from mtdecode.verification import NONE


@no_type_check  # plain ints and lists, one pool per row, called per row per step (see `mtdecode.tensor_types`)
class NgramPool:
    """n-grams keyed by their first token; at most `per_key` continuations per key, least recently used dropped."""

    def __init__(self, per_key: int) -> None:
        self.per_key = per_key
        self.table: dict[int, OrderedDict[tuple[int, ...], None]] = {}

    def add(self, ngram: Sequence[int]) -> None:
        """Put `ngram` under its first token; an n-gram already there becomes the most recent."""
        if self.per_key == 0:
            return
        continuations = self.table.setdefault(ngram[0], OrderedDict())
        rest = tuple(ngram[1:])
        continuations[rest] = None
        continuations.move_to_end(rest)
        if len(continuations) > self.per_key:
            continuations.popitem(last=False)

    def add_all(self, tokens: Sequence[int], n: int) -> None:
        """Every n-gram of `tokens`, in order."""
        for start in range(len(tokens) - n + 1):
            self.add(tokens[start : start + n])

    def add_columns(self, grid: list[list[int]], new_row: list[int]) -> None:
        """Section 3.2: column j of a full window, then the prediction under it, is an n-gram."""
        for j, prediction in enumerate(new_row):
            self.add([row[j] for row in grid] + [prediction])

    def candidates(self, key: int, length: int) -> list[list[int]]:
        """The continuations of `key` cut to `length` tokens, most recent first, without repeats."""
        if length < 1:
            return []
        cut = (rest[:length] for rest in reversed(self.table.get(key, ())))
        return [list(rest) for rest in dict.fromkeys(cut)]


def pad_candidates(found: list[list[list[int]]], device: torch.device) -> Int[Tensor, "batch candidate length"]:
    """Every row's candidates as one tensor, padded with -1 (no candidate, or a shorter one)."""
    count = max(map(len, found), default=0)
    length = max((len(c) for row in found for c in row), default=0)
    padded = torch.full((len(found), count, length), NONE, dtype=torch.long, device="cpu")
    for b, row in enumerate(found):
        for c, candidate in enumerate(row):
            padded[b, c, : len(candidate)] = torch.tensor(candidate, dtype=torch.long, device="cpu")
    return padded.to(device)
