"""The one Sampler every strategy shares.

`Sampler.probs(logits)` defines "the distribution p" of a model for the whole library:
divide the logits by the temperature, keep the `top_k` largest, then keep the smallest
set of most probable tokens whose mass reaches `top_p`, and renormalise. This is the
order transformers applies its temperature, top-k and top-p warpers in.
`temperature=0` is greedy: p is the one-hot distribution on the argmax.
"""

import secrets
from dataclasses import dataclass

import torch

from mtdecode.tensor_types import Float, Int, Tensor


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

    def sample(self, logits: Float[Tensor, "*batch vocab"], generator: torch.Generator) -> Int[Tensor, "*batch"]:
        """Draw one token per row from `probs(logits)` (argmax when greedy)."""
        if self.greedy:
            return logits.argmax(-1)
        return draw(self.probs(logits), generator)


def fresh_seed() -> int:
    """A seed from the operating system's entropy, for `generate(seed=None)`.

    The test suite replaces it with a constant (tests/conftest.py), so no test can depend on
    unseeded randomness.
    """
    return secrets.randbits(62)


def draw(probs: Float[Tensor, "*batch vocab"], generator: torch.Generator) -> Int[Tensor, "*batch"]:
    """One token per row from the categorical distributions `probs` (rows must sum to 1)."""
    flat = probs.reshape(-1, probs.shape[-1])  # (rows, vocab)
    return torch.multinomial(flat, 1, generator=generator).reshape(probs.shape[:-1])


def _nucleus(probs: Float[Tensor, "*batch vocab"], top_p: float) -> Float[Tensor, "*batch vocab"]:
    """Keep the smallest prefix of tokens, most likely first, whose mass reaches `top_p`."""
    sorted_probs, order = torch.sort(probs, dim=-1, descending=True, stable=True)
    mass_before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs  # mass of strictly earlier tokens
    keep_sorted = mass_before < top_p  # the most likely token is always kept
    keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
    kept = probs * keep
    return kept / kept.sum(-1, keepdim=True)
