"""Speculative decoding (Leviathan et al. 2023, Algorithm 1; Chen et al. 2023, Algorithm 2).

A small draft model q guesses k tokens one by one; the target p scores all of them in one forward pass; a
rejection rule keeps a prefix of the guesses and adds one token of its own. The output is distributed exactly as
sampling from p token by token; at temperature 0 it is exactly greedy decoding of p.

Per step, with x0 the newest committed token and k guesses:

1. draft:    d_i ~ q_i = q(. | ..., x0, d_1..d_{i-1}),        i = 1..k   (Algorithm 1, lines 1-3)
2. verify:   p_1..p_{k+1} from one target forward over [x0, d_1..d_k]     (line 4)
3. accept:   keep d_i with probability min(1, p_i(d_i) / q_i(d_i)), stop at the first rejection (lines 5-6)
4. correct:  after a rejection at i, draw from norm(max(0, p_i - q_i));
             if all k were kept, draw a bonus token from p_{k+1}          (lines 7-10)
5. commit:   the accepted guesses and the new token; roll both caches back to them.

How many guesses: `num_draft_tokens=k` fixes k, as the paper does; else the policy decides (`mtdecode.policy`;
by default each row drafts until the draft is unsure). A policy reads q and earlier steps only, never this step's
p, so the output stays exactly p (or greedy) whatever it chooses.

In a batch every row runs these steps on its own: its own k (fewer near the end of its
budget), its own guesses and draws, its own number of accepted guesses. At temperature 0
lines 5-10 reduce to comparing argmaxes (`judge_greedy`).
"""

from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial

import torch
from transformers import PreTrainedModel

from mtdecode.model import CausalLM, Runner
from mtdecode.plain import extend_with, prefill, sample_next
from mtdecode.policy import Adaptive, ChainPlan, Fixed, fixed_or
from mtdecode.sampling import RowRandom, draw
from mtdecode.session import Session, Step, with_new_token
from mtdecode.strategy import check_counts
from mtdecode.tensor_types import Bool, Float, Int, Tensor
from mtdecode.verification import NONE, verify_greedy


@dataclass(frozen=True)
class Speculative:
    """Draft with a small model, verify with the target in one pass, keep p exactly.

    **Arguments:**

    - `draft`: the draft model q (a transformers causal LM or a `CausalLM`) on the target's vocabulary and device.
    - `num_draft_tokens`: k, the guesses per step (at least 1), as in the paper; None (the default): as many as
      `policy` decides.
    - `max_draft_tokens`: the most guesses per step when `policy` decides.
    - `policy`: how many guesses to draft when k is not given (`mtdecode.policy`): `Adaptive()` by default, on costs
      and acceptance measured on this host; `Adaptive(costs, acceptance)` repeats a seeded run on any host.
    """

    draft: CausalLM | PreTrainedModel
    num_draft_tokens: int | None = None
    max_draft_tokens: int = 20
    policy: Adaptive | Fixed = Adaptive()

    def __post_init__(self) -> None:
        check_counts(self, ("num_draft_tokens", "max_draft_tokens"), optional=["num_draft_tokens"])

    def decode(self, s: Session) -> Iterator[list[Step]]:
        draft = s.draft_runner(self.draft)
        plan = fixed_or(self.num_draft_tokens, self.policy).chain(s, draft, most=self.max_draft_tokens,
                                                                   name="Speculative")  # fmt: skip
        while not s.done:
            k = s.budget(plan.most)  # (batch,): the step adds one token of its own
            if plan.rests(k > 0, list(map(len, s.unread(draft)))):
                yield plain_step(s, draft)
                continue
            guesses, q, k = draft_tokens(s, draft, k, plan)  # lines 1-3
            if guesses.shape[1] == 0:  # no row drafted
                plan.record(k, torch.zeros_like(k))
                yield plain_step(s, draft)
                continue
            logits = extend_with(s, guesses)  # line 4: p_1..p_{k+1} in one forward
            if q is None:  # temperature 0: lines 5-10 on the argmaxes
                accepted, new_token = judge_greedy(logits.argmax(-1), guesses, k, s.random, s.active)
            else:
                p = s.sampler.probs(logits)
                accepted = accept(guesses, p, q, k, s.random, s.active)  # lines 5-6
                new_token = correct(p, q, accepted, k, s.random, s.active)  # lines 7-10
            plan.record(k, accepted)
            yield commit(s, draft, guesses, accepted=accepted, new_token=new_token, k=k)  # line 11


def plain_step(s: Session, draft: Runner) -> list[Step]:
    """A step without guesses, at greedy cost: p's own draw, as lines 4 and 10 make it with k = 0. The draft rests."""
    steps = s.commit(sample_next(s, prefill(s))[:, None], 1)
    s.read_later(draft)
    return steps


def draft_tokens(
    s: Session, draft: Runner, k: Int[Tensor, " batch"], plan: ChainPlan
) -> tuple[Int[Tensor, "batch guesses"], Float[Tensor, "batch guesses vocab"] | None, Int[Tensor, " batch"]]:
    """Algorithm 1, lines 1-3: up to k[b] guesses per row from q, one draft forward each (a row that stopped draws
    nothing more; its later columns are never used); also q_1..q_k (None at temperature 0, where each guess is the
    draft's argmax), and how many guesses each row drew (fewer than k[b] where the `plan` stopped it)."""
    guesses, q_rows = [], []
    feed = s.unread(draft)  # ragged at first (prompts), then each row's x0
    going = plan.first(s.active & (k > 0), [len(row) for row in feed])
    drafted = torch.zeros_like(k)
    while bool(going.any()):
        logits = draft.extend(feed, logits_to_keep=1)[:, -1]  # (batch, vocab)
        if s.sampler.greedy:  # q_i is one-hot on the argmax: `draw` would return it, using one number per row
            d_i = logits.argmax(-1)
            s.random.skip(going.long())
        else:
            q_rows.append(s.sampler.probs(logits))  # q_i
            d_i = draw(q_rows[-1], s.random, rows=going)  # (batch,)
        drafted += going.long()
        going = plan.more(going & (drafted < k), partial(confidence, s, logits, q_rows, d_i))  # asked if weighed
        feed = d_i[:, None]
        guesses.append(d_i)
    q = torch.stack(q_rows, dim=1) if q_rows else None  # None at temperature 0, or when no row drafted
    none = torch.empty(s.batch, 0, dtype=torch.long, device=s.device)
    return torch.stack(guesses, dim=1) if guesses else none, q, drafted


def confidence(
    s: Session, logits: Float[Tensor, "batch vocab"], q: list[Float[Tensor, "batch vocab"]], d: Int[Tensor, " batch"]
) -> Float[Tensor, " batch"]:
    """q's probability of each row's newest guess (at temperature 0, the draft's softmax): what a policy may weigh."""
    judged = torch.softmax(logits.double(), dim=-1) if s.sampler.greedy else q[-1]
    return judged.gather(1, d[:, None])[:, 0]


def accept(
    guesses: Int[Tensor, "batch k"],
    p: Float[Tensor, "batch k_plus_1 vocab"],
    q: Float[Tensor, "batch k vocab"],
    k: Int[Tensor, " batch"],
    random: RowRandom,
    rows: Bool[Tensor, " batch"],
) -> Int[Tensor, " batch"]:
    """Algorithm 1, lines 5-6: keep d_i with probability min(1, p_i(d_i)/q_i(d_i)); return how many each row kept
    (of its own k guesses; only `rows` draw)."""
    width = guesses.shape[1]
    p_d = p[:, :width].gather(2, guesses[..., None])[..., 0]  # (batch, k): p_i(d_i)
    q_d = q.gather(2, guesses[..., None])[..., 0]  # q_i(d_i) > 0 where d_i was drawn from q_i
    r = random.uniform(torch.where(rows, k, 0))[:, :width].to(p.device)  # (batch, k)
    rejected = (r >= p_d / q_d) | (torch.arange(width, device=p.device) >= k[:, None])  # a row's own guesses only
    first = rejected.long().argmax(1) if width else torch.zeros_like(k)
    return torch.where(rejected.any(1), first, width)  # the first rejection, else all


def correct(
    p: Float[Tensor, "batch k_plus_1 vocab"],
    q: Float[Tensor, "batch k vocab"],
    accepted: Int[Tensor, " batch"],
    k: Int[Tensor, " batch"],
    random: RowRandom,
    rows: Bool[Tensor, " batch"],
) -> Int[Tensor, " batch"]:
    """Algorithm 1, lines 7-10: after a rejection, draw from norm(max(0, p - q)); else a bonus token from p."""
    index = torch.arange(p.shape[0], device=p.device)
    p_n = p[index, accepted]  # (batch, vocab)
    q_n = q[index, accepted.clamp(max=max(q.shape[1] - 1, 0))] if q.shape[1] else torch.zeros_like(p_n)
    residual = (p_n - q_n).clamp(min=0)
    # p equals q up to rounding, or every guess was kept: a rejection had probability 0, so p is the answer
    from_p = (accepted == k) | (residual.sum(-1) <= 0)
    return draw(torch.where(from_p[:, None], p_n, residual), random, rows)


def judge_greedy(
    target: Int[Tensor, "batch guesses_plus_1"],
    guesses: Int[Tensor, "batch k"],
    k: Int[Tensor, " batch"],
    random: RowRandom,
    rows: Bool[Tensor, " batch"],
) -> tuple[Int[Tensor, " batch"], Int[Tensor, " batch"]]:
    """Lines 5-10 at temperature 0, where p and q are one-hot: p_i(d_i) / q_i(d_i) is 1 where the target agrees and
    0 where not, and the residual is the target's argmax. So each row keeps its guesses up to the first that is not
    the target's token, then adds the target's token after them (`verification.verify_greedy`), without one-hot
    distributions over the vocabulary; it skips the k[b] + 1 random numbers `accept` and `correct` would draw."""
    random.skip(torch.where(rows, k, 0))  # line 5's numbers, one per guess; `verify_greedy` skips line 7's or 10's
    own = torch.arange(guesses.shape[1], device=guesses.device) < k[:, None]  # (batch, k): a row's own guesses
    verdict = verify_greedy(target[:, 0], target[:, None, 1:], torch.where(own, guesses, NONE)[:, None], random, rows)
    return verdict.accepted, verdict.tokens.gather(1, verdict.accepted[:, None])[:, 0]


def commit(
    s: Session,
    draft: Runner,
    guesses: Int[Tensor, "batch k"],
    *,
    accepted: Int[Tensor, " batch"],
    new_token: Int[Tensor, " batch"],
    k: Int[Tensor, " batch"],
) -> list[Step]:
    """Line 11: output the accepted guesses and the new token; roll both caches back to them."""
    keep = s.lengths + accepted  # cache entries to keep: the committed tokens, plus the accepted guesses
    s.target.cache.crop(keep)
    draft.cache.crop(torch.minimum(keep, draft.cache.held))
    steps = s.commit(*with_new_token(guesses, accepted, new_token), drafted=k, accepted=accepted)
    s.read_later(draft)  # if every guess was accepted, the draft reads the last one in its next forward
    return steps
