"""What a model must offer to be decoded with guesses, checked before the first forward: the reasons a model is
refused (`UnsupportedModelError`), and how its config states its attention layers (full, windowed, chunked)."""

import inspect

from transformers import PreTrainedModel

from mtdecode.attention import GROUPED_SDPA
from mtdecode.cache import cache_keyword

#: why a kind of layer cannot be decoded with guesses: what it keeps besides keys and values
_UNSUPPORTED_LAYERS = {
    **dict.fromkeys(
        ("linear_attention", "hybrid", "hybrid_sliding", "conv", "mamba", "recurrent"),
        "recurrent, convolutional or linear-attention layers carry a state from token to token, which cannot be "
        "rolled back past a rejected guess or split between the branches of a tree",
    ),
    "indexed_attention": "a sparse-attention indexer picks each query's keys by its own scores and keeps a cache "
    "of its own, beside the mask",
    **dict.fromkeys(
        ("compressed_sparse_attention", "heavily_compressed_attention"),
        "compressed caches that pool several tokens into one entry, which cannot be cut at a rejected guess",
    ),
}
#: attention implementations that apply an arbitrary 4-D mask as given
MASKABLE_ATTENTION = ("sdpa", "eager", GROUPED_SDPA)
_LAYER_TYPES = ("full_attention", "sliding_attention", "chunked_attention")


class UnsupportedModelError(TypeError):
    """The model cannot run the forward passes mtdecode needs (custom masks, explicit positions)."""


def sliding_window(config) -> int | None:
    window = getattr(config, "sliding_window", None)
    layer_types = getattr(config, "layer_types", None)
    if window is None or (layer_types is not None and "sliding_attention" not in layer_types):
        return None
    return int(window)


def chunk_size(config) -> int | None:
    """The chunk of chunked-attention layers (Llama 4), if the model has such layers."""
    chunk = getattr(config, "attention_chunk_size", None)
    layer_types = getattr(config, "layer_types", None) or ()
    return int(chunk) if chunk is not None and "chunked_attention" in layer_types else None


def layer_types(config) -> tuple[str, ...] | None:
    layer_types = getattr(config, "layer_types", None)
    return None if layer_types is None else tuple(layer_types)


def check_static_support(model) -> None:
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
            f"load it with attn_implementation='sdpa' (or 'eager', or mtdecode.attention.GROUPED_SDPA)"
        )
    odd = sorted(set(layer_types(model.config) or ()) - set(_LAYER_TYPES))
    if odd:
        why = "; ".join(dict.fromkeys(_UNSUPPORTED_LAYERS.get(kind, "") for kind in odd if kind in _UNSUPPORTED_LAYERS))
        raise UnsupportedModelError(
            f"{name} has layer types {odd}" + (f" ({why})" if why else "") + f"; mtdecode supports {list(_LAYER_TYPES)}"
        )
    if getattr(model.config, "alibi", False) or getattr(model.config, "position_embedding_type", None) == "alibi":
        raise UnsupportedModelError(
            f"{name} uses ALiBi, a bias it builds from a 2-D padding mask by counting columns: it cannot follow "
            "explicit positions through a cache with holes or a tree"
        )
    if model.training:
        raise UnsupportedModelError(
            f"{name} is in training mode (dropout would make decoding random); call model.eval()"
        )
