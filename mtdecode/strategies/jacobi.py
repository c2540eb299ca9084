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

`Jacobi(block=b)` verifies b guesses every step, as the papers do. A forward over 1 + b tokens costs more than one
over 1 token, though (on a CPU, and for a batch of rows far more), and on real text plain Jacobi's guesses seldom
converge; so by default the policy decides (`mtdecode.policy`): each step verifies only as many guesses as are
expected to pay for their place in the forward, at most `max_block`, down to none: a plain step at greedy cost,
after which the row's guesses wait, one place on, for the next step that verifies them.
"""

from collections.abc import Iterator
from dataclasses import dataclass

import torch

from mtdecode.copying import prompt_tokens
from mtdecode.policy import Adaptive, Fixed, fixed_or
from mtdecode.session import Session, Step
from mtdecode.strategy import check_counts
from mtdecode.tensor_types import Float, Int, Tensor
from mtdecode.verification import NONE, verify_chain


@dataclass(frozen=True)
class Jacobi:
    """Plain Jacobi decoding: guess a block of tokens, verify them all in one forward.

    Exact at temperature 0; with sampling, the guesses are verified by the one-hot rule of
    `mtdecode.verification`, which keeps the target distribution.

    **Arguments:**

    - `block`: verify this many guesses every step (at least 1); None (the default): as many as `policy` decides,
      at most `max_block`, down to none.
    - `max_block`: the guesses the rows keep when `policy` decides.
    - `policy`: how many guesses to verify (`mtdecode.policy`); `Adaptive()` by default, which judges each place of
      the block by how often guesses there were accepted so far.
    """

    block: int | None = None
    max_block: int = 8
    policy: Adaptive | Fixed = Adaptive()

    def __post_init__(self) -> None:
        check_counts(self, ("block", "max_block"), optional=["block"])

    def decode(self, s: Session) -> Iterator[list[Step]]:
        plan = fixed_or(self.block, self.policy).block(s, most=self.max_block)
        guesses = prompt_tokens(s, plan.most)  # (batch, most): any start converges; prompt tokens are a cheap one
        while not s.done:
            k = plan.verify(s.budget(plan.most), s.active)  # (batch,): the step adds one token of its own
            steps, logits, accepted = verify_chain(s, up_to(guesses, k))  # steps 1-2
            plan.record(k, accepted)
            yield steps
            verified = (k > 0)[:, None]  # a row that verified none moves its guesses on one place and waits
            if bool(verified.any()):
                guesses = torch.where(verified, jacobi_update(logits, accepted, k, plan.most), moved_on(guesses))  # 3
            else:
                guesses = moved_on(guesses)


def moved_on(guesses: Int[Tensor, "batch block"]) -> Int[Tensor, "batch block"]:
    """A row's guesses after a step that committed one token without verifying them: the first guess was for the
    place just committed, so the others move up one place, and the last is repeated at the end."""
    return torch.cat([guesses[:, 1:], guesses[:, -1:]], dim=1)


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
