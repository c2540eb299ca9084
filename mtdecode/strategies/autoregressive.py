"""Autoregressive decoding: one target forward pass, one token. The baseline every
other strategy is compared with, token for token (greedy) or in distribution (sampling).
"""

from collections.abc import Iterator
from dataclasses import dataclass, field

from mtdecode.session import Session, Step
from mtdecode.tensor_types import Float, Tensor


@dataclass(frozen=True)
class Autoregressive:
    """Feed the newest token, sample the next from p, repeat."""

    max_batch_size: int = field(default=1, init=False)

    def decode(self, s: Session) -> Iterator[Step]:
        logits = prefill(s)
        while True:
            yield s.commit([sample_next(s, logits)])
            if s.done:
                return
            logits = decode_one_token(s)


def prefill(s: Session) -> Float[Tensor, " vocab"]:
    """Run the target over the whole prompt; return the logits for the first new token."""
    logits = s.target.extend(s.tokens, logits_to_keep=1)  # (1, vocab)
    s.target.cache.commit()
    return logits[-1]


def decode_one_token(s: Session) -> Float[Tensor, " vocab"]:
    """Feed the newest committed token; return the logits for the one after it."""
    logits = s.target.extend(s.tokens[-1:])  # (1, vocab)
    s.target.cache.commit()
    return logits[-1]


def sample_next(s: Session, logits: Float[Tensor, " vocab"]) -> int:
    """One token from p = sampler.probs(logits) (the argmax when greedy)."""
    return int(s.sampler.sample(logits, s.generator))
