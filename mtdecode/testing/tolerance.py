"""How far apart two evaluations of the same numbers may be when they differ only in rounding.

Two correct implementations of one forward pass (a forward over k tokens and k forwards over
one token; an AVX2 kernel and an AVX-512 one; one thread and two) add the same terms in a
different order, so their results differ in the last bits. A test that compares them needs a
tolerance, and that tolerance must come from the computation, not from what one host printed.

**The rule.** `rounding_tolerance` returns gamma_n * S, where

- gamma_n = n u / (1 - n u) bounds the relative error of a sum of n rounded terms, measured
  against the sum of their magnitudes (Higham, *Accuracy and Stability of Numerical
  Algorithms*, 2nd ed., Lemma 3.1 and Section 3.1);
- u is the unit roundoff of the **least precise** arithmetic on the way: 2^-53 for float64,
  2^-24 for float32, 2^-11 for float16, 2^-8 for bfloat16. transformers' eager attention
  computes its softmax in float32 whatever the model's dtype
  (`softmax(scores, dim=-1, dtype=torch.float32)` in `eager_attention_forward`), so an eager
  float64 model works at float32's u: that is why it differs from itself at about 1e-7
  between kernels whose softmax sums its terms in another order (AVX2's 8 lanes against 16 or
  a scalar loop), while the sdpa path agrees to about 1e-15;
- n is the number of rounded terms accumulated along the longest chain of the forward: per
  layer the query/key/value, output and MLP input projections (3 x hidden), the MLP output
  projection (intermediate), the attention scores (head_dim) and the weighted sum over the
  keys, then the output layer (hidden);
- S is the magnitude of the values compared (the largest |logit| of the reference).

It is a first-order estimate that takes the network's amplification of an early error as 1:
not a proof for any network, but a figure derived from precision and sizes alone, with room to
spare. `benchmarks/rounding.py` prints the measured differences against it under every kernel
set of this machine kind; they sit two orders of magnitude below it, and the mistakes the
tests look for (a hidden key, a position off by one) sit two or more orders above it
(`tests/test_adapter.py::test_the_tolerance_is_far_below_a_real_mistake`).
"""

import torch
from transformers import PretrainedConfig

from mtdecode.model import CausalLM
from mtdecode.tensor_types import Float, Tensor

#: unit roundoff u = 2^-(mantissa bits + 1) of each floating-point dtype
UNIT_ROUNDOFF = {
    torch.float64: 2.0**-53,
    torch.float32: 2.0**-24,
    torch.float16: 2.0**-11,
    torch.bfloat16: 2.0**-8,
}


def unit_roundoff(dtype: torch.dtype) -> float:
    """u for `dtype`; **Raises:** `ValueError` for a dtype that is not a floating-point type listed here."""
    if dtype not in UNIT_ROUNDOFF:
        raise ValueError(f"no unit roundoff known for {dtype}; expected one of {list(UNIT_ROUNDOFF)}")
    return UNIT_ROUNDOFF[dtype]


def working_dtype(model) -> torch.dtype:
    """The least precise dtype any step of the model's forward runs in: the model's own, except that
    eager attention takes its softmax in float32 (so a float64 eager model works at float32)."""
    adapter = CausalLM.wrap(model)
    dtype = adapter.dtype
    if adapter.config._attn_implementation == "eager" and unit_roundoff(dtype) < unit_roundoff(torch.float32):
        return torch.float32
    return dtype


def accumulation_length(config: PretrainedConfig, keys: int) -> int:
    """n: rounded terms summed along the longest chain of one forward over a context of `keys` tokens."""
    hidden = config.hidden_size
    head_dim = getattr(config, "head_dim", None) or hidden // config.num_attention_heads
    per_layer = 3 * hidden + config.intermediate_size + head_dim + keys
    return config.num_hidden_layers * per_layer + hidden


def rounding_tolerance(model, reference: Float[Tensor, "*shape"], *, keys: int) -> float:
    """gamma_n * max|reference|: how far a correct evaluation of `reference` (logits of `model` over a
    context of `keys` tokens) may lie from another correct one. See the module docstring."""
    adapter = CausalLM.wrap(model)
    n = accumulation_length(adapter.config, keys)
    nu = n * unit_roundoff(working_dtype(adapter))
    if nu >= 1:
        raise ValueError(f"n u = {nu:.3g} >= 1: {adapter.dtype} cannot bound a sum of {n} terms")
    return nu / (1 - nu) * float(reference.abs().max())


def near_tie(model, logits: Float[Tensor, " vocab"], *, keys: int) -> float:
    """The largest logit gap between two tokens that rounding alone can reverse: each evaluation may be off
    by `rounding_tolerance`, so two of them can disagree on the order of tokens up to twice that apart."""
    return 2 * rounding_tolerance(model, logits, keys=keys)
