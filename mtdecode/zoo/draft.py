"""A Llama whose output layer covers only a subset of the vocabulary.

The draft for SmolLM2 scores only the `head_token_ids` (the most frequent tokens of the
target's own answers): its output layer is those rows of the shared embedding, and its
logits for every other token are -inf, so q gives them probability 0. Speculative
sampling stays exact: a token the draft never proposes is still reachable through the
residual norm(max(0, p - q)), which equals p wherever q is 0.
"""

import torch
from transformers import LlamaForCausalLM
from transformers.modeling_outputs import CausalLMOutputWithPast

from mtdecode.cache import cache_keyword
from mtdecode.tensor_types import Float, Int, Tensor
from mtdecode.zoo.skinny import fast_matmul

#: the output's cache field: `cache` from transformers 5.24, `past_key_values` before
OUTPUT_CACHE = "cache" if "cache" in CausalLMOutputWithPast.__dataclass_fields__ else "past_key_values"


class SubsetHeadLlama(LlamaForCausalLM):
    """`LlamaForCausalLM` with logits computed only for `head_token_ids` (others are -inf)."""

    def __init__(self, config, head_token_ids: Int[Tensor, " head"]) -> None:
        super().__init__(config)
        self.register_buffer("head_token_ids", head_token_ids.long().clone(), persistent=True)
        self.register_buffer("head_cache", None, persistent=False)  # set by freeze_head(); moves with .to()

    def freeze_head(self) -> None:
        """Gather the head's embedding rows once (for inference: the embedding no longer changes)."""
        self.head_cache = self.model.embed_tokens.weight[self.head_token_ids].detach().clone()

    def head_weight(self) -> Float[Tensor, "head dim"]:
        if self.head_cache is not None and not self.training:
            return self.head_cache
        return self.model.embed_tokens.weight[self.head_token_ids]

    def subset_logits(self, hidden: Float[Tensor, "*rows dim"]) -> Float[Tensor, "*rows head"]:
        return fast_matmul(hidden, self.head_weight())

    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        position_ids=None,
        cache=None,
        past_key_values=None,  # the cache's name before transformers 5.24
        use_cache=None,
        logits_to_keep=0,
        **kwargs,
    ) -> CausalLMOutputWithPast:
        cache = cache if cache is not None else past_key_values
        out = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            **{cache_keyword(self.model.forward): cache},
            use_cache=use_cache,
            **kwargs,
        )
        hidden = out.last_hidden_state
        if isinstance(logits_to_keep, torch.Tensor):
            hidden = hidden[:, logits_to_keep]
        elif logits_to_keep:
            hidden = hidden[:, -logits_to_keep:]
        subset = self.subset_logits(hidden)  # (batch, rows, head)
        logits = subset.new_full((*subset.shape[:-1], self.config.vocab_size), -torch.inf)
        logits[..., self.head_token_ids] = subset
        return CausalLMOutputWithPast(logits=logits, **{OUTPUT_CACHE: getattr(out, OUTPUT_CACHE)})
