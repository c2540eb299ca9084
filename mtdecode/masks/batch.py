"""The mask of one forward pass over a batch whose rows hold different numbers of cached tokens.

In a batch, one KV-cache column need not hold an entry in every row: a row with a shorter
prompt, or one that accepted fewer guesses in an earlier step, has **holes** there
(`KVCache.valid` is False). A strategy describes only the structure among the tokens it
feeds (`masks.causal`, `masks.tree`, `LookaheadLayout.mask`, all with no prefix), the same
for every row or one per row; `place` turns it into each row's full mask:

- every query sees its row's committed entries, holes excepted;
- among the pending entries and the new tokens it sees what the structure allows, holes
  and padding excepted;
- every token sees itself (padding too, so that no row of the softmax is empty).

`mtdecode masks batch` draws an example, one panel per row (docs/concepts/masks.md, "Batches").
"""

import torch
from einops import rearrange

from mtdecode.tensor_types import Bool, Tensor


def place(
    sees: Bool[Tensor, "... new seen"],
    valid: Bool[Tensor, "batch columns"],
    committed: int,
    real: Bool[Tensor, "batch new"],
) -> Bool[Tensor, "batch new key"]:
    """Each row's full mask over its cache columns and the new tokens.

    **Arguments:**

    - `sees`: the structure among the pending columns and the new tokens (`seen` = pending + new),
      shared by every row or one per row.
    - `valid`: which cache columns hold an entry of each row (`KVCache.valid`).
    - `committed`: how many leading cache columns are committed (`KVCache.committed`).
    - `real`: which new tokens are not padding.

    **Returns:**

    `(batch, new, columns + new)`.
    """
    batch, num_new = real.shape
    columns = valid.shape[1]
    if sees.shape[-1] != columns - committed + num_new:
        raise ValueError(
            f"sees covers {sees.shape[-1]} columns; expected pending + new = {columns - committed} + {num_new}"
        )
    visible = rearrange(torch.cat([valid, real], dim=1), "batch key -> batch 1 key")  # holes and padding hidden
    prefix = torch.ones(batch, num_new, committed, dtype=torch.bool, device=real.device)  # (batch, new, committed)
    shared = sees.expand(batch, -1, -1)  # `sees` is (new, seen) for every row or (batch, new, seen): expand takes both
    mask = torch.cat([prefix, shared], dim=2) & visible  # (batch, new, columns + new)
    mask[:, :, columns:] |= torch.eye(num_new, dtype=torch.bool, device=real.device)  # each token sees itself
    return mask
