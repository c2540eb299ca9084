"""The KV-cache manager: one per model per `generate` call, for a whole batch of rows.

The cache holds one key and one value tensor per layer, each of shape
`(batch, kv_heads, columns, head_dim)`. Rows of a batch hold different numbers of tokens,
so a column need not hold an entry in every row: `valid[b, c]` says whether column `c`
holds one of row b's tokens, and `positions[b, c]` at which position it was computed.
Attention ignores the order of keys (only the mask and the positions baked into the keys
count), so an invalid column is simply hidden by the mask: a **hole**.

The columns come in two parts, the same for every row:

- the **committed** columns, `[0, committed)`: each row's valid entries there are tokens
  known to be part of its output, at positions 0, 1, ..., `lengths[b] - 1`;
- the **pending** columns, `[committed, columns)`: what forward passes appended since,
  guesses the strategy has not yet accepted or rejected (and left padding, never valid).

A strategy resolves the pending part with one of three operations, each acting on every
row at once:

- `commit()`: every valid pending entry is accepted (plain decoding);
- `crop(lengths)`: row b keeps the entries at positions below `lengths[b]`, anything else
  goes (reject the tail of a draft; may also roll back committed entries);
- `keep(indices)`: row b keeps the pending entries `indices[b]`, in that order (compaction
  after a branch or a tree was verified in one pass).

After any of them every column is committed again, and the cache tidies itself: the
columns just resolved are packed (each row's kept entries moved to the front, the columns
no row uses dropped; where every row keeps the first of its pending entries, as after a
chain's verification, they are at the front already and only the columns are cut), and
when holes make up more than half of the columns, every row is packed. A long batched run
therefore never keeps every rejected guess's entry: the cache has at most about twice the
columns of its longest row. A batch of one never has holes.

A cache may also **carry features** (`carry_features`): the model's top hidden state beside each
entry's keys and values, kept, packed and dropped with them, so that a feature-level draft (an
EAGLE head drafting for MTAD) can read the target's features at the tokens it committed
(`mtdecode.zoo.eagle.committed_features`), whichever operation resolved them.
"""

import contextlib
import inspect
import weakref
from collections.abc import Sequence
from typing import no_type_check

import torch
from einops import repeat
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from mtdecode.tensor_types import Bool, Float, Int, Tensor

#: below this many columns, holes are not worth a full packing
_PACK_AT_LEAST = 16


#: function -> the keyword `cache_keyword` read from its signature (about 0.1 ms a reading), held weakly
_CACHE_KEYWORDS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


@no_type_check  # a plain string, asked per forward by decoders that hold no adapter (see `mtdecode.tensor_types`)
def cache_keyword(forward) -> str | None:
    """The keyword by which a transformers `forward` takes its KV cache: `cache` (transformers 5.24 renamed it) or
    `past_key_values` (before; still accepted, with a warning, until 5.40); None if it takes neither."""
    function = getattr(forward, "__func__", forward)  # a bound method: its class's function, read once per class
    with contextlib.suppress(KeyError, TypeError):  # TypeError: not weakly referenceable, so read every time
        return _CACHE_KEYWORDS[function]
    parameters = inspect.signature(function).parameters
    keyword = next((name for name in ("cache", "past_key_values") if name in parameters), None)
    with contextlib.suppress(TypeError):
        _CACHE_KEYWORDS[function] = keyword
    return keyword


class KVCache:
    """Keys and values of one model for a batch of rows, with the rows' validity and positions per column.

    Wraps a transformers `DynamicCache` (passed to the model as `cache`, or `past_key_values` before transformers
    5.24: `cache_keyword`; the model appends new columns to it) and edits its layers in place. `record` must
    follow every forward pass (`CausalLM.forward` calls it).
    """

    def __init__(self, batch: int | None = None, device: torch.device | str = "cpu") -> None:
        self.hf_cache = DynamicCache()
        self.committed = 0
        self.valid: Bool[Tensor, "batch columns"] | None = None
        self.positions: Int[Tensor, "batch columns"] | None = None
        if batch is not None:  # else the first forward tells
            self.valid = torch.zeros(batch, 0, dtype=torch.bool, device=device)
            self.positions = torch.zeros(batch, 0, dtype=torch.long, device=device)
        self.features: Float[Tensor, "batch columns hidden"] | None = None  # each column's, if carried
        self.carries_features = False

    # ---------------------------------------------------------------- reading

    @property
    @no_type_check  # plain ints, called per row per step (see `mtdecode.tensor_types`)
    def columns(self) -> int:
        """Columns held, committed or pending (the key axis the next mask starts with)."""
        return 0 if self.valid is None else self.valid.shape[1]

    @property
    @no_type_check
    def pending(self) -> int:
        """Columns appended since the last `commit`, `crop` or `keep`."""
        return self.columns - self.committed

    @property
    def lengths(self) -> Int[Tensor, " batch"]:
        """Tokens each row holds in its committed columns (the position its next token gets)."""
        return self.valid[:, : self.committed].sum(1)

    @property
    def held(self) -> Int[Tensor, " batch"]:
        """Valid entries each row holds, committed or pending."""
        return self.valid.sum(1)

    # ---------------------------------------------------------------- writing

    def carry_features(self) -> None:
        """Keep each entry's feature (`add_features`) from the first forward on; `ValueError` after it."""
        if self.columns:
            raise ValueError(f"carry_features() must come before the first forward; the cache holds {self.columns}")
        self.carries_features = True

    def add_features(self, features: Float[Tensor, "batch new hidden"]) -> None:
        """The features of the columns the last forward appended (`record`), in the same order, if carried."""
        if self.carries_features:
            self.features = features if self.features is None else torch.cat([self.features, features], dim=1)

    def record(self, positions: Int[Tensor, "batch new"], valid: Bool[Tensor, "batch new"]) -> None:
        """Note the positions and validity of the columns a forward pass just appended (pending)."""
        if self.valid is None:
            self.valid = valid[:, :0]
            self.positions = positions[:, :0]
        self.valid = torch.cat([self.valid, valid], dim=1)
        self.positions = torch.cat([self.positions, positions], dim=1)
        if self.hf_cache.get_seq_length() != self.columns:
            raise RuntimeError(
                f"the model appended {self.hf_cache.get_seq_length()} columns, the cache noted {self.columns}"
            )

    def commit(self) -> None:
        """Accept every valid pending entry."""
        pending = self.valid[:, self.committed :]
        if bool(pending.all()):  # the usual case, nothing to pack (and no more holes than before)
            self.committed = self.columns
            return
        if bool((pending[:, 1:] <= pending[:, :-1]).all()):  # each row keeps a prefix of its pending columns
            # (a chain's accepted guesses): its survivors are already first, in order, so packing would move nothing
            self.committed = self.columns
            self._drop_unused_tail()
            self._pack_if_mostly_holes()
            return
        self._resolve(self._survivors(pending))

    def crop(self, lengths: int | Sequence[int] | Int[Tensor, " batch"]) -> None:
        """Row b keeps its entries at positions below `lengths[b]` (committed or pending) and drops the rest.

        **Raises:** `ValueError` if a length is negative or larger than the row holds.
        """
        if self.valid is None:
            if not torch.all(torch.as_tensor(lengths, device="cpu") == 0):
                raise ValueError(f"cannot crop an empty cache to {lengths}")
            return
        lengths = torch.as_tensor(lengths, dtype=torch.long, device=self.valid.device)
        lengths = lengths.expand(self.valid.shape[0])  # one number for every row, or one per row
        if (lengths < 0).any() or (lengths > self.held).any():
            raise ValueError(f"cannot crop rows holding {self.held.tolist()} entries to {lengths.tolist()}")
        self.valid = self.valid & (self.positions < lengths[:, None])
        self.commit()

    def keep(self, indices: Sequence[int] | Sequence[Sequence[int]] | Int[Tensor, "*batch kept"]) -> None:
        """Row b keeps only the pending entries at `indices[b]` (0 = first pending column), in that order.

        One list of indices applies to every row; a 2-D tensor gives one row of indices per
        batch row, padded with -1. A listed entry that was never valid (left padding) stays
        invalid. The kept entries' keys carry the positions they were computed with, so each
        row's indices should list a path whose positions continue its committed tokens
        (`mtdecode.masks.tree_positions` numbers a tree that way).

        **Raises:** `ValueError` if an index is outside `[0, pending)` or repeats within a row.
        """
        batch = 1 if self.valid is None else self.valid.shape[0]
        device = "cpu" if self.valid is None else self.valid.device
        index = torch.as_tensor(indices, dtype=torch.long, device=device)
        if _flat(indices):  # one list of indices for every row
            index = repeat(index.reshape(-1), "kept -> batch kept", batch=batch)
        index = index.reshape(batch, -1)  # a row's list as a tensor of one row, or already one list per row
        rows = index.tolist()  # checked in Python: a few indices per row, where each tensor operation costs more
        listed = [[i for i in row if i != -1] for row in rows]
        if any(not 0 <= i < self.pending for row in listed for i in row):
            raise ValueError(f"keep({rows}): indices must lie in [0, {self.pending}) (or -1 for none)")
        if any(len(set(row)) < len(row) for row in listed):
            raise ValueError(f"keep({rows}): indices repeat")
        if self.valid is not None:
            self._resolve(index, _kept_prefix(rows))

    # ---------------------------------------------------------------- tidying

    def _survivors(self, alive: Bool[Tensor, "batch region"]) -> Int[Tensor, "batch kept"]:
        """Column indices (in the region) of each row's surviving entries, in column order, padded with -1."""
        kept = alive.sum(1)
        width = int(kept.max()) if alive.numel() else 0
        order = torch.argsort((~alive).to(torch.int8), dim=1, stable=True)[:, :width]  # survivors first
        return torch.where(torch.arange(width, device=alive.device) < kept[:, None], order, -1)

    def _resolve(self, order: Int[Tensor, "batch kept"], prefix: int | None = None) -> None:
        """Row b's pending columns become `order[b]` (-1: a hole), packed after the committed ones; then tidy.
        `prefix`: w where the caller knows that every row keeps its first w pending columns, in order (`keep`;
        `commit` never calls this where each row keeps a prefix of its own)."""
        start = self.committed
        if prefix is not None:  # every row keeps the same first pending columns: cut
            self._truncate(start + prefix)
            self.committed = self.columns
        else:
            used = (order >= 0).any(0).nonzero()
            self._pack(start, order[:, : int(used[-1, 0]) + 1 if used.numel() else 0])  # no column of holes at the end
        self._drop_unused_tail()
        self._pack_if_mostly_holes()

    def _pack_if_mostly_holes(self) -> None:
        """Pack every row if holes make up more than half of the columns."""
        lengths = self.valid.sum(1)
        if self.columns > 2 * int(lengths.max()) + _PACK_AT_LEAST:
            self._pack(0, self._survivors(self.valid))

    def _pack(self, start: int, order: Int[Tensor, "batch kept"]) -> None:
        """Replace columns [start, columns) of every row by the columns `order[b] + start` (-1: a hole)."""
        source = order.clamp(min=0) + start  # (batch, kept)
        valid = self.valid.gather(1, source) & (order >= 0)
        positions = self.positions.gather(1, source)
        end = start + source.shape[1]  # <= columns: a row keeps at most its pending entries
        for layer in self._layers():
            # the picked columns overwrite columns [start, end) in place, and the rest is cut off: no copy of the
            # committed columns (as long as the whole cache, every step). Keys and values may differ in width
            # (DeepSeek's compressed attention caches wider keys than values), so each gets its own index.
            layer.keys = _packed(layer.keys, source, start, end)
            layer.values = _packed(layer.values, source, start, end)
        if self.features is not None:
            picked = self.features.gather(1, source[:, :, None].expand(-1, -1, self.features.shape[2]))
            self.features = torch.cat([self.features[:, :start], picked], dim=1)
        self.valid = torch.cat([self.valid[:, :start], valid], dim=1)
        self.positions = torch.cat([self.positions[:, :start], positions], dim=1)
        self.committed = self.columns

    def _drop_unused_tail(self) -> None:
        """Drop the last columns if no row holds an entry there."""
        used = self.valid.any(0).nonzero()
        self._truncate(int(used[-1, 0]) + 1 if used.numel() else 0)

    def _truncate(self, end: int) -> None:
        """Drop the columns from `end` on."""
        if end < self.columns:
            for layer in self._layers():
                layer.keys = layer.keys[:, :, :end]
                layer.values = layer.values[:, :, :end]
            self.valid, self.positions = self.valid[:, :end], self.positions[:, :end]
            if self.features is not None:
                self.features = self.features[:, :end]
            self.committed = min(self.committed, end)

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
        return f"KVCache(columns={self.columns}, committed={self.committed}, pending={self.pending})"


def _packed(
    cached: Float[Tensor, "batch heads columns dim"], source: Int[Tensor, "batch kept"], start: int, end: int
) -> Float[Tensor, "batch heads end dim"]:
    """`cached` with columns [start, end) replaced by its columns `source` (per row), and cut at `end`."""
    batch, heads, _, dim = cached.shape
    # kept as indexing, not einops' `repeat(source, "batch kept -> batch heads kept dim")`: this runs for every layer's
    # keys and values of every verification (60 calls a step for SmolLM2), where einops' 2 us a call is measurable
    picked = source.to(cached.device)[:, None, :, None].expand(batch, heads, -1, dim)  # (batch, heads, kept, dim)
    cached[:, :, start:end] = cached.gather(2, picked)
    return cached[:, :, :end]


def _kept_prefix(rows: list[list[int]]) -> int | None:
    """w if every row of `keep`'s indices lists the first w pending columns in order (holes after them aside),
    else None."""
    trimmed = [row[: max((i + 1 for i, v in enumerate(row) if v != -1), default=0)] for row in rows]
    width = max(map(len, trimmed), default=0)
    return width if all(row == list(range(width)) for row in trimmed) else None


def _flat(indices) -> bool:
    """Whether `indices` is one list of ints (for every row) rather than one list per row."""
    if isinstance(indices, Tensor):
        return indices.ndim <= 1
    return all(not isinstance(i, Sequence | Tensor) for i in indices)
