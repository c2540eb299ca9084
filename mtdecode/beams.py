"""Beam drafting (step 1 of MTAD and MMTAD): W beams per row grown a depth at a draft forward each, by beam weight
x q (`draft_beams`), and the scoring they share with the cost measurement
(`mtdecode.costs.probes.measure_beam_depth_cost` times the very functions the strategies call).

q is a draft model's or a feature head's (`mtdecode.beam_q`)."""

from functools import partial
from typing import NamedTuple

import torch
from einops import rearrange, reduce, repeat

from mtdecode import masks
from mtdecode.beam_q import Children, Q
from mtdecode.plain import prefill
from mtdecode.plans import ChainPlan
from mtdecode.sampling import RowRandom, Sampler, draw
from mtdecode.session import Session, Step
from mtdecode.tensor_types import Bool, Float, Int, Tensor

#: MTAD's default number of beams kept per depth, W
BEAM_WIDTH = 4


def judged(sampler: Sampler, logits: Float[Tensor, "*rows vocab"]) -> Float[Tensor, "*rows vocab"]:
    """The distribution both models are judged by: the Sampler's, or the plain softmax at temperature 0."""
    return torch.softmax(logits.double(), dim=-1) if sampler.temperature == 0 else sampler.probs(logits.double())


def log_of(q: Float[Tensor, "*rows vocab"]) -> Float[Tensor, "*rows vocab"]:
    """`q.log()`, bit for bit, without taking the log of q's zeros (they give -inf): the default draft computes
    logits for a part of the vocabulary only (`mtdecode.zoo.draft`), so most of q is 0, and torch's CPU log is
    several times slower on 0 than on other numbers."""
    zero = q == 0
    return torch.where(zero, 1.0, q).log_().masked_fill_(zero, -torch.inf)


def score_children(
    sampler: Sampler, logits: Float[Tensor, "batch beam vocab"], log_q: Float[Tensor, "batch beam depth"]
) -> tuple[Float[Tensor, "batch beam vocab"], Float[Tensor, "batch options"]]:
    """One depth's scoring: from the draft's logits after each beam's newest token, log q(token | beam), and
    every (beam, token) pair's score, beam weight x q(token | beam) as a log, options flattened as
    (beam vocab) for `choose`."""
    next_log_q = log_of(judged(sampler, logits))  # (batch, beam, vocab)
    weight = reduce(log_q, "batch beam depth -> batch beam 1", "sum")  # each beam's log q so far
    return next_log_q, rearrange(weight + next_log_q, "batch beam vocab -> batch (beam vocab)")


def choose(
    log_scores: Float[Tensor, "batch options"],
    width: int,
    greedy: bool,
    random: RowRandom,
    rows: Bool[Tensor, " batch"],
) -> Int[Tensor, "batch width"]:
    """W options per row: the best W when greedy, else W drawn without replacement with probability
    proportional to exp(score) (normalised as p / sum p, not log_softmax of probabilities).
    A row with fewer than W possible options (finite scores) gets -1 for the rest; only `rows` draw."""
    possible = torch.isfinite(log_scores).sum(1)  # (batch,)
    width = min(width, log_scores.shape[1])
    if greedy:
        picks = log_scores.topk(width, dim=1).indices
    else:
        weights = (log_scores - log_scores.max(1, keepdim=True).values).exp().nan_to_num(0.0)  # (batch, options)
        columns = []
        for j in range(width):  # successive draws, each without the options already drawn
            pick = draw(weights, random, rows & (possible > j))
            columns.append(pick)
            weights = weights.scatter(1, pick[:, None], 0.0)
        picks = torch.stack(columns, dim=1)
    return torch.where(torch.arange(width, device=picks.device) < possible[:, None], picks, -1)


def newest_q(log_q: Float[Tensor, "batch beam depth"], best: Int[Tensor, " batch"]) -> Float[Tensor, " batch"]:
    """q of the newest token of each row's `best` beam: the draft's confidence that a policy may weigh."""
    return log_q[torch.arange(log_q.shape[0], device=log_q.device), best, -1].exp()


class Beams(NamedTuple):
    """W beams per row as they grow: `tokens` and their `log_q` (batch, beam, depth so far), the draft-cache tree
    `nodes` of the fed tokens (batch, beam, depth - 1), and the draft's token tree of pending entries as `parents`
    (batch, entries), in feeding order."""

    tokens: Int[Tensor, "batch beam depth"]
    log_q: Float[Tensor, "batch beam depth"]
    nodes: Int[Tensor, "batch beam fed"]
    parents: Int[Tensor, "batch entries"]


def deepen(
    s: Session, q: Q, beams: Beams, width: int, rows: Bool[Tensor, " batch"]
) -> tuple[Int[Tensor, "batch beam depth"], Float[Tensor, "batch beam depth"], Int[Tensor, "batch beam fed"],
           Int[Tensor, "batch entries"]]:  # fmt: skip
    """One more depth of beam sampling (beam search when greedy): one draft forward over each beam's newest token,
    fed as a child of the beam's previous node (a tree mask among the pending entries), every (beam, token) pair
    scored by beam weight x q(token | beam), and W pairs chosen (`choose`; only `rows` draw). Returns the grown
    `Beams`' fields."""
    tokens, log_q, nodes, parents = beams
    batch, count = tokens.shape[:2]  # W beams, or fewer while W exceeds the options
    previous = nodes[:, :, -1] if nodes.shape[2] else torch.full((batch, count), -1, device=s.device)
    new_nodes = parents.shape[1] + repeat(torch.arange(count, device=s.device), "beam -> batch beam", batch=batch)
    parents = torch.cat([parents, previous], dim=1)
    sees = masks.tree(parents)[:, -count:]  # (batch, W, pending + W)
    offsets = masks.tree_positions(parents)[:, -count:]  # (batch, W): the depth below the committed tokens
    logits = q.children(Children(tokens[:, :, -1].clamp(min=0), offsets, sees, previous))  # (batch, W, vocab)
    next_log_q, scores = score_children(s.sampler, logits, log_q)  # every (beam, token) pair scored
    picks = choose(scores, width, s.sampler.greedy, s.random, rows)  # (batch, W)
    pair = picks.clamp(min=0)
    vocab = next_log_q.shape[-1]
    beam, token = pair.div(vocab, rounding_mode="floor"), pair % vocab  # (beam vocab) undone
    beam_rows = torch.arange(batch, device=s.device)[:, None]
    token_log_q = next_log_q[beam_rows, beam, token].masked_fill(picks < 0, -torch.inf)
    tokens = torch.cat([tokens[beam_rows, beam], torch.where(picks < 0, -1, token)[:, :, None]], dim=2)
    log_q = torch.cat([log_q[beam_rows, beam], token_log_q[:, :, None]], dim=2)
    nodes = torch.cat([nodes[beam_rows, beam], new_nodes[beam_rows, beam][:, :, None]], dim=2)
    return tokens, log_q, nodes, parents


class Drafted(NamedTuple):
    """Each row's W beams when its block ended, at its own depth k[b] (-1 tokens and 0 log q past it; a beam that
    the options ran out for has -1 tokens and -inf log q): `tokens` and their `log_q` (batch, beam, k), the
    draft-cache `nodes` of the first k[b] - 1 tokens (the last is never fed; -1 pads), the `heaviest` beam (the
    first of the largest joint q), and `k`."""

    tokens: Int[Tensor, "batch beam k"]
    log_q: Float[Tensor, "batch beam k"]
    nodes: Int[Tensor, "batch beam k"]
    heaviest: Int[Tensor, " batch"]
    k: Int[Tensor, " batch"]


def draft_beams(s: Session, q: Q, k: Int[Tensor, " batch"], width: int, plan: ChainPlan) -> Drafted:
    """Step 1: beam sampling (beam search when greedy) over the draft's joint distribution, W beams per row, to
    depth k[b]. The `plan` may stop a row at a depth below k[b] (where the heaviest beam's newest token is too
    unsure to pay for another depth; q's probabilities only); a row that q cannot read yet drafts nothing."""
    k = torch.where(plan.first(k > 0, [len(row) for row in s.unread(q.runner)]) & q.ready(s), k, 0)
    batch, depth = s.batch, int(k.max())
    drafted = Drafted(
        torch.full((batch, width, depth), -1, dtype=torch.long, device=s.device),
        torch.zeros(batch, width, depth, dtype=torch.float64, device=s.device),
        torch.full((batch, width, depth), -1, dtype=torch.long, device=s.device),
        torch.zeros(batch, dtype=torch.long, device=s.device),
        k,
    )
    if depth == 0:
        return drafted
    first_log_q = log_of(judged(s.sampler, q.read(s)))  # (batch, vocab)
    picks = choose(first_log_q, width, s.sampler.greedy, s.random, s.active & (k > 0))  # depth 1: (batch, W)
    first = first_log_q.gather(1, picks.clamp(min=0)).masked_fill(picks < 0, -torch.inf)  # (batch, beam)
    beams = Beams(
        rearrange(picks, "batch beam -> batch beam 1"),  # tokens: (batch, beam, depth so far)
        rearrange(first, "batch beam -> batch beam 1"),  # their log q
        torch.empty(batch, picks.shape[1], 0, dtype=torch.long, device=s.device),  # tree nodes of the fed tokens
        torch.empty(batch, 0, dtype=torch.long, device=s.device),  # the draft's token tree, in feeding order
    )
    for d in range(1, depth + 1):
        heaviest = beams.log_q.sum(2).argmax(1)  # (batch,): the first of the heaviest
        going = plan.more(k > d, partial(newest_q, beams.log_q, heaviest))  # q's confidence in it, if weighed
        k = torch.where((k > d) & ~going, d, k)
        done = k == d  # rows whose block ends here: keep their beams
        count = beams.tokens.shape[1]  # W, or fewer while W exceeds the options
        drafted.tokens[done, :count, :d] = beams.tokens[done]
        drafted.log_q[done, :count, :d] = beams.log_q[done]
        drafted.log_q[done, count:, :d] = -torch.inf
        drafted.nodes[done, :count, : d - 1] = beams.nodes[done]
        drafted.heaviest[done] = heaviest[done]
        if d >= int(k.max()):
            break
        beams = Beams(*deepen(s, q, beams, width, s.active & (k > d)))  # a draft forward
    used = int(k.max())
    tokens, log_q, nodes = (part[..., :used] for part in drafted[:3])
    return Drafted(tokens, log_q, nodes, drafted.heaviest, k)


def plain_step(s: Session, q: Q) -> list[Step]:
    """A step with no block in any row, at greedy cost: the target's own token after x0 (n = 0, step 4 of MTAD and
    MMTAD), with no log P/Q to record. The draft rests, and reads what it missed when it next drafts."""
    logits = prefill(s)  # (batch, vocab): one target forward over each row's unread tokens
    token = logits.argmax(-1) if s.sampler.greedy else draw(judged(s.sampler, logits), s.random, s.active)
    none = torch.zeros(s.batch, dtype=torch.float64, device=s.device)
    steps = s.commit(token[:, None], 1, proposals=[[]] * s.batch, log_ratios=none)
    s.read_later(q.runner)
    return steps
