"""Autoregressive decoding: one target forward pass, one token per row. The baseline every
other strategy is compared with, token for token (greedy) or in distribution (sampling).
"""

from collections.abc import Iterator
from dataclasses import dataclass

from mtdecode.session import Session, Step
from mtdecode.tensor_types import Float, Int, Tensor


@dataclass(frozen=True)
class Autoregressive:
    """Feed the newest token, sample the next from p, repeat."""

    def decode(self, s: Session) -> Iterator[list[Step]]:
        logits = prefill(s)
        while True:
            yield s.commit(sample_next(s, logits)[:, None], counts=1)
            if s.done:
                return
            logits = decode_one_token(s)


def prefill(s: Session) -> Float[Tensor, "batch vocab"]:
    """Run the target over every row's whole prompt; return the logits for each row's first new token."""
    logits = s.target.extend(s.unread(s.target), logits_to_keep=1)  # (batch, 1, vocab)
    s.target.cache.commit()
    return logits[:, -1]


def decode_one_token(s: Session) -> Float[Tensor, "batch vocab"]:
    """Feed each row's newest committed token; return the logits for the one after it."""
    logits = s.target.extend(s.last_tokens[:, None])  # (batch, 1, vocab)
    s.target.cache.commit()
    return logits[:, -1]


def sample_next(s: Session, logits: Float[Tensor, "batch vocab"]) -> Int[Tensor, " batch"]:
    """One token per row from p = sampler.probs(logits) (the argmax when greedy); finished rows draw nothing."""
    return s.sampler.sample(logits, s.random, rows=s.active)
