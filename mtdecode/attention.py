"""The attention of the models mtdecode loads: transformers' `sdpa`, with grouped heads attended in torch's kernel.

In grouped-query attention a layer has fewer key/value heads than query heads (SmolLM2-135M: 9 query heads share
3 key/value heads). transformers' `sdpa` attention hands torch's kernel one key/value head per query head: given a
mask and more than one query, it first copies every cached key and value head `groups` times (`repeat_kv`). It
skips the copy for a single query, which is what a greedy step feeds. Every other strategy here verifies several
tokens per row under a 4-D mask, so each of its forwards copied the whole cache, in every layer, and greedy's did
not: a cost on the guessing side only, growing with rows times cached tokens.

torch (2.5 and later) attends grouped heads without the copy (`scaled_dot_product_attention(..., enable_gqa=True)`).
`grouped_sdpa` takes that path on CPU, for a mask with more than one query, and hands every other call to
transformers' own `sdpa` function unchanged. It is registered with transformers under `GROUPED_SDPA`, so a model
runs it when loaded with `attn_implementation=GROUPED_SDPA`, as `mtdecode.load_model` loads its models; any other
model keeps the attention it was loaded with.

`python benchmarks/grouped_attention.py` times it against `sdpa` (`docs/benchmark.md`): a forward over several
new tokens per row takes less time, a 1-token step about as much. `tests/test_adapter.py`
checks its logits against `sdpa`'s; `tests/test_batch.py` decodes its Llama batches with it, and the SmolLM2
tests run it, each against greedy decoding.
"""

from typing import no_type_check

import torch
import torch.nn.functional as F
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface
from transformers.utils.import_utils import is_torch_greater_or_equal

from mtdecode.tensor_types import Float, Tensor

#: the name under which transformers knows `grouped_sdpa` (`from_pretrained(..., attn_implementation=GROUPED_SDPA)`)
GROUPED_SDPA = "mtdecode_grouped_sdpa"

#: torch's kernel takes grouped key/value heads itself from torch 2.5 on
_IN_KERNEL = is_torch_greater_or_equal("2.5")


@no_type_check  # per attention layer per forward (see `mtdecode.tensor_types`)
def grouped_sdpa(
    module: torch.nn.Module,
    query: Float[Tensor, "batch heads query head_dim"],
    key: Float[Tensor, "batch kv_heads key head_dim"],
    value: Float[Tensor, "batch kv_heads key head_dim"],
    attention_mask: Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs,
) -> tuple[Float[Tensor, "batch query heads head_dim"], None]:
    """transformers' `sdpa_attention_forward`, except that on CPU grouped heads under a mask with more than one
    query go to torch's kernel as they are (`enable_gqa=True`) instead of being copied per query head first."""
    grouped = key.shape[1] < query.shape[1]
    plain = kwargs.get("softcap") is None and kwargs.get("position_bias") is None
    if not (_IN_KERNEL and grouped and plain and attention_mask is not None and query.shape[2] > 1
            and query.device.type == "cpu"):  # fmt: skip
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, is_causal=is_causal, **kwargs
        )
    out = F.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling, enable_gqa=True
    )  # (batch, heads, query, head_dim)
    return out.transpose(1, 2).contiguous(), None


# the attention, and the masks transformers builds for it when it is given no 4-D mask (its own `generate`): sdpa's
AttentionInterface.register(GROUPED_SDPA, grouped_sdpa)
AttentionMaskInterface.register(GROUPED_SDPA, ALL_MASK_ATTENTION_FUNCTIONS["sdpa"])

__all__ = ["GROUPED_SDPA", "grouped_sdpa"]
