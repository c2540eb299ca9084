"""MTAD: multi-token assisted decoding (Qin et al., "Optimized Multi-Token Joint Decoding with
Auxiliary Model for LLM Inference", ICLR 2025).

Multi-token joint decoding (MTJD) would pick the next block of tokens from the target's
joint distribution P(y_1..y_k | x) = prod_j p(y_j | x, y_<j), which costs V^k target
evaluations. MTAD approximates it with a small auxiliary (draft) model q:

1. draft:  a block y_1..y_k from q by beam sampling with W beams (beam search when greedy):
           at depth 1 draw W tokens from q; at each further depth score every (beam, token)
           pair by beam weight x q(token | beam) and draw W pairs; y is the heaviest beam;
2. verify: one target forward over [x0, y_1..y_k] gives p_1..p_{k+1};
3. accept: the LONGEST prefix y_1..y_n with P(y_1..n) / Q(y_1..n) > tau (n = 0 if none);
           the test is deterministic: no uniform draw;
4. extend: one more token from p_{n+1} (its argmax when greedy); no residual distribution;
5. commit: the accepted prefix and that token; both caches keep only them.

MTAD does not preserve p: it trades exactness for likelihood. Distributions here are the
Sampler's (temperature, top-k, top-p) when sampling; at temperature 0 the beams and the
ratio use the models' untempered softmax, and step 4 takes the argmax.

The draft's beams live in one KV cache as a token tree (`mtdecode.masks.tree`): each depth
is one draft forward over the W newest beam tokens; afterwards `KVCache.keep` keeps the
accepted path.
"""

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import ClassVar

import torch
from transformers import PreTrainedModel

from mtdecode import masks
from mtdecode.model import CausalLM, Runner
from mtdecode.sampling import Sampler, draw
from mtdecode.session import Session, Step
from mtdecode.tensor_types import Float, Tensor


@dataclass(frozen=True)
class MTAD:
    """Draft a block by beam sampling, accept its longest prefix whose joint likelihood ratio exceeds tau.

    **Arguments:**

    - `draft`: the auxiliary model q; it must share the target's vocabulary and device.
    - `num_draft_tokens`: the block length k (at least 1).
    - `beam_width`: W, beams kept per depth (at least 1).
    - `threshold`: tau > 0; a prefix is accepted if P(y_1..n) / Q(y_1..n) > tau.
    """

    draft: CausalLM | PreTrainedModel
    num_draft_tokens: int = 4
    beam_width: int = 4
    threshold: float = 0.5
    max_batch_size: int = field(default=1, init=False)
    #: MTAD does not reproduce greedy decoding or p: it accepts by likelihood
    exact: ClassVar[bool] = False

    def __post_init__(self) -> None:
        for name in ("num_draft_tokens", "beam_width"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if not (isinstance(self.threshold, int | float) and math.isfinite(self.threshold) and self.threshold > 0):
            raise ValueError(f"threshold must be a number > 0, got {self.threshold!r}")

    def decode(self, s: Session) -> Iterator[Step]:
        draft = s.draft_runner(self.draft)
        greedy = s.sampler.temperature == 0
        while not s.done:
            k = min(self.num_draft_tokens, s.remaining - 1)  # the step adds one token of its own
            block, log_q, path = beam_draft(s, draft, k, self.beam_width, greedy)  # step 1
            log_p, last = score_block(s, block)  # step 2
            n = accepted_length(log_p, log_q, self.threshold)  # step 3
            new_token = int(last[n].argmax()) if greedy else int(draw(last[n], s.generator))  # step 4
            ratio = float(log_p[:n].sum()) - float(log_q[:n].sum())  # log P/Q of the accepted prefix
            yield commit(s, draft, path, block, n, new_token, log_ratio=ratio)  # step 5


def judged(sampler: Sampler, logits: Float[Tensor, "*rows vocab"]) -> Float[Tensor, "*rows vocab"]:
    """The distribution both models are judged by: the Sampler's, or the plain softmax at temperature 0."""
    return torch.softmax(logits.double(), dim=-1) if sampler.temperature == 0 else sampler.probs(logits.double())


@dataclass
class Beam:
    """A partial block: its tokens, their per-token log q, and the draft-cache nodes of the tokens fed so far."""

    tokens: list[int]
    log_q: list[float]
    nodes: list[int] = field(default_factory=list)

    @property
    def weight(self) -> float:
        """log Q(tokens): the beam's joint log-likelihood under the draft."""
        return sum(self.log_q)

    def extended(self, token: int, log_q: float) -> "Beam":
        return Beam(self.tokens + [token], self.log_q + [log_q], list(self.nodes))


def beam_draft(
    s: Session, draft: Runner, k: int, width: int, greedy: bool
) -> tuple[list[int], Float[Tensor, " k"], list[int]]:
    """Step 1: beam sampling (beam search when greedy) over the draft's joint distribution.

    **Returns:**

    The heaviest beam's k tokens, their per-token log q, and the draft-cache nodes of its
    first k - 1 tokens (the last token was never fed).
    """
    if k == 0:
        return [], torch.zeros(0, dtype=torch.float64), []
    q = judged(s.sampler, draft.extend(s.unread(draft), logits_to_keep=1)[-1])  # (vocab,)
    draft.cache.commit()  # the unread tokens are committed tokens
    beams = [Beam([t], [float(q[t].log())]) for t in choose(q.log(), width, greedy, s.generator)]  # depth 1
    parents: list[int] = []  # the draft's token tree of fed beam tokens, in feeding order
    for _ in range(1, k):
        for beam in beams:  # feed each beam's newest token as a child of its previous node
            parents.append(beam.nodes[-1] if beam.nodes else -1)
            beam.nodes.append(len(parents) - 1)
        new = len(beams)
        mask = masks.tree(parents, draft.cache.committed, s.device)[-new:]  # (new, cache + new)
        positions = masks.tree_positions(parents, draft.cache.committed, s.device)[-new:]  # (new,)
        ids = torch.tensor([beam.tokens[-1] for beam in beams], device=s.device)
        q = judged(s.sampler, draft.forward(ids, positions, mask))  # (beams, vocab)
        # score every (beam, token) pair by beam weight x q(token | beam); keep W pairs
        weights = torch.tensor([beam.weight for beam in beams], dtype=torch.float64, device=s.device)
        scores = (weights[:, None] + q.log()).reshape(-1)  # (beams * vocab,)
        vocab = q.shape[-1]
        picks = [divmod(i, vocab) for i in choose(scores, width, greedy, s.generator)]
        beams = [beams[b].extended(t, float(q[b, t].log())) for b, t in picks]
    best = max(beams, key=lambda beam: beam.weight)
    return best.tokens, torch.tensor(best.log_q, dtype=torch.float64), best.nodes


def choose(log_scores: Float[Tensor, " options"], width: int, greedy: bool, generator: torch.Generator) -> list[int]:
    """W options: the best W when greedy, else W drawn without replacement with probability
    proportional to exp(score) (normalised as p / sum p, not log_softmax of probabilities)."""
    possible = int(torch.isfinite(log_scores).sum())
    width = min(width, possible)
    if greedy:
        return log_scores.topk(width).indices.tolist()
    weights = (log_scores - log_scores.max()).exp()
    return torch.multinomial(weights / weights.sum(), width, replacement=False, generator=generator).tolist()


def score_block(s: Session, block: list[int]) -> tuple[Float[Tensor, " k"], Float[Tensor, "k_plus_1 vocab"]]:
    """Step 2: one target forward over the unread tokens and the block; log p of each block token, and p_1..p_{k+1}."""
    logits = s.target.extend(s.unread(s.target) + block, logits_to_keep=len(block) + 1)  # (k + 1, vocab)
    p = judged(s.sampler, logits)
    index = torch.arange(len(block), device=p.device)
    log_p = p[index, torch.tensor(block, dtype=torch.long, device=p.device)].log()  # (k,)
    return log_p, p


def accepted_length(log_p: Float[Tensor, " k"], log_q: Float[Tensor, " k"], threshold: float) -> int:
    """Step 3: the largest n with log P(y_1..n) - log Q(y_1..n) > log tau, or 0 (the longest passing prefix)."""
    log_ratio = (log_p.cpu() - log_q.cpu()).cumsum(0)  # (k,): prefix n is entry n - 1
    passing = (log_ratio > math.log(threshold)).nonzero()
    return int(passing[-1, 0]) + 1 if passing.numel() else 0


def commit(
    s: Session, draft: Runner, path: list[int], block: list[int], accepted: int, new_token: int, *, log_ratio: float
) -> Step:
    """Step 5: keep the accepted tokens' entries in both caches, commit, let the draft catch up."""
    s.target.cache.crop(len(s.tokens) + accepted)
    draft.cache.keep(path[:accepted])  # the accepted beam tokens the draft has read, in order
    step = s.commit(
        block[:accepted] + [new_token],
        drafted=len(block),
        accepted=accepted,
        proposal=tuple(block),
        log_ratio=log_ratio,
    )
    s.catch_up(draft)
    return step
