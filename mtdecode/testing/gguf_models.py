"""The oracle's tiny Llama models as GGUF files, for engines that read only GGUF and take only text.

llama.cpp's example programs load a `.gguf` file and read the prompt as text (`-p`). To judge them
on exact token ids, `write_gguf(model, path)` writes a transformers Llama model's weights in float32
with a vocabulary whose tokens spell every prompt as text and back without ambiguity:

- token `i` is the single character `chr(SPELLING_START + i)` (CJK ideographs, then Hangul: every
  one is three bytes of UTF-8, and no token is a prefix of another);
- the tokenizer is llama.cpp's `rwkv` kind, a longest-match trie over those bytes, so `spell(ids)`
  tokenizes to `ids` exactly; it adds no BOS token and no leading space, and it names no
  end-of-sequence token unless the model's generation config does (`llama-eos`).

The query and key projections are stored in the row order llama.cpp's rotary embedding expects (each
head's two halves interleaved); transformers' own GGUF loader undoes that, which the tests use to
check the file: `AutoModelForCausalLM.from_pretrained(folder, gguf_file=...)` gives back the same
float32 weights.
"""

from collections.abc import Sequence
from pathlib import Path

import torch
from einops import rearrange

#: the first character of the spelling vocabulary (U+4E00, the first CJK unified ideograph)
SPELLING_START = 0x4E00
#: the largest vocabulary that can be spelled: the characters up to the surrogates (U+D800)
SPELLING_SIZE = 0xD800 - SPELLING_START


def spell(tokens: Sequence[int]) -> str:
    """The text whose tokens, in a file `write_gguf` wrote, are `tokens`."""
    if any(not 0 <= t < SPELLING_SIZE for t in tokens):
        raise ValueError(f"token ids must lie in [0, {SPELLING_SIZE}); got {list(tokens)}")
    return "".join(chr(SPELLING_START + t) for t in tokens)


def read_spelled(text: str, vocab: int) -> list[int]:
    """The token ids that `text` spells (the inverse of `spell`); any other character is an error."""
    tokens = [ord(c) - SPELLING_START for c in text]
    stray = [c for c, t in zip(text, tokens, strict=True) if not 0 <= t < vocab]
    if stray:
        raise ValueError(f"{stray[0]!r} is not a token of this {vocab}-token vocabulary (in {text!r})")
    return tokens


def _interleave_halves(weight: torch.Tensor, heads: int) -> torch.Tensor:
    """Rows of a query or key projection, reordered from transformers' rotary layout (each head's first half,
    then its second) to llama.cpp's (pairs side by side)."""
    return rearrange(weight, "(heads two half) d -> (heads half two) d", heads=heads, two=2)


def write_gguf(model, path: str | Path, *, vocabulary_of: str | Path | None = None) -> Path:
    """Write `model` (a transformers `LlamaForCausalLM`, any float dtype) to `path` as a float32 GGUF file with
    the spelling vocabulary (see the module docstring), or with the tokenizer of the GGUF file `vocabulary_of`
    (a draft for a real model: llama.cpp's speculative programs ask the draft for the target's vocabulary).
    Returns the path."""
    import gguf

    config = model.config
    if config.model_type != "llama":
        raise ValueError(f"only Llama models are written as GGUF here; got model_type {config.model_type!r}")
    if vocabulary_of is None and config.vocab_size > SPELLING_SIZE:
        raise ValueError(f"a vocabulary of {config.vocab_size} cannot be spelled (at most {SPELLING_SIZE} tokens)")
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    rope = getattr(config, "rope_parameters", None) or {}
    if rope.get("rope_type", "default") != "default":
        raise ValueError(f"rope scaling {rope.get('rope_type')!r} is not written here")
    path = Path(path)
    writer = gguf.GGUFWriter(str(path), "llama")
    # the hyperparameters llama.cpp reads for its llama architecture
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(float(rope.get("rope_theta", getattr(config, "rope_theta", 10_000.0))))
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    if vocabulary_of is not None:
        _copy_tokenizer(writer, vocabulary_of, config.vocab_size)
    else:  # the spelling vocabulary: one character per token, all of them plain text (none special)
        writer.add_tokenizer_model("rwkv")
        writer.add_token_list([spell([t]) for t in range(config.vocab_size)])
        writer.add_token_types([gguf.TokenType.NORMAL] * config.vocab_size)
        eos = model.generation_config.eos_token_id
        if eos is not None:
            writer.add_eos_token_id(eos if isinstance(eos, int) else eos[0])
    # the weights, renamed and (queries, keys) reordered for llama.cpp's rotary embedding
    for name, tensor in _gguf_tensors(model, heads, kv_heads):
        writer.add_tensor(name, tensor.detach().to(torch.float32).contiguous().numpy())
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _copy_tokenizer(writer, path: str | Path, vocab: int) -> None:
    """Every `tokenizer.*` field of the GGUF file at `path`, written again by `writer`."""
    import gguf

    fields = gguf.GGUFReader(str(path)).fields
    tokens = fields["tokenizer.ggml.tokens"].contents()
    if len(tokens) != vocab:
        raise ValueError(f"{path} has {len(tokens)} tokens but the model has a vocabulary of {vocab}")
    for name, field in fields.items():
        if name.startswith("tokenizer."):
            kind = field.types[0]
            inner = field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
            writer.add_key_value(name, field.contents(), kind, sub_type=inner)


def _gguf_tensors(model, heads: int, kv_heads: int):
    """(GGUF name, tensor) for every weight of a transformers Llama model."""
    state = model.state_dict()
    yield "token_embd.weight", state["model.embed_tokens.weight"]
    for i in range(model.config.num_hidden_layers):
        layer = f"model.layers.{i}."
        yield f"blk.{i}.attn_norm.weight", state[layer + "input_layernorm.weight"]
        yield f"blk.{i}.attn_q.weight", _interleave_halves(state[layer + "self_attn.q_proj.weight"], heads)
        yield f"blk.{i}.attn_k.weight", _interleave_halves(state[layer + "self_attn.k_proj.weight"], kv_heads)
        yield f"blk.{i}.attn_v.weight", state[layer + "self_attn.v_proj.weight"]
        yield f"blk.{i}.attn_output.weight", state[layer + "self_attn.o_proj.weight"]
        yield f"blk.{i}.ffn_norm.weight", state[layer + "post_attention_layernorm.weight"]
        yield f"blk.{i}.ffn_gate.weight", state[layer + "mlp.gate_proj.weight"]
        yield f"blk.{i}.ffn_up.weight", state[layer + "mlp.up_proj.weight"]
        yield f"blk.{i}.ffn_down.weight", state[layer + "mlp.down_proj.weight"]
    yield "output_norm.weight", state["model.norm.weight"]
    yield "output.weight", state["lm_head.weight"]
