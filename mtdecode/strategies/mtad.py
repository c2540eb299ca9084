"""MTAD: multi-token assisted decoding (Qin et al., "Optimized Multi-Token Joint Decoding with
Auxiliary Model for LLM Inference", ICLR 2025).

Multi-token joint decoding (MTJD) would pick the next block of tokens from the target's
joint distribution P(y_1..y_k | x) = prod_j p(y_j | x, y_<j), which costs V^k target
evaluations. MTAD approximates it with a small auxiliary (draft) model q:

1. draft:  a block y_1..y_k from q by beam sampling with W beams (beam search when greedy):
           at depth 1 draw W tokens from q; at each further depth score every (beam, token)
           pair by beam weight x q(token | beam) and draw W pairs; y is the heaviest beam;
           k is fixed (`num_draft_tokens`) or decided by the policy (`mtdecode.policy`): by
           default each row stops where the heaviest beam's newest token is too unsure to pay
           for another depth, as `Speculative`'s draft does;
2. verify: one target forward over [x0, y_1..y_k] gives p_1..p_{k+1};
3. accept: the LONGEST prefix y_1..y_n with P(y_1..n) / Q(y_1..n) > tau (n = 0 if none);
           the test is deterministic: no uniform draw;
4. extend: one more token from p_{n+1} (its argmax when greedy); no residual distribution;
5. commit: the accepted prefix and that token; both caches keep only them.

MTAD does not preserve p: it trades exactness for likelihood. Distributions are the Sampler's
(temperature, top-k, top-p) when sampling; at temperature 0 the beams and the ratio use the
models' untempered softmax, and step 4 takes the argmax. The draft's beams live in one KV cache
as a token tree (`mtdecode.beams.deepen`); `KVCache.keep` keeps the accepted path. In a batch
every row has its own beams, draws and block length k (shorter near the end of its budget).
"""

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import ClassVar

import torch
from transformers import PreTrainedModel

from mtdecode.beam_q import Q, beam_q
from mtdecode.beams import BEAM_WIDTH, draft_beams, judged, plain_step
from mtdecode.model import CausalLM
from mtdecode.plain import extend_with
from mtdecode.policy import Adaptive, ChainPlan, Fixed, fixed_or
from mtdecode.sampling import draw
from mtdecode.session import Session, Step, with_new_token
from mtdecode.strategy import check_counts
from mtdecode.tensor_types import Float, Int, Tensor
from mtdecode.zoo.eagle import EagleHead


@dataclass(frozen=True)
class MTAD:
    """Draft a block by beam sampling, accept its longest prefix whose joint likelihood ratio exceeds tau.

    **Arguments:**

    - `draft`: the auxiliary model q, sharing the target's vocabulary and device; or an `EagleHead` trained for the
      target, whose distributions are q (`mtdecode.beam_q.HeadQ`; no second model; k must then be fixed).
    - `num_draft_tokens`: a fixed block length k (at least 1); None: as `policy` decides.
    - `beam_width`: W, beams kept per depth (at least 1).
    - `threshold`: tau > 0; a prefix is accepted if P(y_1..n) / Q(y_1..n) > tau.
    - `max_draft_tokens`: the most tokens of a block when `policy` decides.
    - `policy`: how long a block to draft when k is not given (`mtdecode.policy`); `Adaptive()` by default, a guess
      costing a depth of the beams (a draft forward over W tokens per row, then their children's scores).
    """

    draft: CausalLM | PreTrainedModel | EagleHead
    num_draft_tokens: int | None = None
    beam_width: int = BEAM_WIDTH
    threshold: float = 0.5
    max_draft_tokens: int = 20
    policy: Adaptive | Fixed = Adaptive()
    #: MTAD does not reproduce greedy decoding or p: it accepts by likelihood
    exact: ClassVar[bool] = False

    def __post_init__(self) -> None:
        check_counts(self, ("num_draft_tokens", "beam_width", "max_draft_tokens"), optional=["num_draft_tokens"])
        if not (isinstance(self.threshold, int | float) and math.isfinite(self.threshold) and self.threshold > 0):
            raise ValueError(f"threshold must be a number > 0, got {self.threshold!r}")
        if isinstance(self.draft, EagleHead) and self.num_draft_tokens is None and isinstance(self.policy, Adaptive):
            raise ValueError("MTAD with an EagleHead as q needs num_draft_tokens (the adaptive policy measures drafts)")

    def decode(self, s: Session) -> Iterator[list[Step]]:
        q = beam_q(s, self.draft)  # a draft model's runner, or a feature head's
        rows = torch.arange(s.batch, device=s.device)
        plan = fixed_or(self.num_draft_tokens, self.policy).beams(s, q.runner, width=self.beam_width,
                                                                   most=self.max_draft_tokens)  # fmt: skip
        while not s.done:
            k = s.budget(plan.most)  # (batch,): the step adds one token of its own
            if plan.rests(k > 0, list(map(len, s.unread(q.runner)))):
                yield plain_step(s, q)
                continue
            block, log_q, path, k = beam_draft(s, q, k, self.beam_width, plan)  # step 1
            if block.shape[1] == 0:  # no row drafted
                plan.record(k, torch.zeros_like(k))
                yield plain_step(s, q)
                continue
            log_p, last = score_block(s, block)  # step 2
            n = accepted_length(log_p, log_q, k, self.threshold)  # step 3
            plan.record(k, n)
            p_next = last[rows, n]  # (batch, vocab)
            new_token = p_next.argmax(-1) if s.sampler.greedy else draw(p_next, s.random, s.active)  # step 4
            accepted = torch.arange(block.shape[1], device=s.device) < n[:, None]
            ratio = ((log_p - log_q) * accepted).sum(1)  # log P/Q of the accepted prefix
            yield commit(s, q, path, block, accepted=n, new_token=new_token, k=k, log_ratio=ratio)  # step 5


def beam_draft(
    s: Session, q: Q, k: Int[Tensor, " batch"], width: int, plan: ChainPlan
) -> tuple[Int[Tensor, "batch k"], Float[Tensor, "batch k"], Int[Tensor, "batch k"], Int[Tensor, " batch"]]:
    """Step 1: beam sampling (beam search when greedy) over the draft's joint distribution, per row
    (`mtdecode.beams.draft_beams`; the `plan` may stop a row below k[b]), and y, the heaviest beam.

    **Returns:** each row's heaviest beam after its k[b] tokens (padded with -1 to the widest row), their per-token
    log q, the draft-cache nodes of the beam's first k[b] - 1 tokens (the last never fed; -1 pads), and k itself.
    """
    beams = draft_beams(s, q, k, width, plan)
    y = (torch.arange(s.batch, device=s.device), beams.heaviest)  # each row's heaviest beam
    return beams.tokens[y], beams.log_q[y], beams.nodes[y], beams.k


def score_block(
    s: Session, block: Int[Tensor, "batch k"]
) -> tuple[Float[Tensor, "batch k"], Float[Tensor, "batch k_plus_1 vocab"]]:
    """Step 2: one target forward over each row's unread tokens and block; log p of each block token, and
    p_1..p_{k+1}."""
    logits = extend_with(s, block)  # (batch, k + 1, vocab)
    p = judged(s.sampler, logits)
    log_p = p[:, :-1].gather(2, block.clamp(min=0)[..., None])[..., 0].log()  # (batch, k)
    return log_p, p


def accepted_length(
    log_p: Float[Tensor, "batch k"], log_q: Float[Tensor, "batch k"], k: Int[Tensor, " batch"], threshold: float
) -> Int[Tensor, " batch"]:
    """Step 3: per row, the largest n <= k with log P(y_1..n) - log Q(y_1..n) > log tau (the longest passing prefix)."""
    if log_p.shape[1] == 0:
        return torch.zeros(log_p.shape[0], dtype=torch.long, device=log_p.device)
    log_ratio = (log_p - log_q).cumsum(1)  # (batch, k): prefix n is column n - 1
    within = torch.arange(log_p.shape[1], device=log_p.device) < k[:, None]
    passing = (log_ratio > math.log(threshold)) & within
    last = log_p.shape[1] - 1 - passing.flip(1).long().argmax(1)  # the last passing column
    return torch.where(passing.any(1), last + 1, 0)


def commit(
    s: Session,
    q: Q,
    path: Int[Tensor, "batch k"],
    block: Int[Tensor, "batch k"],
    *,
    accepted: Int[Tensor, " batch"],
    new_token: Int[Tensor, " batch"],
    k: Int[Tensor, " batch"],
    log_ratio: Float[Tensor, " batch"],
) -> list[Step]:
    """Step 5: keep the accepted tokens' entries in both caches, commit, let the draft catch up."""
    s.target.cache.crop(s.lengths + accepted)
    kept = torch.arange(path.shape[1], device=s.device) < accepted[:, None]
    q.keep(torch.where(kept, path, -1))  # the accepted beam tokens the draft has read, in order
    tokens, counts = with_new_token(block.clamp(min=0), accepted, new_token)
    proposals = [row[:n] for row, n in zip(block.tolist(), k.tolist(), strict=True)]
    steps = s.commit(tokens, counts, drafted=k, accepted=accepted, proposals=proposals, log_ratios=log_ratio)
    s.read_later(q.runner)  # if every guess was accepted, the draft reads the last in its next forward
    return steps
