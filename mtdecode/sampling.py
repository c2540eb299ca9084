"""The one Sampler every strategy shares, and the random streams of a batch.

`Sampler.probs(logits)` defines "the distribution p" of a model for the whole library:
divide the logits by the temperature, keep the `top_k` largest, then keep the smallest
set of most probable tokens whose mass reaches `top_p`, and renormalise. This is the
order transformers applies its temperature, top-k and top-p warpers in.
`temperature=0` is greedy: p is the one-hot distribution on the argmax.

`RowRandom` gives every row of a batch a random stream of its own. Row b's i-th number
depends only on its seed and on i, never on the other rows or on how many numbers they
drew, so a row of a batch decodes exactly as the same prompt decoded alone with that
row's seed, and rows never influence each other.
"""

import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import no_type_check

import torch

from mtdecode.tensor_types import Bool, Float, Int, Tensor


@dataclass(frozen=True)
class Sampler:
    """Temperature, top-k and top-p, applied the same way to every model's logits.

    **Arguments:**

    - `temperature`: `0` for greedy decoding, otherwise a positive number.
    - `top_k`: keep only the `top_k` most likely tokens (ties with the k-th are kept); `None` keeps all.
    - `top_p`: keep the smallest set of most likely tokens whose probability reaches `top_p`,
      a number in `(0, 1]`; `None` keeps all.
    """

    temperature: float = 0.0
    top_k: int | None = None
    top_p: float | None = None

    def __post_init__(self) -> None:
        if not self.temperature >= 0:  # also catches NaN
            raise ValueError(f"temperature must be >= 0 (0 = greedy), got {self.temperature}")
        if self.top_k is not None and (isinstance(self.top_k, bool) or self.top_k < 1):
            raise ValueError(f"top_k must be a positive integer or None, got {self.top_k}")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must lie in (0, 1] or be None, got {self.top_p}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def probs(self, logits: Float[Tensor, "*batch vocab"]) -> Float[Tensor, "*batch vocab"]:
        """The distribution this Sampler draws from, given a model's logits."""
        if self.greedy:
            return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).to(logits.dtype)
        scores = logits / self.temperature
        if self.top_k is not None and self.top_k < scores.shape[-1]:
            kth_largest = torch.topk(scores, self.top_k, dim=-1).values[..., -1:]  # (*batch, 1)
            scores = scores.masked_fill(scores < kth_largest, -torch.inf)
        probs = torch.softmax(scores, dim=-1)
        if self.top_p is not None and self.top_p < 1:
            probs = _nucleus(probs, self.top_p)
        return probs

    def sample(
        self, logits: Float[Tensor, "batch vocab"], random: "RowRandom", rows: Bool[Tensor, " batch"] | None = None
    ) -> Int[Tensor, " batch"]:
        """One token per row from `probs(logits)` (the argmax when greedy); only `rows` draw."""
        if self.greedy:
            return logits.argmax(-1)
        return draw(self.probs(logits), random, rows)


def fresh_seed() -> int:
    """A seed from the operating system's entropy, for `generate(seed=None)`.

    The test suite replaces it with a constant (tests/conftest.py), so no test can depend on
    unseeded randomness.
    """
    return secrets.randbits(62)


# SplitMix64 (Steele, Lea and Flood 2014): state s, i-th output mix(s + i * GOLDEN).
_GOLDEN = 0x9E3779B97F4A7C15
_MIX1, _MIX2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB


@no_type_check  # a plain int, several per draw (see `mtdecode.tensor_types`)
def _signed(value: int) -> int:
    """A 64-bit pattern as torch's int64 holds it."""
    value &= (1 << 64) - 1
    return value - (1 << 64) if value >= 1 << 63 else value


def _shift_right(x: Int[Tensor, "*shape"], bits: int) -> Int[Tensor, "*shape"]:
    """Logical shift of int64 bit patterns (torch shifts signed integers arithmetically)."""
    return (x >> bits) & ((1 << (64 - bits)) - 1)


def _mix(z: Int[Tensor, "*shape"]) -> Int[Tensor, "*shape"]:
    """SplitMix64's output function; int64 products wrap modulo 2^64, as the algorithm needs."""
    z = (z ^ _shift_right(z, 30)) * _signed(_MIX1)
    z = (z ^ _shift_right(z, 27)) * _signed(_MIX2)
    return z ^ _shift_right(z, 31)


class RowRandom:
    """One random stream per row of a batch: row b's i-th uniform is a fixed function of (seed_b, i).

    Counter-based (SplitMix64): nothing is shared between rows, so which rows share a batch and
    how many numbers the others draw never change a row's numbers. Row b of a batch seeded `s`
    draws exactly what a batch of one seeded `s + b` draws.

    **Arguments:**

    - `seeds`: one integer in `[0, 2^62)` per row.
    - `device`: where the numbers are made (the model's device).
    """

    def __init__(self, seeds: Sequence[int], device: torch.device | str = "cpu") -> None:
        self.seeds = list(seeds)
        # each row's stream state: SplitMix64 run once on its seed, so neighbouring seeds start far apart
        states = torch.tensor([_signed(s) for s in self.seeds], dtype=torch.long, device=device)
        self.keys = _mix(states + _signed(_GOLDEN))  # (batch,)
        self.drawn = torch.zeros(len(self.seeds), dtype=torch.long, device=device)  # (batch,) numbers used

    @property
    def batch(self) -> int:
        return len(self.seeds)

    def uniform(self, counts: Int[Tensor, " batch"] | int = 1) -> Float[Tensor, "batch draws"]:
        """`counts[b]` fresh uniforms in [0, 1) for row b, in columns 0.. of its row (float64).

        A row that asks for fewer than the widest row (or for none) gets numbers it must not use
        in the rest of its columns: they are the next ones of its stream, not yet consumed.
        """
        counts = torch.as_tensor(counts, dtype=torch.long, device=self.keys.device).expand(self.batch)
        width = max(int(counts.max()) if self.batch else 0, 1)  # at least one column, so [:, 0] always exists
        index = self.drawn[:, None] + torch.arange(1, width + 1, device=self.keys.device)  # (batch, draws)
        bits = _mix(self.keys[:, None] + index * _signed(_GOLDEN))
        self.drawn = self.drawn + counts
        return _shift_right(bits, 11).double() / 2.0**53  # the top 53 bits: a float64 in [0, 1)

    def skip(self, counts: Int[Tensor, " batch"] | int = 1) -> None:
        """Use up `counts[b]` numbers of row b's stream without making them: what `uniform(counts)` leaves
        behind, for a rule that draws numbers it then ignores (the greedy shortcuts)."""
        self.drawn = self.drawn + torch.as_tensor(counts, dtype=torch.long, device=self.keys.device)


def draw(
    probs: Float[Tensor, "batch vocab"], random: RowRandom, rows: Bool[Tensor, " batch"] | None = None
) -> Int[Tensor, " batch"]:
    """One token per row from the categorical distributions `probs` (rows need not be normalised).

    Inverse-CDF sampling with one uniform u per row: the token whose cumulative mass first
    exceeds u times the row's total; a token of probability 0 is never chosen. Only the rows in
    `rows` (default: all) use up a number of their stream; the others get a token they must ignore.
    """
    counts = 1 if rows is None else rows.long()
    u = random.uniform(counts)[:, 0].to(probs.device)  # (batch,)
    cdf = probs.double().cumsum(-1)  # (batch, vocab), float64 whatever the model's dtype
    token = torch.searchsorted(cdf, (u * cdf[:, -1])[:, None], right=True)[:, 0]
    last_possible = probs.shape[-1] - 1 - (probs.flip(-1) > 0).long().argmax(-1)  # u * total may round up
    return torch.minimum(token, last_possible)


def _nucleus(probs: Float[Tensor, "*batch vocab"], top_p: float) -> Float[Tensor, "*batch vocab"]:
    """Keep the smallest prefix of tokens, most likely first, whose mass reaches `top_p`."""
    sorted_probs, order = torch.sort(probs, dim=-1, descending=True, stable=True)
    mass_before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs  # mass of strictly earlier tokens
    keep_sorted = mass_before < top_p  # the most likely token is always kept
    keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
    kept = probs * keep
    return kept / kept.sum(-1, keepdim=True)
