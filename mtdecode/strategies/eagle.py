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
from einops import rearrange, repeat

from mtdecode import masks
from mtdecode.copying import Copy, copy_alone, find_copies
from mtdecode.policy import Adaptive, Fixed, TreePlan, fixed_or
from mtdecode.policy.records import CopyRecord
from mtdecode.session import Session, Step
from mtdecode.strategy import check_counts
from mtdecode.tensor_types import Bool, Float, Int, Tensor
from mtdecode.verification import Verdict, kept_parents, padded, root_to_leaf, verify_fed, verify_logits
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
            plan.record(n, verdict.accepted, tree.limit, partial(tried_nodes, s, tree, chosen, valid, path))
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


@dataclass(frozen=True)
class Tree:
    """Each row's drafted nodes, in the order they were made (depth by depth, so parents come first): the node's
    `tokens`, `parent` (-1 at depth 1) and `depth`; the head's `confidence` in it after its parent and the path
    `value` (their product from the root); each row's depth `limit` (where growing stopped paying); the node's
    `chance` of acceptance (the product of the plan's calibrated confidences from the root: the path value for a
    fixed tree). The head's nodes are the first `head_nodes`, then the copy's new nodes (`graft`), then padding
    (value and chance -1); `copy`: the node's place on the copy (0 off it) and `copy_chance`: the chance that the
    copy holds to it (-1 off it), both None without a copy."""

    tokens: Int[Tensor, "batch node"]
    parent: Int[Tensor, "batch node"]
    depth: Int[Tensor, "batch node"]
    confidence: Float[Tensor, "batch node"]
    value: Float[Tensor, "batch node"]
    limit: Int[Tensor, " batch"]
    chance: Float[Tensor, "batch node"]
    head_nodes: int = 0
    copy: Int[Tensor, "batch node"] | None = None
    copy_chance: Float[Tensor, "batch node"] | None = None


def rest_step(s: Session, head: HeadRunner) -> tuple[list[Step], list[Float[Tensor, "_fed hidden"]]]:
    """A step with no tree: one target forward over each row's unread tokens (the prompt at first, then x0), its
    token (`plain_token`), and, row by row, the target's features at the tokens it fed, which the head reads when
    it drafts again (`read_features`); the head does no work meanwhile (`Session.resting`)."""
    s.resting.add(id(head))
    unread = s.unread(s.target)
    fed = [len(row) for row in unread]
    logits, features = s.target.extend_features(unread, logits_to_keep=1)
    s.target.cache.commit()
    width = features.shape[1]  # left padded: row b's real tokens are its last fed[b]
    return s.commit(plain_token(s, logits[:, -1]), 1), [features[b, width - n :] for b, n in enumerate(fed)]


def grow_tree(
    s: Session,
    head: HeadRunner,
    root: Float[Tensor, "batch hidden"],
    depth: int,
    width: int,
    plan: TreePlan,
    copy: Copy | None = None,
) -> Tree:
    """Step 1: up to D depths of W nodes per row, each depth the best W children of the one before by path value.

    A row's tree stops growing where the `plan` says another depth cannot pay (`Tree.limit`; another depth adds at
    most the newest depth's chances, and on the `copy` only what a node adds to the copy's), or where its budget
    has no room (`Session.budget`). The head grows while any row does; a row that stopped ignores the rest."""
    model = head.model
    batch, device = s.batch, s.device
    rows = torch.arange(batch, device=device)[:, None]
    with torch.no_grad():
        q = torch.softmax(model.logits(root).double(), dim=-1)  # (batch, head tokens)
    value, index = q.topk(width, dim=1)  # depth 1: (batch, W)
    tokens = model.head_token_ids[index]
    parent = torch.full((batch, width), -1, dtype=torch.long, device=device)
    fed = repeat(root, "batch hidden -> batch frontier hidden", frontier=width)  # what each frontier node is fed
    levels = [(tokens, parent, value, value)]
    chance = plan.calibrated(value)  # (batch, W): P(accepted), depth 1
    chances = [chance]
    on_copy = None if copy is None else copy.follows(tokens, 1)  # (batch, W): the path is the copy's start
    limit = torch.full((batch,), depth, dtype=torch.long, device=device)  # each row's last useful depth
    room = s.budget(depth)  # the deepest guess a row's budget can still take (0 at its last token)
    entries = torch.empty(batch, 0, dtype=torch.long, device=device)  # the head's pending entries' parents
    frontier_entry = torch.full((batch, width), -1, dtype=torch.long, device=device)  # parents' entries
    for d in range(2, depth + 1):
        gain = chance if on_copy is None else torch.where(on_copy, chance - copy.holds_at(d - 1), chance)
        expected = 1 + sum(level.clamp(min=0).sum(1) for level in chances)  # the tree so far, every node verified
        growing = s.active & (limit == depth) & (room >= d)
        pays = plan.grows(d, (d - 1) * width, gain.clamp(min=0).sum(1), expected, growing)
        limit = torch.where((limit == depth) & ~pays, d - 1, limit)
        if not bool(((limit == depth) & (room >= d)).any()):  # no row grows this deep, or has room for it
            break
        frontier = repeat(torch.arange(width, device=device), "frontier -> batch frontier", batch=batch)
        new_entries = entries.shape[1] + frontier  # the head's entries for this depth's nodes
        entries = torch.cat([entries, frontier_entry], dim=1)
        sees = masks.tree(entries)[:, -width:]  # (batch, W, pending + W)
        offsets = masks.tree_positions(entries)[:, -width:]  # depth - 2 below the committed entries
        predicted = head.step(fed, tokens, offsets, sees)  # (batch, W, hidden): each frontier node's next feature
        with torch.no_grad():
            q = torch.softmax(model.logits(predicted).double(), dim=-1)  # (batch, W, head tokens)
        scores = rearrange(value[:, :, None] * q, "batch frontier token -> batch (frontier token)")  # path values
        value, pick = scores.topk(width, dim=1)
        confidence = rearrange(q, "batch frontier token -> batch (frontier token)").gather(1, pick)
        chosen, index = pick // q.shape[-1], pick % q.shape[-1]  # (frontier token) undone: the parent, the token
        tokens = model.head_token_ids[index]
        parent = (d - 2) * width + chosen  # node index of the parent (depth d - 1 starts at (d - 2) W)
        fed = predicted[rows, chosen]
        frontier_entry = new_entries[rows, chosen]
        levels.append((tokens, parent, confidence, value))
        chance = plan.calibrated(confidence) * chance.gather(1, chosen)  # P(accepted | parent's), times the parent's
        chances.append(chance)
        if on_copy is not None:
            on_copy = on_copy.gather(1, chosen) & copy.follows(tokens, d)
    head.cache.crop(head.cache.lengths)  # the tree's entries go: the next step feeds the target's real features
    limit = torch.minimum(limit, room)
    level_depth = [torch.full((batch, width), d + 1, dtype=torch.long, device=device) for d in range(len(levels))]
    tokens, parent, confidence, value = (torch.cat(parts, dim=1) for parts in zip(*levels, strict=True))
    chance = torch.cat(chances, dim=1)
    return Tree(tokens, parent, torch.cat(level_depth, dim=1), confidence, value, limit, chance, tokens.shape[1])


def graft(tree: Tree, copy: Copy) -> Tree:
    """Step 1, the copy: row b's copied tokens join its tree as a branch from x0. The copy follows the tree while a
    node carries its next token (siblings never share a token, so there is one such node at most); the rest of it
    hangs below as new nodes. The copy's token i is worth the chance that tokens 1..i hold (`Copy.holds`), which
    falls along the copy: a node's worth stays at most its parent's."""
    batch, drafted = tree.tokens.shape
    tokens, parent, depth = tree.tokens.tolist(), tree.parent.tolist(), tree.depth.tolist()
    place = [[0] * drafted for _ in range(batch)]  # the node's place on the copy
    for b, copied in enumerate(copy.tokens):
        node, follows = -1, 0  # the node the copy has reached (-1: x0), and how many of its tokens the tree holds
        for token in copied:
            child = [j for j in range(drafted) if parent[b][j] == node and tokens[b][j] == token]
            if not child:
                break
            node, follows = child[0], follows + 1
            place[b][node] = follows
        for i in range(follows, len(copied)):  # the copy's own nodes, each below the one before
            tokens[b].append(copied[i])
            parent[b].append(node)
            depth[b].append(depth[b][node] + 1 if node >= 0 else 1)
            place[b].append(i + 1)
            node = len(tokens[b]) - 1
    width = max(map(len, tokens))
    device = tree.tokens.device
    places = padded(place, device, fill=0)
    copy_chance = torch.full((batch, width), -1.0, dtype=torch.float64, device=device)
    if copy.holds.shape[1]:
        copy_chance = torch.where(places > 0, copy.holds.gather(1, (places - 1).clamp(min=0)), copy_chance)
    extra = width - drafted

    def extended(values: Float[Tensor, "batch drafted"], pad: float) -> Float[Tensor, "batch grafted"]:
        return torch.cat([values, values.new_full((batch, extra), pad)], dim=1)

    padding = (torch.arange(width, device=device) >= drafted) & (places == 0)
    return Tree(
        tokens=padded(tokens, device, fill=0),
        parent=padded(parent, device),
        depth=padded(depth, device, fill=1),
        confidence=extended(tree.confidence, 0.0),
        value=torch.where(padding, -1.0, extended(tree.value, 0.0)),
        limit=tree.limit,
        chance=torch.where(padding, -1.0, extended(tree.chance, 0.0)),
        head_nodes=drafted,
        copy=places,
        copy_chance=copy_chance,
    )


def copy_outcome(
    tree: Tree, chosen: Int[Tensor, "batch n"], valid: Bool[Tensor, "batch n"], path: Int[Tensor, "batch depth"]
) -> tuple[Int[Tensor, " batch"], Int[Tensor, " batch"]]:
    """After step 4, for the row's `CopyRecord`: how many of the copy's tokens were verified and how many held."""
    on_copy = on_the_copy(tree, chosen)  # (batch, n)
    verified = (on_copy & valid).sum(1)
    accepted = ((path >= 0) & on_copy.gather(1, path.clamp(min=0))).sum(1)
    return verified.cpu(), accepted.cpu()


def tree_size(
    active: Bool[Tensor, " batch"], tree: Tree, plan: TreePlan
) -> tuple[Int[Tensor, " batch"], Float[Tensor, "batch node"]]:
    """Step 2: how many nodes each row verifies (the `plan`'s choice; 0 for a row not `active`), and the worth by
    which its best are chosen: each node's chance of acceptance (`Tree.chance`), and on the copy (cut to the row's
    budget) at least the copy's chance of holding to the node. Padding, and a head's node below the row's depth
    limit (`Tree.limit`: where growing stopped paying, or past what the row's budget has room for), is worth -1 and
    never counts."""
    worth = torch.where(tree.depth <= tree.limit[:, None], tree.chance, -1.0)
    if tree.copy is not None:  # a node on the copy is worth at least the copy's chance of holding to it
        worth = torch.maximum(worth, tree.copy_chance)
    n = plan.size(worth, torch.where(active, (worth >= 0).sum(1), 0))
    return torch.where(active, n, 0), worth


def head_guesses(tree: Tree, chosen: Int[Tensor, "batch n"], valid: Bool[Tensor, "batch n"]) -> Bool[Tensor, "batch n"]:
    """Which verified nodes teach the head's calibration (`tried_nodes`): the head's own, and with a copy only those
    off it: a node on the copy is accepted about as often as the copy holds, which says nothing of the head's
    confidence (counted, they overrate the head's nodes off the copy; `docs/strategies/eagle.md`)."""
    head = valid & (chosen < tree.head_nodes)
    return head if tree.copy is None else head & ~on_the_copy(tree, chosen)


def on_the_copy(tree: Tree, chosen: Int[Tensor, "batch n"]) -> Bool[Tensor, "batch n"]:
    """Which of the `chosen` nodes carry their row's copied token (`Tree.copy`: a place on the copy); the tree must
    have a copy."""
    return tree.copy.gather(1, chosen) > 0


def tried_nodes(
    s: Session,
    tree: Tree,
    chosen: Int[Tensor, "batch n"],
    valid: Bool[Tensor, "batch n"],
    path: Int[Tensor, "batch depth"],
) -> tuple[Float[Tensor, "batch n"], Bool[Tensor, "batch n"], Bool[Tensor, "batch n"]] | None:
    """After step 4, what the head's guesses showed, for a policy to calibrate the head's probabilities by (None where
    no node was verified): its confidence in each verified node, whether the node was tried (its parent accepted, or
    it hangs off x0; `head_guesses` only) and whether it was accepted."""
    n = chosen.shape[1]
    if n == 0:
        return None
    hit = torch.zeros(s.batch, n + 2, dtype=torch.bool, device=s.device)  # x0 at column 0, padding at n + 1
    hit[:, 0] = True
    hit.scatter_(1, torch.where(path >= 0, path + 1, n + 1), True)
    parent = tree.parent.gather(1, chosen)  # node indices
    slot = torch.searchsorted(chosen, parent.clamp(min=0))  # the parent's place among the chosen (parents first)
    parent_hit = torch.where(parent >= 0, hit.gather(1, slot + 1), True)
    tried = parent_hit & head_guesses(tree, chosen, valid) & s.active[:, None]
    return tree.confidence.gather(1, chosen), tried, hit[:, 1 : n + 1]


def best_nodes(worth: Float[Tensor, "batch node"], n: int) -> tuple[Int[Tensor, "batch n"], Int[Tensor, "batch n"]]:
    """Each row's `n` worthiest nodes, in the order they were made (parents first), and each one's rank by worth;
    ties go to the earlier node, so a child (never worth more than its parent) never comes in without its parent,
    and a row's best k < n are the chosen nodes of rank below k."""
    return worth.argsort(dim=1, descending=True, stable=True)[:, :n].sort(dim=1)


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
        none = torch.zeros_like(s.last_tokens)
        verdict = Verdict(none - 1, none, plain_token(s, logits[:, 0]))
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


def plain_token(s: Session, logits: Float[Tensor, "batch vocab"]) -> Int[Tensor, "batch 1"]:
    """The first step's token: the target's own (its argmax when greedy), drawn by the shared rule with no
    candidates, so the random streams are used as every strategy's first step uses them."""
    none = torch.empty(s.batch, 0, 0, dtype=torch.long, device=s.device)  # (batch, candidate, length): no candidate
    after = logits.new_empty(s.batch, 0, 0, logits.shape[-1])  # and no logits after one
    return verify_logits(s.sampler, logits, after, none, s.random, s.active).tokens


__all__ = ["Eagle", "Tree", "grow_tree", "tree_size", "verify_tree"]
