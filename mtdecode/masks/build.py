"""Attention masks over a committed prefix.

Every mask here has one row per token fed in this forward pass (`query`) and one
column per token the model can look at (`key`): first the `prefix` tokens already
in the KV cache, then the new tokens themselves. `True` means "may attend".

Each new token always sees the whole committed prefix; the builders differ only in
which *new* tokens it may also see. With `prefix=0` (the default) a builder gives just
that part, the structure among the new tokens, which is what `Runner.forward` takes:
in a batch, rows hold different numbers of committed tokens, and the runner places
the structure after each row's own (`docs/concepts/masks.md`, "Batches").
"""

from collections.abc import Sequence

import torch
from einops import repeat

from mtdecode.tensor_types import Bool, Int, Tensor


def causal(num_new: int, prefix: int = 0, device: torch.device | str | None = None) -> Bool[Tensor, "query key"]:
    """The ordinary left-to-right mask: new token `i` sees the prefix and new tokens `0..i`.

    **Arguments:**

    - `num_new`: how many tokens are fed in this forward pass (at least 1).
    - `prefix`: how many committed tokens the KV cache holds.
    - `device`: where to build the mask (the model's device).

    **Returns:**

    A boolean mask of shape `(num_new, prefix + num_new)`.
    """
    _check_sizes(num_new, prefix)
    # query i sits at column prefix + i; it sees every column up to and including its own.
    rows = torch.arange(num_new, device=device)[:, None]  # (query, 1)
    cols = torch.arange(prefix + num_new, device=device)[None, :]  # (1, key)
    return cols <= rows + prefix


def tree(
    parents: Sequence[int] | Int[Tensor, "*batch new"], prefix: int = 0, device: torch.device | str | None = None
) -> Bool[Tensor, "*batch query key"]:
    """Branches or a token tree over the prefix: each new token sees the prefix, its ancestors and itself.

    The new tokens are the nodes of a forest listed in topological order:
    `parents[i]` is the index of node `i`'s parent among the new tokens, or `-1`
    if node `i` hangs directly off the committed prefix. Several independent
    branches are several chains that each start with a `-1`. A 2-D tensor of
    parents gives one forest per batch row (MTAD's beams differ from row to row).

    **Arguments:**

    - `parents`: one entry per new token, each `-1` or an index smaller than its own.
    - `prefix`: how many committed tokens the KV cache holds.
    - `device`: where to build the mask.

    **Returns:**

    A boolean mask of shape `(len(parents), prefix + len(parents))`, with a leading batch axis
    if `parents` has one.

    **Raises:**

    `ValueError` if a parent index is not `-1` or does not come before its child.
    """
    parents, batched = _parents(parents, device)  # (batch, new)
    batch, num_new = parents.shape
    _check_sizes(num_new, prefix)
    # Row i of `among_new` is row parents[i] plus the diagonal: ancestors accumulate down the tree.
    eye = torch.eye(num_new, dtype=torch.bool, device=parents.device)
    among_new = repeat(eye, "query new -> batch query new", batch=batch).clone()  # a copy: its rows are written
    rows = torch.arange(batch, device=parents.device)
    for i in range(num_new):
        has_parent = parents[:, i] >= 0
        inherited = among_new[rows, parents[:, i].clamp(min=0)] & has_parent[:, None]  # (batch, new)
        among_new[:, i] |= inherited
    sees_prefix = torch.ones(batch, num_new, prefix, dtype=torch.bool, device=parents.device)  # (batch, query, prefix)
    mask = torch.cat([sees_prefix, among_new], dim=2)
    return mask if batched else mask[0]


def tree_positions(
    parents: Sequence[int] | Int[Tensor, "*batch new"], prefix: int = 0, device: torch.device | str | None = None
) -> Int[Tensor, "*batch new"]:
    """Position ids for the nodes of a `tree`: a node at depth `d` (a root has depth 0) gets `prefix + d`.

    With these positions, a root-to-leaf path of the tree is numbered exactly as the
    same tokens would be in a plain left-to-right forward pass.
    """
    parents, batched = _parents(parents, device)
    depth = torch.zeros_like(parents)
    rows = torch.arange(parents.shape[0], device=parents.device)
    for i in range(parents.shape[1]):
        has_parent = parents[:, i] >= 0
        depth[:, i] = torch.where(has_parent, depth[rows, parents[:, i].clamp(min=0)] + 1, 0)
    positions = depth + prefix
    return positions if batched else positions[0]


def _parents(parents, device) -> tuple[Int[Tensor, "batch new"], bool]:
    """Parents as a (batch, new) tensor, checked, and whether they came with a batch axis."""
    tensor = torch.as_tensor(parents, dtype=torch.long, device=device)
    batched = tensor.ndim == 2
    tensor = tensor if batched else tensor[None]
    own = torch.arange(tensor.shape[1], device=tensor.device)
    bad = ((tensor < -1) | (tensor >= own)).nonzero()
    if bad.numel():
        row, i = bad[0].tolist()
        raise ValueError(
            f"parents[{i}] = {int(tensor[row, i])}: a parent must be -1 (the committed prefix) "
            f"or the index of an earlier new token (0..{i - 1})"
        )
    return tensor, batched


def _check_sizes(num_new: int, prefix: int) -> None:
    if num_new < 1:
        raise ValueError(f"a mask needs at least one new token, got num_new={num_new}")
    if prefix < 0:
        raise ValueError(f"prefix must be >= 0, got {prefix}")
