"""Attention masks over a committed prefix.

Every mask here has one row per token fed in this forward pass (`query`) and one
column per token the model can look at (`key`): first the `prefix` tokens already
in the KV cache, then the new tokens themselves. `True` means "may attend".

Each new token always sees the whole committed prefix; the builders differ only in
which *new* tokens it may also see.
"""

from collections.abc import Sequence

import torch

from mtdecode.tensor_types import Bool, Int, Tensor


def causal(num_new: int, prefix: int, device: torch.device | str | None = None) -> Bool[Tensor, "query key"]:
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


def tree(parents: Sequence[int], prefix: int, device: torch.device | str | None = None) -> Bool[Tensor, "query key"]:
    """Branches or a token tree over the prefix: each new token sees the prefix, its ancestors and itself.

    The new tokens are the nodes of a forest listed in topological order:
    `parents[i]` is the index of node `i`'s parent among the new tokens, or `-1`
    if node `i` hangs directly off the committed prefix. Several independent
    branches are several chains that each start with a `-1`.

    **Arguments:**

    - `parents`: one entry per new token, each `-1` or an index smaller than its own.
    - `prefix`: how many committed tokens the KV cache holds.
    - `device`: where to build the mask.

    **Returns:**

    A boolean mask of shape `(len(parents), prefix + len(parents))`.

    **Raises:**

    `ValueError` if a parent index is not `-1` or does not come before its child.
    """
    num_new = len(parents)
    _check_sizes(num_new, prefix)
    for i, parent in enumerate(parents):
        if not -1 <= parent < i:
            raise ValueError(
                f"parents[{i}] = {parent}: a parent must be -1 (the committed prefix) "
                f"or the index of an earlier new token (0..{i - 1})"
            )
    # Row i of `among_new` is row parents[i] plus the diagonal: ancestors accumulate down the tree.
    among_new = torch.eye(num_new, dtype=torch.bool, device=device)  # (query, new)
    for i, parent in enumerate(parents):
        if parent >= 0:
            among_new[i] |= among_new[parent]
    sees_prefix = torch.ones(num_new, prefix, dtype=torch.bool, device=device)  # (query, prefix)
    return torch.cat([sees_prefix, among_new], dim=1)


def tree_positions(
    parents: Sequence[int], prefix: int, device: torch.device | str | None = None
) -> Int[Tensor, " new"]:
    """Position ids for the nodes of a `tree`: a node at depth `d` (a root has depth 0) gets `prefix + d`.

    With these positions, a root-to-leaf path of the tree is numbered exactly as the
    same tokens would be in a plain left-to-right forward pass.
    """
    depth: list[int] = []
    for i, parent in enumerate(parents):
        if not -1 <= parent < i:
            raise ValueError(f"parents[{i}] = {parent}: expected -1 or an index below {i}")
        depth.append(0 if parent < 0 else depth[parent] + 1)
    return torch.tensor(depth, dtype=torch.long, device=device) + prefix


def chain_parents(num_new: int) -> list[int]:
    """`parents` of a single left-to-right chain: `[-1, 0, 1, ..., num_new - 2]`.

    `tree(chain_parents(n), prefix)` equals `causal(n, prefix)`.
    """
    return list(range(-1, num_new - 1))


def _check_sizes(num_new: int, prefix: int) -> None:
    if num_new < 1:
        raise ValueError(f"a mask needs at least one new token, got num_new={num_new}")
    if prefix < 0:
        raise ValueError(f"prefix must be >= 0, got {prefix}")
