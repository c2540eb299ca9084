"""Plain decoding steps, one target forward and one token per row: the autoregressive baseline's loop and the
pieces that every strategy's plain steps share (the prefill, a draw from p, feeding the newest token), and the
verifying forward over the unread tokens and a step's guesses (`extend_with`).

A strategy that decides not to guess in a step (or at all) takes these steps, so that it decodes at greedy cost
with the same draws as `mtdecode.strategies.Autoregressive`; they live here, not in a strategy's file, because
no strategy imports another.
"""

from collections.abc import Iterator
from dataclasses import dataclass

from mtdecode.session import Session, Step
from mtdecode.tensor_types import Float, Int, Tensor


@dataclass(frozen=True)
class Autoregressive:
    """Feed the newest token, sample the next from p, repeat (`decode_plainly`): the baseline strategy, which also
    times a strategy's plain steps (`mtdecode.costs.probes`)."""

    def decode(self, s: Session) -> Iterator[list[Step]]:
        return decode_plainly(s)


def decode_plainly(s: Session) -> Iterator[list[Step]]:
    """Feed the newest token, draw the next from p, repeat: `Autoregressive.decode`, and the steps of a strategy
    that decodes a whole call greedily (`Lookahead` where no setting pays)."""
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


def extend_with(s: Session, guesses: Int[Tensor, "batch guesses"]) -> Float[Tensor, "batch guesses_plus_1 vocab"]:
    """The verifying forward: one target forward over each row's unread committed tokens (x0 last; the whole prompt
    on the first step, so the prefill and the first verification share it) and its guesses (-1 pads a row with
    fewer). Returns the logits at x0 and after each guess."""
    fed = [row + guess for row, guess in zip(s.unread(s.target), guesses.clamp(min=0).tolist(), strict=True)]
    return s.target.extend(fed, logits_to_keep=guesses.shape[1] + 1)
