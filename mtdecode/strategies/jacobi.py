"""Jacobi decoding: guess a whole block, let the model correct every guess at once.

Santilli et al. (2023) and Fu et al. (2024, Section 2) view greedy decoding of m tokens as
a system of m equations y_i = argmax p(. | prompt, y_1..y_{i-1}) and solve it by fixed-point
(Jacobi) iteration: start from any guess, recompute every y_i from the current guesses in
one forward pass, repeat. Per step, with x0 the newest committed token:

1. feed [x0, g_1..g_b] left to right: one forward gives a prediction after x0 and after each g_i;
2. the prediction after x0 is right by construction; g_i is right if it equals the prediction
   before it, so keep the longest prefix of guesses that agree, then the next prediction
   (`mtdecode.verification`: at temperature 0 this is exactly greedy);
3. the predictions made after the first wrong guess become the next step's guesses
   (the Jacobi update), padded back to `block` tokens.

Every step emits at least one token, so it is never slower in forward passes than greedy;
it is faster when several guesses converge at once. Lookahead decoding
(`mtdecode.strategies.lookahead`) keeps this update and adds an n-gram pool.
"""

from collections.abc import Iterator
from dataclasses import dataclass, field

import torch

from mtdecode.session import Session, Step
from mtdecode.tensor_types import Float, Tensor
from mtdecode.verification import verify_chain


@dataclass(frozen=True)
class Jacobi:
    """Plain Jacobi decoding with a block of `block` guessed tokens (at least 1).

    Exact at temperature 0; with sampling, the guesses are verified by the one-hot rule of
    `mtdecode.verification`, which keeps the target distribution.
    """

    block: int = 8
    max_batch_size: int = field(default=1, init=False)

    def __post_init__(self) -> None:
        if isinstance(self.block, bool) or not isinstance(self.block, int) or self.block < 1:
            raise ValueError(f"block must be an integer >= 1, got {self.block!r}")

    def decode(self, s: Session) -> Iterator[Step]:
        guesses = prompt_tokens(s, self.block)  # any start converges; prompt tokens are a cheap one
        while not s.done:
            k = min(self.block, s.remaining - 1)  # the step adds one token of its own
            step, logits = verify_chain(s, guesses[:k])  # steps 1-2
            yield step
            guesses = jacobi_update(logits, step.accepted, self.block)  # step 3


def jacobi_update(logits: Float[Tensor, "rows vocab"], accepted: int, block: int) -> list[int]:
    """Step 3: the predictions after the first rejected guess, padded to `block` by repeating the last one.

    Row i of `logits` was computed after guess i (row 0 after x0). The step committed guesses
    1..accepted and the prediction of row `accepted`; rows accepted+1.. predict the positions after that.
    """
    guesses = logits[accepted + 1 :].argmax(dim=-1).tolist()  # (rows - accepted - 1,)
    filler = guesses[-1] if guesses else int(logits[-1].argmax())
    return guesses + [filler] * (block - len(guesses))


def prompt_tokens(s: Session, n: int) -> list[int]:
    """n tokens drawn at random from the prompt, with the call's generator (a seed repeats them)."""
    prompt = torch.tensor(s.tokens[: s.prompt_length])
    picks = torch.randint(len(prompt), (n,), generator=s.generator, device=s.generator.device).cpu()
    return prompt[picks].tolist()
