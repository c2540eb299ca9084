"""MTAD's scoring of its beams (`mtdecode.strategies.mtad`), in a module of its own so that the cost measurement
(`mtdecode.tuning.measure_beam_depth_cost`) times the very functions the strategy calls without importing a
strategy."""

import torch
from einops import rearrange, reduce

from mtdecode.sampling import Sampler
from mtdecode.tensor_types import Float, Tensor

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
