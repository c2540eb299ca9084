"""Speculative decoding (Leviathan et al. 2023, Algorithm 1; Chen et al. 2023, Algorithm 2).

A small draft model q guesses `num_draft_tokens` tokens one by one; the target p scores
all of them in one forward pass; a rejection rule keeps a prefix of the guesses and adds
one token of its own. The rule makes the output distributed exactly as sampling from p
token by token; at temperature 0 it is exactly greedy decoding of p.

Per step, with x0 the newest committed token and k guesses:

1. draft:    d_i ~ q_i = q(. | ..., x0, d_1..d_{i-1}),        i = 1..k   (Algorithm 1, lines 1-3)
2. verify:   p_1..p_{k+1} from one target forward over [x0, d_1..d_k]     (line 4)
3. accept:   keep d_i with probability min(1, p_i(d_i) / q_i(d_i)), stop at the first rejection (lines 5-6)
4. correct:  after a rejection at i, draw from norm(max(0, p_i - q_i));
             if all k were kept, draw a bonus token from p_{k+1}          (lines 7-10)
5. commit:   the accepted guesses and the new token; roll both caches back to them.

Greedy needs no special case: with temperature 0 the Sampler's p and q are one-hot, so
p_i(d_i)/q_i(d_i) is 1 when the target agrees and 0 when it does not, and the residual
norm(max(0, p_i - q_i)) is the target's argmax.
"""

from collections.abc import Iterator
from dataclasses import dataclass, field

import torch
from transformers import PreTrainedModel

from mtdecode.model import CausalLM, Runner
from mtdecode.sampling import Sampler, draw
from mtdecode.session import Session, Step
from mtdecode.tensor_types import Float, Tensor


@dataclass(frozen=True)
class Speculative:
    """Draft with a small model, verify with the target in one pass, keep p exactly.

    **Arguments:**

    - `draft`: the draft model q (a transformers causal LM or a `CausalLM`); it must share
      the target's vocabulary and device.
    - `num_draft_tokens`: guesses per step (k), at least 1.
    """

    draft: CausalLM | PreTrainedModel
    num_draft_tokens: int = 4
    max_batch_size: int = field(default=1, init=False)

    def __post_init__(self) -> None:
        if isinstance(self.num_draft_tokens, bool) or self.num_draft_tokens < 1:
            raise ValueError(f"num_draft_tokens must be an integer >= 1, got {self.num_draft_tokens!r}")

    def decode(self, s: Session) -> Iterator[Step]:
        draft = s.draft_runner(self.draft)
        while not s.done:
            k = min(self.num_draft_tokens, s.remaining - 1)  # the step adds one token of its own
            guesses, q = draft_tokens(draft, s.unread(draft), k, s.sampler, s.generator)
            p = verify(s.target, s.unread(s.target), guesses, s.sampler)
            accepted = accept(guesses, p[:k], q, s.generator)
            new_token = correct(p, q, accepted, s.generator)
            yield commit(s, draft, guesses[:accepted] + [new_token], drafted=k, accepted=accepted)


def draft_tokens(
    draft: Runner, context: list[int], k: int, sampler: Sampler, generator: torch.Generator
) -> tuple[list[int], Float[Tensor, "k vocab"]]:
    """Algorithm 1, lines 1-3: k guesses from q, one draft forward each; also return q_1..q_k."""
    guesses: list[int] = []
    q_rows = []
    feed = context
    for _ in range(k):
        q_i = sampler.probs(draft.extend(feed, logits_to_keep=1)[-1])  # (vocab,)
        feed = [int(draw(q_i, generator))]
        guesses.append(feed[0])
        q_rows.append(q_i)
    if not q_rows:
        return guesses, torch.empty(0, draft.model.vocab_size, dtype=draft.model.dtype, device=draft.model.device)
    return guesses, torch.stack(q_rows)


def verify(target: Runner, context: list[int], guesses: list[int], sampler: Sampler) -> Float[Tensor, "k_plus_1 vocab"]:
    """Algorithm 1, line 4: p_1..p_{k+1} from one target forward over the unread context and d_1..d_k.

    On the first step the context is the whole prompt: the prefill and the first verification share one forward.
    """
    return sampler.probs(target.extend(context + guesses, logits_to_keep=len(guesses) + 1))


def accept(
    guesses: list[int], p: Float[Tensor, "k vocab"], q: Float[Tensor, "k vocab"], generator: torch.Generator
) -> int:
    """Algorithm 1, lines 5-6: keep d_i with probability min(1, p_i(d_i)/q_i(d_i)); return how many were kept."""
    if not guesses:
        return 0
    index = torch.arange(len(guesses), device=p.device)
    tokens = torch.tensor(guesses, device=p.device)
    ratio = p[index, tokens] / q[index, tokens]  # q_i(d_i) > 0: d_i was drawn from q_i
    r = torch.rand(len(guesses), generator=generator, dtype=p.dtype, device=p.device)
    rejected = (r >= ratio).nonzero()
    return int(rejected[0, 0]) if rejected.numel() else len(guesses)


def correct(
    p: Float[Tensor, "k_plus_1 vocab"], q: Float[Tensor, "k vocab"], accepted: int, generator: torch.Generator
) -> int:
    """Algorithm 1, lines 7-10: after a rejection, draw from norm(max(0, p - q)); else a bonus token from p."""
    if accepted == q.shape[0]:
        return int(draw(p[accepted], generator))
    residual = (p[accepted] - q[accepted]).clamp(min=0)
    if residual.sum() <= 0:  # p equals q up to rounding: a rejection had probability 0, so p is the answer
        return int(draw(p[accepted], generator))
    return int(draw(residual / residual.sum(), generator))


def commit(s: Session, draft: Runner, tokens: list[int], *, drafted: int, accepted: int) -> Step:
    """Line 11: output the accepted guesses and the new token; roll both caches back to them."""
    keep = len(s.tokens) + accepted  # cache entries to keep: the committed tokens, plus the accepted guesses
    s.target.cache.crop(keep)
    draft.cache.crop(min(keep, draft.cache.length))
    step = s.commit(tokens, drafted=drafted, accepted=accepted)
    s.catch_up(draft)  # if every guess was accepted, the draft has not read the last one yet
    return step
