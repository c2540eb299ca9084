"""The KV-cache manager: one per model per `generate` call.

The cache holds one key and one value tensor per layer, each of shape
`(batch, kv_heads, length, head_dim)`. Its entries come in two parts:

- the **committed** entries, `[0, committed)`: tokens known to be part of the output;
- the **pending** entries, `[committed, length)`: what forward passes appended since,
  guesses that the strategy has not yet accepted or rejected.

A strategy resolves the pending part with one of three operations:

- `commit()`: every pending entry is accepted (plain decoding);
- `crop(length)`: keep the first `length` entries, drop the rest (reject the tail
  of a draft; also rolls back committed entries if `length < committed`);
- `keep(indices)`: keep the listed pending entries, in that order, right after the
  committed ones (compaction after a branch or a tree was verified in one pass).

After any of them, every entry is committed again.
"""

from collections.abc import Sequence

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from mtdecode.tensor_types import Int, Tensor


class KVCache:
    """Keys and values of one model, with their committed length.

    Wraps a transformers `DynamicCache` (passed to the model as `past_key_values`)
    and edits its layers in place.
    """

    def __init__(self) -> None:
        self.hf_cache = DynamicCache()
        self.committed = 0

    @property
    def length(self) -> int:
        """Number of entries held, committed or pending."""
        return self.hf_cache.get_seq_length()

    @property
    def pending(self) -> int:
        """Number of entries appended since the last `commit`, `crop` or `keep`."""
        return self.length - self.committed

    def commit(self) -> None:
        """Accept every pending entry."""
        self.committed = self.length

    def crop(self, length: int) -> None:
        """Keep the first `length` entries and drop the rest; all kept entries become committed.

        **Raises:** `ValueError` if `length` is negative or larger than `self.length`.
        """
        if not 0 <= length <= self.length:
            raise ValueError(f"cannot crop a cache of {self.length} entries to {length}")
        for layer in self._layers():
            layer.keys = layer.keys[..., :length, :]
            layer.values = layer.values[..., :length, :]
        self.committed = length

    def keep(self, indices: Sequence[int] | Int[Tensor, " kept"]) -> None:
        """Keep only the pending entries at `indices` (0 = first pending entry), in that order.

        The kept entries move right after the committed ones and become committed;
        every other pending entry is dropped. Their keys carry the positions they were
        computed with, so `indices` should list a path whose positions continue the
        committed prefix (`mtdecode.masks.tree_positions` numbers a tree that way).

        **Raises:** `ValueError` if an index is outside `[0, pending)` or repeats.
        """
        index = torch.as_tensor(indices, dtype=torch.long).reshape(-1).cpu()
        if index.numel() and (index.min() < 0 or index.max() >= self.pending):
            raise ValueError(f"keep({index.tolist()}): indices must lie in [0, {self.pending})")
        if index.unique().numel() != index.numel():
            raise ValueError(f"keep({index.tolist()}): indices repeat")
        start = self.committed
        for layer in self._layers():
            # (batch, heads, committed, dim) ++ (batch, heads, kept, dim)
            picked = index.to(layer.keys.device) + start
            layer.keys = torch.cat([layer.keys[..., :start, :], layer.keys[..., picked, :]], dim=-2)
            layer.values = torch.cat([layer.values[..., :start, :], layer.values[..., picked, :]], dim=-2)
        self.committed = start + index.numel()

    def _layers(self) -> list[DynamicLayer]:
        layers = self.hf_cache.layers
        for i, layer in enumerate(layers):
            if type(layer) is not DynamicLayer:
                raise TypeError(
                    f"cache layer {i} is a {type(layer).__name__}; mtdecode edits only full "
                    "DynamicLayer caches (sliding windows are applied through the mask instead)"
                )
        return [layer for layer in layers if layer.is_initialized]

    def __repr__(self) -> str:
        return f"KVCache(committed={self.committed}, pending={self.pending})"
