"""Tiny random models of every decoder-only family transformers ships, to run decoders across architectures.

`mtdecode.testing.models.tiny_model` builds three hand-picked families (llama, qwen2, mistral). A decoder that
works on those may still break on a family whose cache, positions or attention differ: ALiBi instead of rotary
positions (bloom, mpt), keys and values of different widths (deepseek_v3's compressed attention), a sliding or
chunked window (mistral, gemma2, llama4), or no attention cache at all (mamba, rwkv). This module reaches all of
them without a list of our own:

- `decoder_only_families()` reads transformers' own auto mappings: every type with a causal-LM head, minus
  the types the other mappings mark as encoders, encoder-decoders or multimodal models;
- `tiny_config(family)` shrinks that family's default config by the attribute names configs share (read
  through each config's `attribute_map`): 2 layers, hidden size 32, 4 heads and 2 key/value heads, a few small
  experts, and every sliding, local or chunked attention window set to `window` tokens, so the window changes
  the output of a short decode. `OVERRIDES` holds the settings generic shrinking gets wrong, each with its
  reason;
- `tiny_family_model(family)` builds a random model from that config, in float64 and eval mode, with weights
  drawn large enough that greedy continuations are not near ties.

A forward over 40 tokens of such a model takes milliseconds on a CPU. Measured with transformers 5.24, all 149
families build and 143 run `generate` in float64; blt and gemma4_unified_assistant do not generate at all (the
first builds a cache from a config without `num_hidden_layers`, the second is a drafting head that needs its
target's key/value states), and inkling2_text, inkling2_loop_text, xglm and xlnet run in float32 only.
"""

import contextlib
import dataclasses
import functools
from collections.abc import Callable, Iterator
from typing import Any

import torch
from transformers import AutoModelForCausalLM, PretrainedConfig, PreTrainedModel
from transformers.models.auto import modeling_auto
from transformers.models.auto.configuration_auto import CONFIG_MAPPING
from transformers.utils import logging

#: auto mappings whose types are something other than a plain decoder-only LM (those missing here are skipped)
OTHER_KINDS = (
    "MODEL_FOR_MASKED_LM_MAPPING_NAMES",  # encoders that also have a causal head (bert, roberta, ...)
    "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES",  # encoder-decoders (bart, marian, ...)
    "MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES",  # speech encoder-decoders (whisper)
    "MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES",  # vision-language models (gemma3, llama4, ...)
    "MODEL_FOR_VISION_2_SEQ_MAPPING_NAMES",
    "MODEL_FOR_MULTIMODAL_LM_MAPPING_NAMES",
)

#: causal-LM types that cannot be instantiated at all, with the reason
UNBUILDABLE = {
    "gemma4_assistant": "its default config fails its own validation (hidden_size_per_layer_input must be 0); "
    "it is a drafting head whose forward needs gemma4's embeddings and key/value states",
}

#: settings by standard attribute name, made wherever a config has the attribute (under its name or an alias)
SETTINGS = {
    # widths: hidden size 32, feed-forward 64 (under every name configs give it), heads of 8
    "hidden_size": 32,
    "hidden_size_global": 32,
    "backbone_hidden_size": 32,
    "word_embed_proj_dim": 32,
    "intermediate_size": 64,
    "intermediate_size_mlp": 64,
    "dense_intermediate_size": 64,
    "ffn_hidden_size": 64,
    "ffn_dim": 64,
    "dff": 64,
    "dim_ff": 64,
    "d_inner": 64,
    "decoder_ffn_dim": 64,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 8,
    "dim_head": 8,
    "query_pre_attn_scalar": 8,
    "rotary_dim": 4,
    "max_position_embeddings": 512,
    # depth: 2 layers, one of each kind where an int counts the layers of a kind
    "num_hidden_layers": 2,
    "first_k_dense_replace": 1,
    "num_dense_layers": 1,
    # mixture of experts: 4 experts of width 16, 2 of them per token, one shared expert, one routing group
    "num_local_experts": 4,
    "num_experts": 4,
    "n_routed_experts": 4,
    "moe_num_experts": 4,
    "zero_expert_num": 2,
    "num_experts_per_tok": 2,
    "moe_topk": 2,
    "moe_k": 2,
    "moe_top_k": 2,
    "top_k_experts": 2,
    "n_shared_experts": 1,
    "num_shared_experts": 1,
    "moe_intermediate_size": 16,
    "expert_ffn_hidden_size": 16,
    "shared_expert_intermediate_size": 16,
    "moe_shared_expert_intermediate_size": 16,
    "shared_intermediate_size": 16,
    "shared_experts_intermediate_size": 16,
    "router_hidden_size": 16,
    "n_group": 1,
    "topk_group": 1,
    # compressed (multi-head latent) attention: latent keys 16 wide, rotary part 4, values 8
    "q_lora_rank": 16,
    "kv_lora_rank": 16,
    "qk_rope_head_dim": 4,
    "qk_nope_head_dim": 4,
    "v_head_dim": 8,
    "o_groups": 2,
    "o_lora_rank": 16,
    # sparse-attention indexers
    "index_n_heads": 2,
    "index_head_dim": 8,
    # linear attention and state-space layers: 4 heads of 16 over `expand * hidden_size` = 64, states of 8
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 4,
    "linear_key_head_dim": 8,
    "linear_value_head_dim": 8,
    "linear_num_heads": 4,
    "linear_head_dim": 8,
    "state_size": 8,
    "ssm_state_size": 8,
    "n_groups": 1,
    "mamba_d_state": 8,
    "mamba_n_heads": 4,
    "mamba_num_heads": 4,
    "mamba_d_head": 16,
    "mamba_head_dim": 16,
    "mamba_n_groups": 1,
    "mamba_d_ssm": 64,
    # attention over a window with heads of its own
    "swa_num_attention_heads": 4,
    "swa_num_key_value_heads": 2,
    "swa_head_dim": 8,
    # per-layer input embeddings (gemma3n, gemma4), hyper-connections, low-rank adapters
    "hidden_size_per_layer_input": 8,
    "hc_lowrank": 8,
    "adapter_rank": 8,
    # weights drawn large, so that next-token distributions are peaked (as `tiny_model` does); logits unscaled
    # (cohere multiplies them by 1/16)
    "initializer_range": 0.3,
    "init_std": 0.3,
    "logit_scale": 1.0,
    "tie_word_embeddings": False,
    # causal attention and a cache (bert-generation attends both ways unless it is a decoder)
    "is_decoder": True,
    # a window on some layers and full attention on others
    "use_sliding_window": True,
    "max_window_layers": 1,
}

#: settings whose default of `None` switches a part off (query compression in multi-head latent attention)
OPTIONAL = ("q_lora_rank",)

#: settings that switch windows on (`max_window_layers`: the layers from this one on have a window)
WINDOW_SWITCHES = ("use_sliding_window", "max_window_layers")

#: attribute names under which configs keep an attention window; each is set to `window`
WINDOWS = (
    "sliding_window",
    "sliding_window_size",
    "attention_window_size",
    "window_size",
    "attention_chunk_size",
    "local_attention_window_len",
    "keep_window_size",
)

#: dtypes of the grouped matrix product that mixture-of-experts layers use by default
GROUPED_MM_DTYPES = (torch.float32, torch.bfloat16, torch.float16)

#: family-specific settings (a function of the window) where generic shrinking fails, each with its reason
OVERRIDES: dict[str, Callable[[int], dict[str, Any]]] = {
    # its default has no attention layer (`attn_layer_indices=None`)
    "bamba": lambda window: {"attn_layer_indices": [1]},
    # its hashed n-gram embeddings have 500002 rows per n-gram size by default
    "blt": lambda window: {"encoder_hash_byte_group_vocab": 64},
    # its standalone default has neither per-layer-type rotary settings nor a windowed layer
    "cohere_compass_text": lambda window: {
        "layer_types": ["sliding_attention", "full_attention"],
        "rope_parameters": {
            "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
            "full_attention": {"rope_type": "default", "rope_theta": 10_000.0},
        },
    },
    # its attention reads `rope_theta` and clamps by `clip_qkv` (even `None`) from a sub-config that declares neither
    "dbrx": lambda window: {"attn_config": {"kv_n_heads": 2, "rope_theta": 10_000.0, "clip_qkv": 8.0}},
    # its heavily compressed attention pools 128 tokens into one by default, more than a short decode has
    "deepseek_v4": lambda window: {
        "compress_rates": {"compressed_sparse_attention": 4, "heavily_compressed_attention": 8}
    },
    # its loop needs layers before, in and after it (8 + 20 + 8); its layers move the state by only 0.05 of their output
    "dory": lambda window: {
        "num_hidden_layers": 3,
        "layer_types": ["sliding_attention", "full_attention", "sliding_attention"],
        "n_input_layers": 1,
        "n_output_layers": 1,
        "ngpt_alpha_init": 0.5,
    },
    # its windowed layers take sizes from `swa_*` constructor arguments; it needs as many key/value as query heads
    "dots3_note_text": lambda window: {
        "num_key_value_heads": 4,
        "swa_num_attention_heads": 4,
        "swa_num_key_value_heads": 4,
        "swa_q_lora_rank": 16,
        "swa_kv_lora_rank": 16,
        "swa_head_dim": 8,
        "swa_qk_nope_head_dim": 4,
        "swa_v_head_dim": 8,
    },
    # its last `num_kv_shared_layers` layers reuse the cache of earlier layers of their type (15 of 35 by default)
    "gemma3n_text": lambda window: {
        "num_hidden_layers": 4,
        "layer_types": ["sliding_attention", "full_attention"] * 2,
        "num_kv_shared_layers": 2,
    },
    # its full-attention layers take their head size (512) from a constructor argument, not a field
    "gemma4_text": lambda window: {"global_head_dim": 16},
    "gemma4_unified_text": lambda window: {"global_head_dim": 16},
    # its local and global layers come from `attention_types`, a pattern and a repeat count
    "gpt_neo": lambda window: {"attention_types": [[["global", "local"], 1]]},
    # its default has no attention layer
    "granitemoehybrid": lambda window: {"layer_types": ["linear_attention", "full_attention"]},
    # it divides the last hidden states by `logits_mup_width_multiplier` (24), which flattens random logits
    "inkling_text": lambda window: {"logits_mup_width_multiplier": 1.0},
    # attention and experts come every `*_period` layers from `*_offset` (every 8th from the 4th by default)
    "jamba": lambda window: {
        "attn_layer_period": 2,
        "attn_layer_offset": 1,
        "expert_layer_period": 2,
        "expert_layer_offset": 1,
    },
    # its indexed layers are laid out over 50 layers (a per-layer K/V source, indexers among them); heads of 16 (its
    # keys and values are rounded in blocks of 16), an indexer's pool and selection smaller than a short decode
    "kolibri1_1": lambda window: {
        "num_hidden_layers": 3,
        "layer_types": ["sliding_attention", "indexed_attention", "indexed_attention"],
        "kv_source_layers": [0, 1, 1],
        "index_layers": [1],
        "mlp_only_layers": [0],
        "head_dim": 16,
        "index_num_heads": 2,
        "index_topk": 4,
        "index_pool_size": 8,
        "index_compression": 4,
        "index_num_local_tokens": 4,
        "index_num_sink_tokens": 1,
        "mlp_only_intermediate_size": 64,
        "shared_expert_intermediate_size": 16,
    },
    # its default has no windowed layer
    "laguna": lambda window: {"layer_types": ["sliding_attention", "full_attention"]},
    # its default has attention layers only; its released checkpoints alternate convolutions and attention
    "lfm2": lambda window: {"layer_types": ["conv", "full_attention"]},
    # its standalone default has no `layer_types` (the released checkpoints list them)
    "lfm2_moe": lambda window: {"layer_types": ["conv", "full_attention"]},
    # each of its layers holds two attention blocks: `num_hidden_layers` is twice `num_layers`
    "longcat_flash": lambda window: {"num_layers": 1},
    # its state-space heads are `num_heads` of `head_dim`, which must cover `expand * hidden_size`
    "mamba2": lambda window: {"num_heads": 8, "head_dim": 8},
    # its default has no windowed layer
    "mellum": lambda window: {"layer_types": ["sliding_attention", "full_attention"]},
    # its sliding window is half of `local_attention` (a span centred on the token)
    "modernbert-decoder": lambda window: {"local_attention": 2 * window},
    # its default puts the sparse-attention indexer on some layers but leaves the indexer's sizes unset
    "qwen4_exp_text": lambda window: {
        "indexer_n_heads": 2,
        "indexer_kv_heads": 1,
        "indexer_head_dim": 8,
        "indexer_budget": 8,
        "indexer_compress_ratio": 2,
    },
    # its blocks repeat `block_types`, three long by default; its recurrent weights are drawn with their own scale
    "recurrent_gemma": lambda window: {"block_types": ["recurrent", "attention"], "w_init_variance_scale": 1.0},
    # its cache rounds the key and value widths (`hidden_size * *_dim_factor`) up to multiples of 64, its layers do not
    "xlstm": lambda window: {"num_heads": 4, "qk_dim_factor": 2.0, "v_dim_factor": 2.0},
    # it routes each token to one expert only, and its default has no windowed layer
    "zaya": lambda window: {"num_experts_per_tok": 1, "layer_types": ["hybrid_sliding", "hybrid"]},
}


def decoder_only_families() -> list[str]:
    """Every decoder-only model type of transformers' `MODEL_FOR_CAUSAL_LM_MAPPING_NAMES`, sorted.

    A type is left out if another auto mapping marks it as something else (an encoder with a causal head, an
    encoder-decoder, a speech or multimodal model), if its default config says `is_encoder_decoder=True`, or if
    it is in `UNBUILDABLE`.
    """
    return list(_decoder_only_families())


@functools.cache
def _decoder_only_families() -> tuple[str, ...]:
    """`decoder_only_families()`, computed once (it builds every default config)."""
    # the causal-LM types, minus those of the other mappings that exist in this version
    causal = set(modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)
    for name in OTHER_KINDS:
        causal -= set(getattr(modeling_auto, name, {}))
    causal -= set(UNBUILDABLE)
    # minus the encoder-decoders their default configs reveal
    with _quiet():
        return tuple(sorted(t for t in causal if not CONFIG_MAPPING[t]().is_encoder_decoder))


def tiny_config(family: str, *, vocab_size: int = 32, window: int = 4) -> PretrainedConfig:
    """A config of `family` small enough that a forward over 40 tokens takes milliseconds.

    **Arguments:**

    - `family`: a model type of `decoder_only_families()`;
    - `vocab_size`: the vocabulary (BOS and padding are token 0; EOS is `None` where the config allows it);
    - `window`: the width of every sliding, local or chunked attention window.

    **Returns:** the config, with 2 layers (more where one of each kind of layer needs them), hidden size 32,
    4 attention heads and 2 key/value heads, and at least one windowed layer where the family has windows.

    **Raises:** `ValueError` if the family's default config cannot be shrunk consistently.
    """
    with _quiet():
        try:
            return _shrink(CONFIG_MAPPING[family], vocab_size, window)
        except Exception as error:  # transformers' validators raise errors of their own types
            raise ValueError(f"cannot shrink the config of {family!r}: {error}") from error


def tiny_family_model(
    family: str,
    *,
    vocab_size: int = 32,
    seed: int = 0,
    dtype: torch.dtype = torch.float64,
    window: int = 4,
    attn_implementation: str = "sdpa",
) -> PreTrainedModel:
    """A small randomly initialised causal LM of `family` (see `tiny_config`), in eval mode.

    The weights are drawn with a large `initializer_range` (0.3) so that next-token distributions are peaked.
    EOS is switched off in its generation config so `generate` runs to the budget. A family without SDPA
    attention falls back to `"eager"`; `model.config._attn_implementation` says which one was used. Mixtures
    of experts run their experts one by one (`"eager"`) in dtypes the grouped matrix product lacks (float64).
    """
    config = tiny_config(family, vocab_size=vocab_size, window=window)
    # experts one by one where the grouped matrix product has no kernel for the dtype (float64)
    experts = None if dtype in GROUPED_MM_DTYPES else "eager"
    # build with the requested attention, or eager where the family has no SDPA kernel
    with _quiet():
        try:
            torch.manual_seed(seed)
            model = AutoModelForCausalLM.from_config(
                config, attn_implementation=attn_implementation, experts_implementation=experts
            )
        except ValueError as error:
            if attn_implementation != "sdpa" or "scaled_dot_product_attention" not in str(error):
                raise
            torch.manual_seed(seed)
            model = AutoModelForCausalLM.from_config(
                config, attn_implementation="eager", experts_implementation=experts
            )
    model = model.to(dtype=dtype).eval()
    # no EOS: generate runs to the budget
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    return model


def _shrink(config_class: type, vocab_size: int, window: int) -> PretrainedConfig:
    """The config of `config_class` with `tiny_config`'s settings, its sub-configs shrunk the same way."""
    windows = _windows(config_class, window)
    # the default config with its windows switched on: its layer types then show which layers have one
    switches = {target: SETTINGS[name] for name in WINDOW_SWITCHES if (target := _field(config_class, name))}
    default = config_class(**switches, **windows)
    # sizes, windows, token ids and a few layers of each kind
    settings = _settings(default) | windows | _token_ids(default, vocab_size)
    settings |= _layers(default, sized=set(settings))
    # sub-configs (attention and feed-forward parts, a text model) by the same rules
    for key in default.sub_configs:
        if (sub := getattr(default, key, None)) is not None:
            settings[key] = _shrink(type(sub), vocab_size, window)
    # the family's own settings, last
    settings |= OVERRIDES.get(config_class.model_type, lambda window: {})(window)
    config = config_class(**settings)
    # token ids the config filled in by itself (EOS lists in place of `None`), moved inside the vocabulary
    for name in _token_ids_outside(config, vocab_size):
        setattr(config, name, vocab_size - 1)
    return config


def _field(config_class: type, name: str) -> str | None:
    """The field of `config_class` that `name` stands for, or `None`.

    `attribute_map` maps a name to the attribute it reads: most configs map a standard name to their own field
    (`hidden_size` to `n_embd`), a few map their field to a legacy name they store it under.
    """
    fields = {f.name for f in dataclasses.fields(config_class)}
    aliases = config_class.attribute_map
    if aliases.get(name) in fields:
        return aliases[name]
    if name in fields:
        return name
    return next((field for field, stored in aliases.items() if stored == name and field in fields), None)


def _value(config: PretrainedConfig, field: str) -> Any:
    """The value of `field` in `config`, also where reading it is redirected or refused (per-layer attributes)."""
    try:
        return getattr(config, field)
    except Exception:  # heterogeneous configs refuse to read a global value of a per-layer attribute
        return vars(config).get(field)


def _settings(default: PretrainedConfig) -> dict[str, Any]:
    """`SETTINGS` under the field names of `default`'s class.

    An alias defers to its target's own entry; an `OPTIONAL` entry the default leaves `None` stays `None`.
    Compressed attention (a `kv_lora_rank`) has one key/value head per query head and rotary heads as wide as
    `qk_rope_head_dim`.
    """
    config_class = type(default)
    settings = {}
    for name, value in SETTINGS.items():
        target = _field(config_class, name)
        if target is None or (target != name and target in SETTINGS):
            continue
        if name not in OPTIONAL or _value(default, target) is not None:
            settings[target] = value
    if _field(config_class, "kv_lora_rank"):
        heads, rotary = SETTINGS["num_attention_heads"], SETTINGS["qk_rope_head_dim"]
        settings |= {_field(config_class, "num_key_value_heads") or "num_key_value_heads": heads}
        settings |= {_field(config_class, "head_dim") or "head_dim": rotary}
    return settings


def _windows(config_class: type, window: int) -> dict[str, int]:
    """Every window field of `config_class` set to `window`."""
    return {target: window for name in WINDOWS if (target := _field(config_class, name))}


def _token_ids(default: PretrainedConfig, vocab_size: int) -> dict[str, Any]:
    """The vocabulary, BOS and padding at 0, no EOS, and any other special token id moved inside the vocabulary."""
    config_class = type(default)
    vocabularies = ("vocab_size", "vocab_size_per_layer_input", "unpadded_vocab_size")
    settings: dict[str, Any] = {target: vocab_size for name in vocabularies if (target := _field(config_class, name))}
    for name in (f.name for f in dataclasses.fields(config_class)):
        value = _value(default, name)
        if name in ("bos_token_id", "pad_token_id"):
            settings[name] = 0
        elif name == "eos_token_id":
            settings[name] = None if _accepts_none(config_class, name) else vocab_size - 1
        elif name.endswith("_token_id") and isinstance(value, int) and not 0 <= value < vocab_size:
            settings[name] = vocab_size - 1
    return settings


def _token_ids_outside(config: PretrainedConfig, vocab_size: int) -> list[str]:
    """The `*_token_id` fields of `config` with an id (or a list holding one) outside the vocabulary."""
    outside = []
    for name in (f.name for f in dataclasses.fields(type(config)) if f.name.endswith("_token_id")):
        value = _value(config, name)
        ids = value if isinstance(value, (list, tuple)) else [value]
        if any(isinstance(i, int) and not 0 <= i < vocab_size for i in ids):
            outside.append(name)
    return outside


def _accepts_none(config_class: type, name: str) -> bool:
    """Whether the field `name` of `config_class` may be `None`."""
    annotation = {f.name: f.type for f in dataclasses.fields(config_class)}[name]
    return "None" in str(annotation)


def _layers(default: PretrainedConfig, sized: set[str]) -> dict[str, Any]:
    """`num_hidden_layers` and every per-layer list cut down to a few layers: one of each kind the default has.

    A per-layer list is a list as long as the default's layers (such as `layer_types`) or a list of layer
    indices (such as `mlp_only_layers`); one of the `sized` fields (a per-layer `intermediate_size`) keeps its
    size instead. Layers are kept in order, the first of each kind, at least 2.
    """
    layers_field = _field(type(default), "num_hidden_layers")
    count = getattr(default, layers_field, None) if layers_field else None
    if not isinstance(count, int):
        return {}
    # the per-layer lists and index lists of the default
    per_layer, indices = {}, {}
    for name in (f.name for f in dataclasses.fields(type(default))):
        value = _value(default, name)
        if not isinstance(value, (list, tuple)) or not value or name in sized:
            continue
        if _is_index_list(value, count):
            indices[name] = set(value)
        elif len(value) == count:
            per_layer[name] = value
    # the first layer of each kind, and more layers until there are 2
    kinds = [tuple(v[i] for v in per_layer.values()) + tuple(i in v for v in indices.values()) for i in range(count)]
    chosen = [i for i in range(count) if kinds[i] not in kinds[:i]]
    chosen = sorted(chosen + [i for i in range(count) if i not in chosen][: max(0, 2 - len(chosen))])
    settings: dict[str, Any] = {layers_field: len(chosen)}
    for name, value in per_layer.items():
        settings[name] = type(value)(value[i] for i in chosen)
    for name, members in indices.items():
        settings[name] = [j for j, i in enumerate(chosen) if i in members]
    return settings


def _is_index_list(value: list | tuple, count: int) -> bool:
    """Whether `value` is a strictly increasing list of layer indices below `count` (not a per-layer list)."""
    if not all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v < count for v in value):
        return False
    increasing = all(a < b for a, b in zip(value, value[1:], strict=False))
    return increasing and (len(value) != count or list(value) == list(range(count)))


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Silence transformers' warnings about the default configs' token ids and sizes."""
    verbosity = logging.get_verbosity()
    logging.set_verbosity_error()
    try:
        yield
    finally:
        logging.set_verbosity(verbosity)
