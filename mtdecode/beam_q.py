"""q for beam drafting (step 1 of MTAD and MMTAD, `mtdecode.beams`): a draft model's (`ModelQ`) or a feature
head's (`HeadQ`, no second model); `beam_q` picks by the draft given. Both answer the same three calls: `read` (q
after x0), `children` (q after each beam's newest token) and `keep` (what the draft keeps of the accepted beam)."""

from typing import NamedTuple

import torch
from transformers import PreTrainedModel

from mtdecode.model import CausalLM, Runner
from mtdecode.session import Session
from mtdecode.tensor_types import Bool, Float, Int, Tensor
from mtdecode.zoo.eagle import EagleHead, committed_features, head_runner, over_vocabulary, read_features


class Children(NamedTuple):
    """One depth of the beams, fed: each beam's newest `tokens` at `offsets` below the committed tokens, seeing what
    the tree mask `sees` allows among the pending entries and them, each a child of its beam's `previous` pending
    entry (-1: of x0)."""

    tokens: Int[Tensor, "batch beam"]
    offsets: Int[Tensor, "batch beam"]
    sees: Bool[Tensor, "batch beam seen"]
    previous: Int[Tensor, "batch beam"]


class ModelQ:
    """q from a draft model (any causal LM that shares the target's vocabulary): its runner reads the committed
    tokens itself, and its cache keeps the accepted beam's entries."""

    def __init__(self, runner: Runner) -> None:
        self.runner = runner

    def ready(self, s: Session) -> Bool[Tensor, " batch"]:
        """Every row: a draft model reads what it lacks itself."""
        return torch.ones(s.batch, dtype=torch.bool, device=s.device)

    def read(self, s: Session) -> Float[Tensor, "batch vocab"]:
        """q's logits after x0: one draft forward over each row's committed tokens that it has not read (x0 last)."""
        logits = self.runner.extend(s.unread(self.runner), logits_to_keep=1)[:, -1]
        self.runner.cache.commit()
        return logits

    def children(self, fed: Children) -> Float[Tensor, "batch beam vocab"]:
        """q's logits after each beam's newest token: one draft forward (the mask places each under its beam)."""
        return self.runner.forward(fed.tokens, fed.offsets, fed.sees)

    def keep(self, path: Int[Tensor, "batch kept"]) -> None:
        """Keep the pending entries on the accepted path (-1 pads)."""
        self.runner.cache.keep(path)


class HeadQ:
    """q from a feature head (`mtdecode.zoo.eagle.EagleHead`) in place of a draft model.

    The target's cache carries its features (`KVCache.carry_features`); before each block the head reads them at the
    tokens the target committed, which gives its prediction for x0's position (the root, as `Eagle` reads it). Each
    beam then grows as EAGLE's tree does: a node is fed its parent's predicted feature beside its token. q covers the
    head's tokens (`EagleHead.head_token_ids`) only; every other token has q = 0. After verification the head drops
    the beams' entries and reads the accepted tokens again with the target's own features, as EAGLE does."""

    def __init__(self, s: Session, head: EagleHead) -> None:
        self.runner = head_runner(s, head)
        s.target.cache.carry_features()  # before the target's first forward
        self.root: Float[Tensor, "batch hidden"] | None = None  # each row's prediction for x0's position
        self.predicted = None  # the prediction of every pending head entry, (batch, pending, hidden)

    def ready(self, s: Session) -> Bool[Tensor, " batch"]:
        """Rows whose context the target has read: the head drafts from its features (the first step is plain)."""
        return s.target.cache.lengths > 0

    def read(self, s: Session) -> Float[Tensor, "batch vocab"]:
        """q's logits after x0: the head reads the target's features at the tokens it has not read."""
        unread = committed_features(s.target.cache, self.runner.cache.lengths)
        self.root = read_features(s, self.runner, unread, self.root)  # (batch, hidden)
        self.predicted = self.root.new_zeros(self.root.shape[0], 0, self.root.shape[1])  # no entry pending yet
        return over_vocabulary(self.runner.model, self.runner.model.logits(self.root))

    def children(self, fed: Children) -> Float[Tensor, "batch beam vocab"]:
        """q's logits after each beam's newest token: one head forward, each token fed with the feature predicted
        at its beam's previous entry (the root for a child of x0)."""
        rows = torch.arange(fed.tokens.shape[0], device=fed.tokens.device)[:, None]
        known = torch.cat([self.root[:, None], self.predicted], dim=1)  # (batch, 1 + pending, hidden)
        features = known[rows, fed.previous + 1]  # (batch, beam, hidden): what each parent predicted
        predicted = self.runner.step(features, fed.tokens, fed.offsets, fed.sees)  # (batch, beam, hidden)
        self.predicted = torch.cat([self.predicted, predicted], dim=1)
        return over_vocabulary(self.runner.model, self.runner.model.logits(predicted))

    def keep(self, path: Int[Tensor, "batch kept"]) -> None:
        """Drop every beam entry: the head reads the accepted tokens with the target's own features next time."""
        self.runner.cache.crop(self.runner.cache.lengths)


#: q for beam drafting
Q = ModelQ | HeadQ


def beam_q(s: Session, draft: CausalLM | PreTrainedModel | EagleHead) -> Q:
    """q for this session: from a feature head (an `EagleHead`, reading the target's features) or a draft model."""
    return HeadQ(s, draft) if isinstance(draft, EagleHead) else ModelQ(s.draft_runner(draft))
