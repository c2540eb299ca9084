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
from dataclasses import dataclass

import torch

from mtdecode.session import Session, Step
from mtdecode.tensor_types import Float, Int, Tensor
from mtdecode.verification import NONE, verify_chain


@dataclass(frozen=True)
class Jacobi:
    """Plain Jacobi decoding with a block of `block` guessed tokens (at least 1).

    Exact at temperature 0; with sampling, the guesses are verified by the one-hot rule of
    `mtdecode.verification`, which keeps the target distribution.
    """

    block: int = 8

    def __post_init__(self) -> None:
        if isinstance(self.block, bool) or not isinstance(self.block, int) or self.block < 1:
            raise ValueError(f"block must be an integer >= 1, got {self.block!r}")

    def decode(self, s: Session) -> Iterator[list[Step]]:
        guesses = prompt_tokens(s, self.block)  # (batch, block): any start converges; prompt tokens are a cheap one
        while not s.done:
            k = s.budget(self.block)  # (batch,): the step adds one token of its own
            steps, logits, accepted = verify_chain(s, up_to(guesses, k))  # steps 1-2
            yield steps
            guesses = jacobi_update(logits, accepted, k, self.block)  # step 3


def up_to(guesses: Int[Tensor, "batch block"], k: Int[Tensor, " batch"]) -> Int[Tensor, "batch guesses"]:
    """Each row's first k[b] guesses, the rest padded with -1 (cut to the widest row)."""
    width = int(k.max())
    column = torch.arange(width, device=guesses.device)
    return torch.where(column < k[:, None], guesses[:, :width], NONE)


def jacobi_update(
    logits: Float[Tensor, "batch rows vocab"], accepted: Int[Tensor, " batch"], k: Int[Tensor, " batch"], block: int
) -> Int[Tensor, "batch block"]:
    """Step 3: the predictions after the first rejected guess, padded to `block` by repeating the last one.

    Row i of a row's `logits` was computed after guess i (row 0 after x0), up to its k guesses. The
    step committed guesses 1..accepted and the prediction of row `accepted`; rows accepted+1..k
    predict the positions after that.
    """
    predictions = logits.argmax(dim=-1)  # (batch, rows)
    index = accepted[:, None] + 1 + torch.arange(block, device=logits.device)  # (batch, block)
    return predictions.gather(1, torch.minimum(index, k[:, None]))  # past a row's last guess: its last prediction


def prompt_tokens(s: Session, n: int) -> Int[Tensor, "batch n"]:
    """n tokens drawn at random from each row's prompt, with the row's random stream (a seed repeats them)."""
    lengths = torch.tensor(s.prompt_lengths, device=s.device)  # (batch,)
    width = max(s.prompt_lengths)
    rows = [row[:n] + [0] * (width - n) for row, n in zip(s.tokens, s.prompt_lengths, strict=True)]
    prompts = torch.tensor(rows, device="cpu")
    picks = (s.random.uniform(n).to(s.device) * lengths[:, None]).long()  # (batch, n): uniform over positions
    return prompts.to(s.device).gather(1, torch.minimum(picks, lengths[:, None] - 1))
