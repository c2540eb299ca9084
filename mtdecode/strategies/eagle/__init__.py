"""EAGLE: feature-level drafting with a token tree (Li et al., 2024; the tree grows as in EAGLE-2).

A small head (`mtdecode.zoo.eagle.EagleHead`) drafts from the target's own top hidden states, its features f_t:
the head's entry at position t reads (f_t, x_{t+1}) and predicts f_{t+1}, and the target's output rows turn a
predicted feature into a distribution over the head's tokens. One step, for every row of the batch at once:

1. draft:  from the head's prediction for x0's position, grow a tree depth by depth: at depth 1 the head's top W
           tokens; at each further depth one head forward over the W newest nodes, and the W best children of all
           of them by path value (the product of the head's probabilities from the root), as EAGLE-2 expands;
   copy:   with `lookup` on, prompt lookup's copy joins the tree as one more branch from x0 (`graft`): answers
           that quote accept long copies, deeper than the head's few depths reach;
2. size:   rank every node by its worth (its chance of acceptance as the policy estimates it; the path value for
           a fixed tree; on the copy at least the chance that the copy holds that far) and keep the best N, a
           subtree, since a child is never worth more than its parent;
3. verify: one target forward over x0 and the N nodes with the tree mask (`mtdecode.masks.tree`), which also
           returns the target's features;
4. accept: every root-to-leaf path is a candidate of the one-hot multi-candidate rule (`mtdecode.verification`):
           exactly greedy decoding at temperature 0, exactly p when sampling;
5. commit: the target's cache keeps x0 and the accepted nodes; the head reads the new entries (f_t, x_{t+1}) with
           the target's real features, which gives its prediction for the next step's root.

`tree_size=N` verifies the N best nodes every step (the paper's fixed tree); else the policy sizes the tree and,
for a batch, may rest: plain steps in which the head does no work and the target's features wait in a `Backlog`
until the head reads them in one forward (`mtdecode.policy`). The first step is a plain one over the prompts.
"""

import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import ClassVar

import torch

from mtdecode import masks
from mtdecode.copying import copy_alone, find_copies
from mtdecode.policy import Adaptive, Fixed, fixed_or
from mtdecode.policy.records import CopyRecord
from mtdecode.session import Session, Step
from mtdecode.strategies.eagle.tree import Tree, copy_outcome, graft, grow_tree, tree_size, tried_nodes
from mtdecode.strategy import check_counts
from mtdecode.tensor_types import Bool, Float, Int, Tensor
from mtdecode.verification import Verdict, best_nodes, kept_parents, root_to_leaf, verify_fed, verify_nothing
from mtdecode.zoo.eagle import TREE_WIDTH, Backlog, EagleHead, HeadRunner, head_runner, read_features, shipped_head


@dataclass(frozen=True)
class Eagle:
    """Draft a token tree with a feature-level head, verify it in one target forward.

    **Arguments:**

    - `head`: an `EagleHead` trained for the target at hand (same hidden size, vocabulary and device); None (the
      default): the head shipped for SmolLM2-135M-Instruct, `load_model("smollm2-135m-eagle")` (its int8 form:
      `quantize="int8"`), which fits no other model.
    - `depth`: D, the tree's greatest depth (at least 1).
    - `width`: W, nodes kept per depth (top-W children; at least 1).
    - `tree_size`: a fixed number of verified nodes N (at most D x W; `mtdecode.policy.Fixed`); None (the default):
      as many as `policy` decides (step 2).
    - `lookup`: copy up to this many tokens as prompt lookup does, as one more branch of the tree (10, the
      default; 0: no copy, the head's tree alone).
    - `ngram`: the longest n-gram the copy matches (shorter ones are tried if it has none).
    - `policy`: how deep to grow the tree and how many nodes to verify when N is not given (`mtdecode.policy`);
      `Adaptive()` by default, on this host's measured costs, or on those given to it.
    """

    head: EagleHead | None = None
    depth: int = 5
    width: int = TREE_WIDTH
    tree_size: int | None = None
    lookup: int = 10
    ngram: int = 3
    policy: Adaptive | Fixed = Adaptive()
    #: output identical to greedy decoding at temperature 0, distributed as p when sampling
    exact: ClassVar[bool] = True

    def __post_init__(self) -> None:
        check_counts(self, ("depth", "width", "tree_size", "ngram"), optional=["tree_size"])
        if isinstance(self.lookup, bool) or not isinstance(self.lookup, int) or self.lookup < 0:
            raise ValueError(f"lookup must be an integer >= 0 (0: no copy), got {self.lookup!r}")
        if self.head is not None and not isinstance(self.head, EagleHead):
            raise TypeError(f"head must be an mtdecode.zoo.eagle.EagleHead, got {type(self.head).__name__}")
        if self.tree_size is not None and self.tree_size > self.depth * self.width:
            raise ValueError(f"tree_size ({self.tree_size}) must be at most depth x width ({self.depth * self.width})")

    def decode(self, s: Session) -> Iterator[list[Step]]:
        head = head_runner(s, self.head if self.head is not None else shipped_head(s.target.model))
        plan = fixed_or(self.tree_size, self.policy).tree(
            s, head, depth=self.depth, width=self.width, lookup=self.lookup, timed=self.with_fixed_tree(head.model)
        )
        record = CopyRecord(s.batch) if self.lookup else None  # L / (L + 2) as prior (docs/strategies/eagle.md)
        unread = Backlog(s.batch)  # the target's features that the head has not read yet
        steps, fresh = rest_step(s, head)  # the first step: a plain forward over the prompts, read when drafting
        unread.add(fresh)
        yield steps
        root = None  # each row's head prediction for its newest position, once the head has read its features
        while not s.done:
            copy = None if record is None else find_copies(s, self.lookup, self.ngram, record)  # step 1, the copy
            if plan.rests(*copy_alone(copy, s.active), max(unread.sizes)):  # nothing would pay for the head's work
                steps, fresh = rest_step(s, head)  # a plain step; the head reads its features when drafting resumes
                unread.add(fresh)
                yield steps
                continue
            if unread.waiting:  # the head catches up on the steps it rested, in one forward
                root = read_features(s, head, unread.take(), root)
                s.resting.discard(id(head))
            tree = grow_tree(s, head, root, self.depth, self.width, plan, copy)  # step 1
            if copy is not None:
                tree = graft(tree, copy)
            n, worth = tree_size(s.active, tree, plan)  # step 2
            chosen, rank = best_nodes(worth, int(n.max()))  # the widest row's; row b verifies its best n[b]
            valid = rank < n[:, None]
            verdict, path, features = verify_tree(s, tree, chosen, valid)  # steps 3 and 4
            steps = commit(s, verdict, path, n)  # step 5
            going = valid & s.active[:, None]  # the verified nodes of rows that are still decoding
            plan.record(n, verdict.accepted, tree.limit, partial(tried_nodes, tree, chosen, going, path))
            if record is not None:
                record.add(*copy_outcome(tree, chosen, valid, path), copy.matched)
            rows = torch.arange(s.batch, device=s.device)[:, None]
            fresh = features[rows, torch.cat([path.new_zeros(path.shape[0], 1), path + 1], dim=1).clamp(min=0)]
            fresh = [fresh[b, : int(a) + 1] for b, a in enumerate(verdict.accepted)]
            if plan.rests_after(n):  # no row verified a node: the batch rests from here, the head reads nothing
                s.resting.add(id(head))
                unread.add(fresh)
            else:
                root = read_features(s, head, fresh, root)
            yield steps

    def with_fixed_tree(self, head: EagleHead) -> Callable[[int, int], "Eagle"]:
        """This strategy with a fixed tree of the given depth and size, for a policy that times its steps."""
        return lambda depth, nodes: dataclasses.replace(self, head=head, depth=depth, tree_size=nodes)


def rest_step(s: Session, head: HeadRunner) -> tuple[list[Step], list[Float[Tensor, "_fed hidden"]]]:
    """A step with no tree: one target forward over each row's unread tokens (the prompt at first, then x0), its
    token (`verify_nothing`), and, row by row, the target's features at the tokens it fed, which the head reads when
    it drafts again (`read_features`); the head does no work meanwhile (`Session.resting`)."""
    s.resting.add(id(head))
    unread = s.unread(s.target)
    fed = [len(row) for row in unread]
    logits, features = s.target.extend_features(unread, logits_to_keep=1)
    s.target.cache.commit()
    width = features.shape[1]  # left padded: row b's real tokens are its last fed[b]
    token = verify_nothing(s.sampler, logits[:, -1], s.random, s.active).tokens  # (batch, 1)
    return s.commit(token, 1), [features[b, width - n :] for b, n in enumerate(fed)]


def verify_tree(
    s: Session, tree: Tree, chosen: Int[Tensor, "batch n"], valid: Bool[Tensor, "batch n"]
) -> tuple[Verdict, Int[Tensor, "batch depth"], Float[Tensor, "batch fed hidden"]]:
    """Steps 3 and 4: one target forward over x0 and the `chosen` nodes; the multi-candidate rule over the
    root-to-leaf paths of each row's `valid` ones (the others only pad a row's forward to the batch's shape: no
    valid node sees them, and none is a candidate).

    **Returns:** the verdict, the accepted path as indices among the fed nodes (-1 past the accepted ones), and
    the target's features at x0 and every fed node."""
    batch, device = s.batch, s.device
    rows = torch.arange(batch, device=device)[:, None]
    n = chosen.shape[1]
    parent = kept_parents(tree.parent, chosen)  # (batch, n): each kept node's parent among the kept
    tokens = tree.tokens.gather(1, chosen)
    # step 3: x0 is node 0 of the fed tree, the kept nodes follow it
    fed_parents = torch.cat([torch.full((batch, 1), -1, device=device), parent + 1], dim=1)  # (batch, 1 + n)
    fed = torch.cat([s.last_tokens[:, None], tokens], dim=1)
    logits, features = s.target.forward_features(fed, masks.tree_positions(fed_parents), masks.tree(fed_parents))
    if n == 0:  # a plain step
        verdict = verify_nothing(s.sampler, logits[:, 0], s.random, s.active)
        return verdict, torch.empty(batch, 0, dtype=torch.long, device=device), features
    paths = root_to_leaf(parent, tree.depth.gather(1, chosen), valid)  # step 4: (batch, leaves, longest)
    longest = paths.shape[2]
    candidates = torch.where(paths >= 0, tokens[rows[:, :, None], paths.clamp(min=0)], -1)
    after_at = paths.clamp(min=0) + 1  # (batch, leaves, longest): the fed position after each path's node
    verdict = verify_fed(s.sampler, logits, after_at, candidates, s.random, s.active)
    path = paths[torch.arange(batch, device=device), verdict.candidate.clamp(min=0)]  # (batch, longest)
    accepted = torch.arange(longest, device=device) < verdict.accepted[:, None]
    return verdict, torch.where(accepted & (verdict.candidate >= 0)[:, None], path, -1), features


def commit(s: Session, verdict: Verdict, path: Int[Tensor, "batch depth"], n: Int[Tensor, " batch"]) -> list[Step]:
    """Step 5 for the target: its cache keeps x0 and the accepted nodes, then the tokens are committed."""
    kept = torch.cat([path.new_zeros(path.shape[0], 1), torch.where(path >= 0, path + 1, -1)], dim=1)
    s.target.cache.keep(kept)
    return s.commit(verdict.tokens, verdict.accepted + 1, drafted=n, accepted=verdict.accepted)


__all__ = ["Eagle", "Tree", "grow_tree", "tree_size", "verify_tree"]
