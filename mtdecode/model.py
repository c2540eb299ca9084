"""The model adapter: a transformers causal LM behind one typed forward call.

`CausalLM.forward` runs the model over new tokens with explicit `position_ids`, an
explicit boolean 4-D attention mask and a `KVCache`, and returns logits. Strategies
never build transformers' arguments themselves; `Runner` (below) binds one model to
one cache for the length of a `generate` call and counts its forward passes.

Supported: decoder-only models whose forward takes `position_ids`, a cache (`cache`, or
`past_key_values` before transformers 5.24) and a ready-made 4-D mask, with the `sdpa` or
`eager` attention implementation (transformers' Llama, Qwen2 and Mistral families among them). On construction a small
probe checks that the model really obeys a custom mask and explicit positions.
"""

import inspect
import weakref
from collections.abc import Sequence

import torch
from transformers import PreTrainedModel

from mtdecode import masks
from mtdecode.cache import KVCache, cache_keyword
from mtdecode.tensor_types import Bool, Float, Int, Mask4D, Positions, Tensor, TokenIds

#: attention implementations that apply an arbitrary 4-D mask as given
MASKABLE_ATTENTION = ("sdpa", "eager")
_LAYER_TYPES = ("full_attention", "sliding_attention")


class UnsupportedModelError(TypeError):
    """The model cannot run the forward passes mtdecode needs (custom masks, explicit positions)."""


class CausalLM:
    """A decoder-only transformers model that takes explicit positions, masks and a `KVCache`.

    **Arguments:**

    - `model`: a transformers `PreTrainedModel` with a language-modelling head, in eval mode.
    - `probe`: run the behavioural check that the model obeys custom masks (default on).

    **Raises:**

    `UnsupportedModelError` naming the model class and what is missing.
    """

    def __init__(self, model: PreTrainedModel, *, probe: bool = True) -> None:
        _check_static_support(model)
        self.hf = model
        self.config = model.config
        self.name = getattr(model.config, "name_or_path", "") or type(model).__name__
        self._sliding_window = _sliding_window(model.config)
        self._layer_types = _layer_types(model.config)
        self._cache_keyword = cache_keyword(model.forward)
        if probe:
            _probe_custom_mask(self)

    @classmethod
    def wrap(cls, model: "CausalLM | PreTrainedModel") -> "CausalLM":
        """Return `model` if it is already a `CausalLM`, else an adapter for it (made once per model)."""
        if isinstance(model, CausalLM):
            return model
        if not isinstance(model, PreTrainedModel):
            raise UnsupportedModelError(
                f"expected a transformers PreTrainedModel or an mtdecode CausalLM, got {type(model).__name__}"
            )
        adapter = _ADAPTERS.get(model)
        if adapter is None:
            adapter = _ADAPTERS[model] = cls(model)
        return adapter

    @property
    def device(self) -> torch.device:
        return self.hf.device

    @property
    def dtype(self) -> torch.dtype:
        return self.hf.dtype

    @property
    def vocab_size(self) -> int:
        """Width of the model's output layer (the size of p over tokens)."""
        head = self.hf.get_output_embeddings()
        return int(getattr(head, "out_features", None) or head.weight.shape[0])

    @property
    def max_length(self) -> int:
        """How many positions the model can attend over (its context)."""
        return int(self.config.max_position_embeddings)

    def forward(
        self,
        input_ids: TokenIds,
        position_ids: Positions,
        mask: Mask4D,
        cache: KVCache,
        *,
        valid: Bool[Tensor, "batch new"] | None = None,
        logits_to_keep: int | Int[Tensor, " rows"] = 0,
    ) -> Float[Tensor, "batch rows vocab"]:
        """Run the model over `input_ids` on top of `cache`, appending their keys and values to it.

        **Arguments:**

        - `input_ids`: the new tokens, `(batch, new)`.
        - `position_ids`: the position of each new token, `(batch, new)`.
        - `mask`: `(batch, 1, new, cache.columns + new)`; `True` = may attend. The columns are
          the cached entries followed by the new tokens.
        - `cache`: the model's `KVCache`; the new entries become pending in it.
        - `valid`: which new tokens are real (default: all); padding is recorded as holes.
        - `logits_to_keep`: if an int > 0, only the last `logits_to_keep` rows of logits are
          computed; if a 1-D tensor of row indices, only those rows, in that order.

        **Returns:**

        Logits of shape `(batch, rows, vocab)`: `rows` is `new`, `logits_to_keep` if that is an
        int > 0, or the number of indices given.
        """
        return self._run(input_ids, position_ids, mask, cache, valid=valid, logits_to_keep=logits_to_keep).logits

    def forward_features(
        self,
        input_ids: TokenIds,
        position_ids: Positions,
        mask: Mask4D,
        cache: KVCache,
        *,
        valid: Bool[Tensor, "batch new"] | None = None,
        logits_to_keep: int | Int[Tensor, " rows"] = 0,
    ) -> tuple[Float[Tensor, "batch rows vocab"], Float[Tensor, "batch new hidden"]]:
        """`forward`, and the model's top hidden state at every new token from the same forward pass: the final
        norm's output, which the output layer reads (where `logits_to_keep` cuts the logits, the features of every
        new token are still returned). Feature-level drafts (EAGLE) read it.

        **Returns:** the logits, as `forward` returns them, and the features `(batch, new, hidden)`.
        """
        out = self._run(
            input_ids, position_ids, mask, cache, valid=valid, logits_to_keep=logits_to_keep, output_hidden_states=True
        )
        return out.logits, out.hidden_states[-1]

    def _run(
        self,
        input_ids: TokenIds,
        position_ids: Positions,
        mask: Mask4D,
        cache: KVCache,
        *,
        valid: Bool[Tensor, "batch new"] | None,
        logits_to_keep: int | Int[Tensor, " rows"],
        output_hidden_states: bool = False,
    ):
        """The checks and the model call behind `forward` and `forward_features`; the model's output object."""
        batch, num_new = input_ids.shape
        expected = (batch, 1, num_new, cache.columns + num_new)
        if tuple(mask.shape) != expected:
            raise ValueError(f"mask has shape {tuple(mask.shape)}; expected (batch, 1, new, cached + new) = {expected}")
        if tuple(position_ids.shape) != (batch, num_new):
            raise ValueError(f"position_ids has shape {tuple(position_ids.shape)}; expected {(batch, num_new)}")
        if cache.valid is not None and cache.valid.shape[0] != batch:
            raise ValueError(f"the cache holds {cache.valid.shape[0]} rows but {batch} were fed")
        with torch.no_grad():
            out = self.hf(
                input_ids=input_ids,
                position_ids=position_ids,
                attention_mask=self._model_mask(mask, position_ids, cache),
                **{self._cache_keyword: cache.hf_cache},
                use_cache=True,
                logits_to_keep=logits_to_keep,
                output_hidden_states=output_hidden_states,
            )
        cache.record(position_ids, torch.ones_like(input_ids, dtype=torch.bool) if valid is None else valid)
        return out

    def _model_mask(
        self, mask: Bool[Tensor, "batch 1 query key"], position_ids: Positions, cache: KVCache
    ) -> Float[Tensor, "batch 1 query key"] | dict[str, Float[Tensor, "batch 1 query key"]]:
        """Turn a boolean mask into what the model's attention layers add to their scores."""
        full = _additive(mask, self.dtype)
        if self._sliding_window is None:
            return full
        # Sliding-window layers see keys less than `window` positions back; the cache knows each entry's position.
        cached = cache.positions if cache.positions is not None else position_ids[:, :0]
        key_positions = torch.cat([cached, position_ids], dim=1)  # (batch, key)
        near = position_ids[:, None, :, None] - key_positions[:, None, None, :] < self._sliding_window
        sliding = _additive(mask & near, self.dtype)
        if self._layer_types is None:  # every layer slides (Mistral)
            return sliding
        return {"full_attention": full, "sliding_attention": sliding}

    def __repr__(self) -> str:
        return f"CausalLM({type(self.hf).__name__}, vocab={self.vocab_size}, device={self.device}, dtype={self.dtype})"


class Runner:
    """One model and its KV cache for one `generate` call, fed a batch of rows side by side.

    Strategies call `extend` (feed each row's tokens left to right) or `forward` (feed tokens
    with any mask, for branches and trees); both count as one forward pass. The ragged
    bookkeeping lives here and in the `KVCache`: rows hold different numbers of tokens, so
    the runner places each row's new tokens after its own committed ones (positions), hides
    other columns' holes and padding (mask), and records which new entries are padding.
    """

    def __init__(self, model: CausalLM, role: str, batch: int | None = None) -> None:
        self.model = model
        self.role = role
        self.cache = KVCache(batch, model.device)
        self.forwards = 0

    def forward(
        self,
        tokens: Int[Tensor, "batch new"],
        offsets: Int[Tensor, "... new"],
        sees: Bool[Tensor, "... new seen"],
        *,
        pad: Int[Tensor, " batch"] | None = None,
        logits_to_keep: int | Int[Tensor, " rows"] = 0,
    ) -> Float[Tensor, "batch rows vocab"]:
        """Feed `tokens` with any structure among the pending entries and the new tokens.

        **Arguments:**

        - `tokens`: `(batch, new)`.
        - `offsets`: each new token's position minus its row's committed length (`cache.lengths`):
          a tree node's depth, a window cell's distance from the row's first new token, ...
          One row of offsets for every batch row, or one per row.
        - `sees`: which of the pending entries and the new tokens each new token may see
          (`seen` = pending + new columns, as `mtdecode.masks` builds them with no prefix);
          every committed entry of the row is always visible. Shared or one per row.
        - `pad`: row b's first `pad[b]` new tokens are left padding (its context is shorter
          than the widest row's): they are invisible, and the row's offsets move down by `pad[b]`.
        - `logits_to_keep`: as in `CausalLM.forward`.

        **Returns:**

        Logits `(batch, rows, vocab)`.
        """
        positions, mask, real = self.place(tokens, offsets, sees, pad)
        self.forwards += 1
        return self.model.forward(tokens, positions, mask, self.cache, valid=real, logits_to_keep=logits_to_keep)

    def forward_features(
        self,
        tokens: Int[Tensor, "batch new"],
        offsets: Int[Tensor, "... new"],
        sees: Bool[Tensor, "... new seen"],
        *,
        pad: Int[Tensor, " batch"] | None = None,
        logits_to_keep: int | Int[Tensor, " rows"] = 0,
    ) -> tuple[Float[Tensor, "batch rows vocab"], Float[Tensor, "batch new hidden"]]:
        """`forward`, and the top hidden state of every new token from the same forward pass
        (`CausalLM.forward_features`)."""
        positions, mask, real = self.place(tokens, offsets, sees, pad)
        self.forwards += 1
        return self.model.forward_features(
            tokens, positions, mask, self.cache, valid=real, logits_to_keep=logits_to_keep
        )

    def place(
        self,
        tokens: Int[Tensor, "batch new"],
        offsets: Int[Tensor, "... new"],
        sees: Bool[Tensor, "... new seen"],
        pad: Int[Tensor, " batch"] | None,
    ) -> tuple[Int[Tensor, "batch new"], Bool[Tensor, "batch 1 new key"], Bool[Tensor, "batch new"]]:
        """Where `forward`'s new tokens go: their positions, the full 4-D mask over the cache and them, and which
        of them are real (not left padding)."""
        batch, num_new = tokens.shape[:2]
        device = tokens.device
        pad = torch.zeros(batch, dtype=torch.long, device=device) if pad is None else pad.to(device)
        real = torch.arange(num_new, device=device)[None, :] >= pad[:, None]  # (batch, new): not padding
        committed = self._committed_lengths(batch, device)
        positions = (committed[:, None] + offsets - pad[:, None]).clamp(min=0)  # (batch, new)
        mask = self._mask(sees.expand(batch, num_new, -1), real, num_new)  # (batch, new, columns + new)
        return positions, mask[:, None], real

    def extend(
        self, tokens: Sequence[Sequence[int]] | Sequence[int] | Int[Tensor, "batch new"], *, logits_to_keep: int = 0
    ) -> Float[Tensor, "batch rows vocab"]:
        """Feed each row's `tokens` left to right after every valid entry of its cache; return their logits.

        Rows may feed different numbers of tokens (a list of lists): the shorter ones are left
        padded, so the last `logits_to_keep` rows of logits are every row's last tokens. A flat
        list of ints feeds a batch of one. The new entries are left pending: resolve them with
        `cache.commit/crop/keep`.
        """
        ids, offsets, sees, pad = self.after_held(tokens)
        return self.forward(ids, offsets, sees, pad=pad, logits_to_keep=logits_to_keep)

    def extend_features(
        self, tokens: Sequence[Sequence[int]] | Int[Tensor, "batch new"], *, logits_to_keep: int = 0
    ) -> tuple[Float[Tensor, "batch rows vocab"], Float[Tensor, "batch new hidden"]]:
        """`extend`, and the top hidden state of every new token (left padding included: row b's real tokens are
        its last ones)."""
        ids, offsets, sees, pad = self.after_held(tokens)
        return self.forward_features(ids, offsets, sees, pad=pad, logits_to_keep=logits_to_keep)

    def after_held(
        self, tokens: Sequence[Sequence[int]] | Sequence[int] | Int[Tensor, "batch new"]
    ) -> tuple[Int[Tensor, "batch new"], Int[Tensor, "batch new"], Bool[Tensor, "new seen"], Int[Tensor, " batch"]]:
        """`extend`'s arguments for `forward`: the tokens left padded, their offsets after everything the cache
        holds, a mask that lets them see every pending entry and each other left to right, and the padding."""
        device = self.model.device
        ids, pad = left_pad(tokens, device)  # (batch, new), (batch,)
        batch, num_new = ids.shape
        pending_held = self._held(batch, device) - self._committed_lengths(batch, device)  # (batch,)
        offsets = pending_held[:, None] + torch.arange(num_new, device=device)  # continue after everything held
        seen = self.cache.pending + num_new
        sees = torch.ones(num_new, seen, dtype=torch.bool, device=device)  # every pending entry (holes aside)
        sees[:, self.cache.pending :] = masks.causal(num_new, device=device)  # the new tokens: left to right
        return ids, offsets, sees, pad

    def _committed_lengths(self, batch: int, device) -> Int[Tensor, " batch"]:
        if self.cache.valid is None:
            return torch.zeros(batch, dtype=torch.long, device=device)
        return self.cache.lengths

    def _held(self, batch: int, device) -> Int[Tensor, " batch"]:
        if self.cache.valid is None:
            return torch.zeros(batch, dtype=torch.long, device=device)
        return self.cache.held

    def _mask(
        self, sees: Bool[Tensor, "batch new seen"], real: Bool[Tensor, "batch new"], num_new: int
    ) -> Bool[Tensor, "batch new key"]:
        """The full mask of one forward (`mtdecode.masks.place`): each row's committed entries, then `sees`
        over the pending and new columns, holes and padding hidden."""
        cache = self.cache
        valid = cache.valid if cache.valid is not None else real[:, :0]
        return masks.place(sees, valid, cache.committed, real)


def left_pad(
    tokens: Sequence[Sequence[int]] | Sequence[int] | Int[Tensor, "batch new"], device: torch.device | str
) -> tuple[Int[Tensor, "batch new"], Int[Tensor, " batch"]]:
    """Rows of different lengths as one tensor, shorter rows padded on the left (with token 0), and the padding
    per row. A flat list of ints is one row."""
    if isinstance(tokens, Tensor):
        return tokens.to(device), torch.zeros(tokens.shape[0], dtype=torch.long, device=device)
    if all(isinstance(t, int) for t in tokens):
        tokens = [tokens]
    width = max((len(row) for row in tokens), default=0)
    ids = torch.zeros(len(tokens), width, dtype=torch.long, device="cpu")
    for b, row in enumerate(tokens):
        if row:
            ids[b, width - len(row) :] = torch.as_tensor(row, dtype=torch.long, device="cpu")
    pad = torch.tensor([width - len(row) for row in tokens], dtype=torch.long, device="cpu")
    return ids.to(device), pad.to(device)


def _additive(mask: Bool[Tensor, "*shape"], dtype: torch.dtype) -> Float[Tensor, "*shape"]:
    """0 where attention is allowed, the most negative number of `dtype` where it is not."""
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(~mask, torch.finfo(dtype).min)


_ADAPTERS: "weakref.WeakKeyDictionary[PreTrainedModel, CausalLM]" = weakref.WeakKeyDictionary()


def _sliding_window(config) -> int | None:
    window = getattr(config, "sliding_window", None)
    layer_types = getattr(config, "layer_types", None)
    if window is None or (layer_types is not None and "sliding_attention" not in layer_types):
        return None
    return int(window)


def _layer_types(config) -> tuple[str, ...] | None:
    layer_types = getattr(config, "layer_types", None)
    return None if layer_types is None else tuple(layer_types)


def _check_static_support(model) -> None:
    name = type(model).__name__
    if not isinstance(model, PreTrainedModel):
        raise UnsupportedModelError(f"{name} is not a transformers PreTrainedModel")
    if model.get_output_embeddings() is None:
        raise UnsupportedModelError(f"{name} has no language-modelling head (use an ...ForCausalLM class)")
    if getattr(model.config, "is_encoder_decoder", False):
        raise UnsupportedModelError(f"{name} is an encoder-decoder model; mtdecode decodes decoder-only models")
    params = inspect.signature(model.forward).parameters
    missing = [p for p in ("position_ids", "attention_mask") if p not in params]
    if cache_keyword(model.forward) is None:
        missing.append("cache (or past_key_values)")
    if missing:
        raise UnsupportedModelError(f"{name}.forward does not take {', '.join(missing)}")
    attn = model.config._attn_implementation
    if attn not in MASKABLE_ATTENTION:
        raise UnsupportedModelError(
            f"{name} uses attn_implementation={attn!r}, which cannot take a custom 4-D attention mask; "
            f"load it with attn_implementation='sdpa' (or 'eager')"
        )
    odd = sorted(set(_layer_types(model.config) or ()) - set(_LAYER_TYPES))
    if odd:
        raise UnsupportedModelError(f"{name} has layer types {odd}; mtdecode supports {list(_LAYER_TYPES)}")
    if model.training:
        raise UnsupportedModelError(
            f"{name} is in training mode (dropout would make decoding random); call model.eval()"
        )


def _probe_custom_mask(adapter: CausalLM) -> None:
    """Check that a token hidden by the mask really is invisible, using three tiny forwards.

    Token b at position 1 is fed (i) after token a, with a mask hiding a; (ii) alone, at
    position 1; (iii) after a, with a visible. If the model obeys masks and positions,
    (i) equals (ii) up to rounding and both differ from (iii).
    """
    name = type(adapter.hf).__name__
    device = adapter.device
    a, b = 1 % adapter.vocab_size, 2 % adapter.vocab_size
    pair = torch.tensor([[a, b]], device=device)
    positions = torch.tensor([[0, 1]], device=device)
    hide_a = torch.tensor([[[[True, False], [False, True]]]], device=device)
    see_a = masks.causal(2, 0, device=device)[None, None]
    hidden = adapter.forward(pair, positions, hide_a, KVCache())[0, 1]
    seen = adapter.forward(pair, positions, see_a, KVCache())[0, 1]
    alone = adapter.forward(
        pair[:, 1:], positions[:, 1:], torch.ones(1, 1, 1, 1, dtype=torch.bool, device=device), KVCache()
    )[0, 0]
    finite = seen.isfinite() & alone.isfinite() & hidden.isfinite()  # a head may rule tokens out with -inf
    effect = (seen - alone)[finite].abs().max().item()
    leak = (hidden - alone)[finite].abs().max().item()
    # An obeying model leaks only rounding: relative to the effect, about u (2^-8 for bfloat16 down to 2^-53
    # for float64) times the accumulation length. A model that drops the mask leaks the whole effect. A
    # tenth sits an order of magnitude from both, for every dtype.
    if not leak <= 0.1 * effect:
        raise UnsupportedModelError(
            f"{name} did not obey a custom 4-D attention mask with explicit position_ids "
            f"(a hidden token changed the output by {leak:.3g}, a visible one by {effect:.3g})"
        )
