"""MMTAD: multi-candidate multi-token assisted decoding (Qin et al., "Optimized Multi-Token Joint Decoding with
Auxiliary Model for LLM Inference", ICLR 2025).

MTAD (`mtdecode.strategies.MTAD`) drafts W beams and verifies the heaviest. MMTAD verifies all W of them in the
same one target forward, as a token tree, and keeps the deepest block that passes MTAD's joint-likelihood test.
Per step, with x0 the newest committed token:

1. draft:  W beams y^1..y^W of k tokens from q by beam sampling (beam search when greedy), as MTAD drafts
           (`mtdecode.beams.draft_beams`);
2. verify: one target forward over x0 and the W beams, each a chain of k nodes under x0 (shared prefixes are
           not merged; `mtdecode.masks.tree`), gives p after x0 and after every node;
3. accept: beam i passes at depth d if log P(y^i_1..d) - log Q_d > log tau, where Q_d is q's joint probability
           of the first d tokens of the heaviest beam (`denominator="heaviest"`, the default, as the paper's
           code does) or the largest such joint over the beams at depth d (`"largest"`, the code's earlier
           variant). n is the DEEPEST depth at which any beam passes (0 if none), and the winner is the beam
           that passes there with the largest P (the first of equals): no stop at the first failure;
4. extend: one more token from p after the winner's first n tokens (its argmax when greedy);
5. commit: the winner's n tokens and that token; both caches keep only the context and the winner's path.

With W = 1 the tree is MTAD's block and the rule is MTAD's, step for step. Like MTAD, MMTAD trades exactness for
likelihood: it reproduces neither p nor greedy decoding. At temperature 0 the beams are the draft's W best
(beam search), P and Q are the models' untempered softmax, and the extra token is p's argmax; a block the rule
accepts can still differ from the target's own argmaxes, so greedy MMTAD can differ from greedy decoding.
"""

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import ClassVar, Literal, NamedTuple

import torch
from einops import rearrange, repeat
from transformers import PreTrainedModel

from mtdecode import masks
from mtdecode.beam_q import Q, beam_q
from mtdecode.beams import BEAM_WIDTH, Drafted, draft_beams, judged, plain_step
from mtdecode.model import CausalLM, left_pad
from mtdecode.policy import Fixed
from mtdecode.sampling import draw
from mtdecode.session import Session, Step, with_new_token
from mtdecode.strategy import check_counts
from mtdecode.tensor_types import Float, Int, Tensor
from mtdecode.zoo.eagle import EagleHead

#: the block length of the paper's examples, k
BLOCK = 4


@dataclass(frozen=True)
class MMTAD:
    """Draft W beams, verify them all in one target forward as a tree, accept the deepest prefix that passes.

    **Arguments:**

    - `draft`: the auxiliary model q, sharing the target's vocabulary and device; or an `EagleHead` trained for the
      target, whose distributions are q (`mtdecode.beam_q.HeadQ`; no second model).
    - `num_draft_tokens`: k, the block length (at least 1; 4 in the paper's examples).
    - `beam_width`: W, beams kept per depth and verified (at least 1; 4 in the paper's examples).
    - `threshold`: tau > 0 (0.5 in the paper's examples; 0.3 also used).
    - `denominator`: Q_d of step 3, `"heaviest"` (q's joint of the heaviest beam's first d tokens) or
      `"largest"` (the largest joint over the beams at depth d).
    """

    draft: CausalLM | PreTrainedModel | EagleHead
    num_draft_tokens: int = BLOCK
    beam_width: int = BEAM_WIDTH
    threshold: float = 0.5
    denominator: Literal["heaviest", "largest"] = "heaviest"
    #: MMTAD does not reproduce greedy decoding or p: it accepts by likelihood
    exact: ClassVar[bool] = False

    def __post_init__(self) -> None:
        check_counts(self, ("num_draft_tokens", "beam_width"))
        if not (isinstance(self.threshold, int | float) and math.isfinite(self.threshold) and self.threshold > 0):
            raise ValueError(f"threshold must be a number > 0, got {self.threshold!r}")
        if self.denominator not in ("heaviest", "largest"):
            raise ValueError(f'denominator must be "heaviest" or "largest", got {self.denominator!r}')

    def decode(self, s: Session) -> Iterator[list[Step]]:
        q = beam_q(s, self.draft)  # a draft model's runner, or a feature head's
        plan = Fixed(self.num_draft_tokens)
        while not s.done:
            k = s.budget(plan.most)  # (batch,): the step adds one token of its own
            beams = draft_beams(s, q, k, self.beam_width, plan)  # step 1
            if beams.tokens.shape[2] == 0:  # no row can draft: its budget has one token left
                yield plain_step(s, q)
                continue
            p = score_beams(s, beams.tokens)  # step 2: (batch, 1 + W k, vocab)
            log_p = beam_log_p(p, beams.tokens)
            outcome = accept(log_p, beams, self.threshold, self.denominator)  # step 3
            new_token = extend(s, p, outcome, beams.tokens.shape[2])  # step 4
            yield commit(s, q, beams, outcome, new_token)  # step 5


def score_beams(s: Session, tokens: Int[Tensor, "batch beam k"]) -> Float[Tensor, "batch fed vocab"]:
    """Step 2: one target forward over each row's unread tokens (x0 last) and its W beams as W chains under x0;
    p at x0 and after every node, as (batch, 1 + beam * k, vocab), the nodes beam by beam (padding nodes, -1,
    are fed as token 0 and read by nobody)."""
    context, pad = left_pad(s.unread(s.target), s.device)  # (batch, u): shorter rows padded on the left
    u, (width, depth) = context.shape[1], tokens.shape[1:]
    node = torch.arange(width * depth, device=s.device)  # beam i's token at depth d is node i * k + d
    chain = torch.where(node % depth == 0, u - 1, u + node - 1)  # its parent: x0, or the beam's previous node
    parents = torch.cat([torch.arange(u, device=s.device) - 1, chain])  # the context is a chain itself
    offsets = torch.cat([torch.arange(u, device=s.device), u + node % depth])  # a node's depth below the context
    fed = torch.cat([context, rearrange(tokens.clamp(min=0), "batch beam k -> batch (beam k)")], dim=1)
    wanted = torch.arange(u - 1, u + width * depth, device=s.device)  # x0 and every node
    logits = s.target.forward(fed, offsets, masks.tree(parents), pad=pad, logits_to_keep=wanted)
    return judged(s.sampler, logits)


def beam_log_p(
    p: Float[Tensor, "batch fed vocab"], tokens: Int[Tensor, "batch beam k"]
) -> Float[Tensor, "batch beam k"]:
    """log p of each beam token given its beam's earlier ones (-inf for padding)."""
    width, depth = tokens.shape[1:]
    beam = repeat(torch.arange(width, device=p.device), "beam -> beam k", k=depth)
    before = after(beam, repeat(torch.arange(depth, device=p.device), "k -> beam k", beam=width), depth)
    p_before = p[:, rearrange(before, "beam k -> (beam k)")]  # (batch, beam k, vocab): p before each node
    chosen = rearrange(tokens.clamp(min=0), "batch beam k -> batch (beam k) 1")
    log_p = rearrange(p_before.gather(2, chosen).log(), "batch (beam k) 1 -> batch beam k", beam=width)
    return log_p.masked_fill(tokens < 0, -torch.inf)


def after(beam: Int[Tensor, "*rows"], depth: Int[Tensor, "*rows"], k: int) -> Int[Tensor, "*rows"]:
    """Where p after a beam's first `depth` tokens is among `score_beams`' outputs (x0's for depth 0)."""
    return torch.where(depth > 0, 1 + beam * k + depth - 1, 0)


class Outcome(NamedTuple):
    """Step 3's verdict per row: `n` tokens accepted from beam `winner`, whose prefix has log P/Q `log_ratio`
    (beam 0 and 0 where n = 0)."""

    n: Int[Tensor, " batch"]
    winner: Int[Tensor, " batch"]
    log_ratio: Float[Tensor, " batch"]


def accept(log_p: Float[Tensor, "batch beam k"], beams: Drafted, threshold: float, denominator: str) -> Outcome:
    """Step 3: per row, the deepest n at which a beam passes, log P(y^i_1..n) - log Q_n > log tau, and the winning
    beam: the largest P among those that pass at n (the first of equals)."""
    rows = torch.arange(log_p.shape[0], device=log_p.device)
    log_P = log_p.cumsum(2)  # (batch, beam, k): P of each beam's prefixes
    log_Q = beams.log_q.cumsum(2)  # q's, by the same prefixes
    bound = log_Q[rows, beams.heaviest] if denominator == "heaviest" else log_Q.max(1).values  # (batch, k)
    ratio = log_P - bound[:, None, :]
    within = torch.arange(log_p.shape[2], device=log_p.device) < beams.k[:, None]  # (batch, k)
    passing = (ratio > math.log(threshold)) & within[:, None, :] & (beams.tokens >= 0)  # (batch, beam, k)
    anywhere = passing.any(1)  # (batch, k): some beam passes at that depth
    deepest = log_p.shape[2] - 1 - anywhere.flip(1).long().argmax(1)
    n = torch.where(anywhere.any(1), deepest + 1, 0)
    at_n = (n - 1).clamp(min=0)
    contenders = torch.where(passing[rows, :, at_n], log_P[rows, :, at_n], -torch.inf)  # (batch, beam)
    winner = torch.where(n > 0, contenders.argmax(1), 0)
    return Outcome(n, winner, torch.where(n > 0, ratio[rows, winner, at_n], 0.0))


def extend(s: Session, p: Float[Tensor, "batch fed vocab"], outcome: Outcome, k: int) -> Int[Tensor, " batch"]:
    """Step 4: one token from p after the winner's first n tokens (its argmax when greedy)."""
    p_next = p[torch.arange(p.shape[0], device=p.device), after(outcome.winner, outcome.n, k)]  # (batch, vocab)
    return p_next.argmax(-1) if s.sampler.greedy else draw(p_next, s.random, s.active)


def commit(s: Session, q: Q, beams: Drafted, outcome: Outcome, new_token: Int[Tensor, " batch"]) -> list[Step]:
    """Step 5: the target keeps its context and the winner's accepted nodes, the draft the winner's path; commit.
    Each step records every beam the target verified (`Step.candidates`) and the winner's (`Step.proposal`)."""
    accepted, winner, log_ratio = outcome
    rows, depth = torch.arange(s.batch, device=s.device), beams.tokens.shape[2]
    kept = torch.arange(depth, device=s.device) < accepted[:, None]  # (batch, k)
    context = s.target.cache.pending - beams.tokens.shape[1] * depth  # the unread tokens' entries, x0 last
    nodes = context + winner[:, None] * depth + torch.arange(depth, device=s.device)  # the winner's, in the forward
    columns = repeat(torch.arange(context, device=s.device), "context -> batch context", batch=s.batch)
    s.target.cache.keep(torch.cat([columns, torch.where(kept, nodes, -1)], dim=1))
    q.keep(torch.where(kept, beams.nodes[rows, winner], -1))  # the accepted beam tokens the draft read
    tokens, counts = with_new_token(beams.tokens[rows, winner].clamp(min=0), accepted, new_token)
    blocks = [[beam[:k] for beam in row] for row, k in zip(beams.tokens.tolist(), beams.k.tolist(), strict=True)]
    steps = s.commit(tokens, counts, drafted=beams.k, accepted=accepted, log_ratios=log_ratio,
                     proposals=[row[w] for row, w in zip(blocks, winner.tolist(), strict=True)],
                     candidates=[[beam for beam in row if beam and min(beam) >= 0] for row in blocks])  # fmt: skip
    s.read_later(q.runner)  # if a whole block was accepted, the draft reads its last token in its next forward
    return steps
