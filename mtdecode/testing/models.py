"""Tiny random transformers models for fast, exact tests (float64 on CPU by default)."""

import torch
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    PreTrainedModel,
    Qwen2Config,
    Qwen2ForCausalLM,
)

from mtdecode.cache import cache_keyword

FAMILIES = {
    "llama": (LlamaConfig, LlamaForCausalLM),
    "qwen2": (Qwen2Config, Qwen2ForCausalLM),
    "mistral": (MistralConfig, MistralForCausalLM),
}


def tiny_model(
    family: str = "llama",
    *,
    vocab_size: int = 64,
    seed: int = 0,
    dtype: torch.dtype = torch.float64,
    device: str | torch.device = "cpu",
    layers: int = 2,
    hidden: int = 32,
    attn_implementation: str = "sdpa",
    **config_overrides,
) -> PreTrainedModel:
    """A small randomly initialised causal LM of the given family, in eval mode.

    The weights are drawn with a large `initializer_range` (0.3) so that next-token
    distributions are peaked and greedy continuations are not near ties.
    EOS is switched off in its generation config so `generate` runs to the budget
    unless an EOS id is passed explicitly.
    """
    if family not in FAMILIES:
        raise ValueError(f"unknown family {family!r}; choose from {sorted(FAMILIES)}")
    config_class, model_class = FAMILIES[family]
    settings = dict(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        initializer_range=0.3,
        tie_word_embeddings=False,
        bos_token_id=0,
        eos_token_id=None,
        pad_token_id=0,
        attn_implementation=attn_implementation,
    )
    config = config_class(**{**settings, **config_overrides})
    torch.manual_seed(seed)
    model = model_class(config).to(device=device, dtype=dtype).eval()
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    return model


def perturbed(model: PreTrainedModel, scale: float, *, seed: int = 0) -> PreTrainedModel:
    """A copy of `model` with Gaussian noise of relative size `scale` added to every weight.

    A draft made this way agrees with its target often but not always, so every branch of a
    verification rule (accept, reject, bonus token) is exercised.
    """
    import copy

    noisy = copy.deepcopy(model)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for weight in noisy.parameters():
            # float32 weights take float32 noise (5 times faster to draw on a 135 M model); others float64, then cast
            dtype = torch.float32 if weight.dtype == torch.float32 else torch.float64
            noise = torch.randn(weight.shape, generator=generator, dtype=dtype).to(weight)
            weight.add_(scale * weight.abs().mean() * noise)
    return noisy.eval()


def random_head(target: PreTrainedModel, *, every: int = 2, seed: int = 2):
    """A randomly initialised `EagleHead` for `target` (its embeddings and output rows), scoring every `every`-th
    token only (q = 0 on the others), in the target's dtype: a feature-level draft for tests."""
    from mtdecode.zoo.eagle import EagleHead

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        weights = target.get_input_embeddings().weight, target.get_output_embeddings().weight
        head = EagleHead(target.config, *weights, torch.arange(0, target.config.vocab_size, every))
    return head.to(dtype=target.dtype).eval()


#: a minimal chat template in the ChatML style SmolLM2 uses
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def byte_tokenizer():
    """A tokenizer with one token per byte (256) plus `<|pad|>`, `<|im_start|>` and `<|im_end|>` (the EOS),
    and `CHAT_TEMPLATE`: any text round-trips, so tiny models can stand in for real ones end to end."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    backend = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(alphabet)}, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        pad_token="<|pad|>",
        chat_template=CHAT_TEMPLATE,
    )
    tokenizer.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
    return tokenizer


def save_checkpoint(model: PreTrainedModel, folder, tokenizer=None):
    """Save `model` (as float32) and a tokenizer (default: `byte_tokenizer()`) to `folder`, so that
    `mtdecode.load_model(folder)`, `load_tokenizer(folder)` and `mtdecode --model folder` take it."""
    from pathlib import Path

    tokenizer = tokenizer or byte_tokenizer()
    if model.config.vocab_size != len(tokenizer):
        raise ValueError(f"the model's vocabulary has {model.config.vocab_size} tokens, the tokenizer {len(tokenizer)}")
    folder = Path(folder)
    model.to(torch.float32).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


# Models that do not compute what mtdecode's forwards ask: the mask probe (`mtdecode.model.probe`) must refuse each, in
# every dtype. Each is Llama with one defect in its forward; `broken_copy` puts a working model's weights into one.
_CACHE = cache_keyword(LlamaForCausalLM.forward)  # the installed transformers' name for the cache argument


class IgnoresMask(LlamaForCausalLM):
    """Drops the custom 4-D mask it is given (attends causally by column instead)."""

    def forward(self, input_ids=None, attention_mask=None, position_ids=None, cache=None, past_key_values=None, **kw):
        cache = cache if cache is not None else past_key_values  # `past_key_values`: the name before transformers 5.24
        return super().forward(input_ids=input_ids, position_ids=position_ids, **{_CACHE: cache}, **kw)


class IgnoresPositions(LlamaForCausalLM):
    """Numbers its tokens by column, whatever `position_ids` it is given."""

    def forward(self, input_ids=None, attention_mask=None, position_ids=None, cache=None, past_key_values=None, **kw):
        cache = cache if cache is not None else past_key_values
        return super().forward(input_ids=input_ids, attention_mask=attention_mask, **{_CACHE: cache}, **kw)


class MasksByColumn(LlamaForCausalLM):
    """Also hides keys more than 4 columns back, on top of the mask it is given (GPT-Neo's local layers do this with
    their `window_size`)."""

    def forward(self, input_ids=None, attention_mask=None, position_ids=None, cache=None, past_key_values=None, **kw):
        cache = cache if cache is not None else past_key_values
        if isinstance(attention_mask, torch.Tensor) and attention_mask.ndim == 4:
            queries, keys = attention_mask.shape[-2:]
            device = attention_mask.device
            column = (torch.arange(keys, device=device)[None, :] - (keys - queries)
                      - torch.arange(queries, device=device)[:, None])  # fmt: skip
            attention_mask = attention_mask.masked_fill(column < -4, torch.finfo(attention_mask.dtype).min)
        return super().forward(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                               **{_CACHE: cache}, **kw)  # fmt: skip


def broken_copy(model: PreTrainedModel, broken: type[LlamaForCausalLM]) -> PreTrainedModel:
    """`model`'s weights (a Llama) in the broken class `broken`, in the same dtype and on the same device, in eval mode
    (its linear layers plain `nn.Linear`)."""
    copy = broken(model.config).to(device=model.device, dtype=model.dtype).eval()
    copy.load_state_dict(model.state_dict())
    return copy
