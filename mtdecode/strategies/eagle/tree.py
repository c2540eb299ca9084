"""EAGLE's token tree: grown with the copy grafted on (step 1), sized (step 2), and what its nodes showed."""

from dataclasses import dataclass

import torch
from einops import rearrange, repeat

from mtdecode import masks
from mtdecode.copying import Copy
from mtdecode.policy import TreePlan
from mtdecode.session import Session
from mtdecode.tensor_types import Bool, Float, Int, Tensor
from mtdecode.verification import padded
from mtdecode.zoo.eagle import HeadRunner


@dataclass(frozen=True)
class Tree:
    """Each row's nodes, parents first: `tokens`, `parent` (-1 at depth 1), `depth`; the head's `confidence` after
    the parent, the path `value` and the plan's `chance` (products from the root); each row's depth `limit`. The
    head's `head_nodes` come first, then the copy's (`graft`), then padding (value and chance -1); `copy`: a node's
    place on the copy (0 off it), `copy_chance`: the chance the copy holds to it (-1 off it); None without a copy."""

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


def grow_tree(
    s: Session,
    head: HeadRunner,
    root: Float[Tensor, "batch hidden"],
    depth: int,
    width: int,
    plan: TreePlan,
    copy: Copy | None = None,
) -> Tree:
    """Step 1: up to D depths of W nodes per row, each depth the best W children of the one before by path value. A
    row stops where the `plan` says another depth cannot pay (it adds at most the newest depth's chances; on the
    `copy` only what a node adds to the copy's) or its budget has no room; the head grows while any row does."""
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
    """Step 1, the copy: row b's copied tokens join its tree from x0, down the nodes that carry them, then below."""
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
    """Step 2: how many nodes each row verifies (the `plan`'s choice; 0 for a row not `active`), and each node's worth:
    its chance (on the copy at least the copy's), -1 for padding and below the row's depth `limit`."""
    worth = torch.where(tree.depth <= tree.limit[:, None], tree.chance, -1.0)
    if tree.copy is not None:  # a node on the copy is worth at least the copy's chance of holding to it
        worth = torch.maximum(worth, tree.copy_chance)
    n = plan.size(worth, torch.where(active, (worth >= 0).sum(1), 0))
    return torch.where(active, n, 0), worth


def head_guesses(tree: Tree, chosen: Int[Tensor, "batch n"], valid: Bool[Tensor, "batch n"]) -> Bool[Tensor, "batch n"]:
    """Which verified nodes teach the head's calibration: the head's own off the copy (one on the copy holds about
    as often as the copy does, which says nothing of the head's confidence; `docs/strategies/eagle.md`)."""
    head = valid & (chosen < tree.head_nodes)
    return head if tree.copy is None else head & ~on_the_copy(tree, chosen)


def on_the_copy(tree: Tree, chosen: Int[Tensor, "batch n"]) -> Bool[Tensor, "batch n"]:
    """Which of the `chosen` nodes carry their row's copied token (the tree must have a copy)."""
    return tree.copy.gather(1, chosen) > 0


def tried_nodes(
    tree: Tree, chosen: Int[Tensor, "batch n"], valid: Bool[Tensor, "batch n"], path: Int[Tensor, "batch depth"]
) -> tuple[Float[Tensor, "batch n"], Bool[Tensor, "batch n"], Bool[Tensor, "batch n"]] | None:
    """After step 4, what the head's guesses showed (None where no node was verified): its confidence in each
    verified node, whether it was tried (parent accepted; `head_guesses` only) and whether it was accepted."""
    n = chosen.shape[1]
    if n == 0:
        return None
    hit = torch.zeros(path.shape[0], n + 2, dtype=torch.bool, device=path.device)  # x0 at column 0, padding at n + 1
    hit[:, 0] = True
    hit.scatter_(1, torch.where(path >= 0, path + 1, n + 1), True)
    parent = tree.parent.gather(1, chosen)  # node indices
    slot = torch.searchsorted(chosen, parent.clamp(min=0))  # the parent's place among the chosen (parents first)
    parent_hit = torch.where(parent >= 0, hit.gather(1, slot + 1), True)
    tried = parent_hit & head_guesses(tree, chosen, valid)
    return tree.confidence.gather(1, chosen), tried, hit[:, 1 : n + 1]
