"""Faster linear layers for a few rows at a time on CPU.

Multi-token strategies feed the target 2 to 8 tokens per forward. On this project's CPU
(torch 2.13, MKL) `F.linear` over 2 or 3 rows costs about as much as 2 or 3 separate
one-row products, so verifying k guesses costs nearly k greedy steps. Computing the same
product as `(weight @ x.T).T` takes a faster MKL path: measured with
`python benchmarks/forward_cost.py`, SmolLM2's forward over 2 to 5 new tokens then costs
about what a 1-token forward costs.

One row is the worst case of all: `F.linear` then runs a matrix-vector product, which streams
the weights at a fraction of the rate the 2-column product reaches. Feeding the row twice and
keeping one column speeds up greedy decoding and every draft model alike. Likewise 2 and 3 rows run fastest
padded to 4 columns (`PADDED_WIDTH`). Padding repeats a real row, and every column of a
product is computed on its own, so the padding changes no row's value beyond rounding.

The result is the same product summed in a different order, so it can differ from
`F.linear` in the last bits; like any change of batch shape, it does not change what a
strategy computes, only rounding. `load_model` applies it to CPU models it builds;
`skinny_linears(model)` applies it to any model.

**oneDNN, for float32.** MKL's products for 8 or more rows run far below what a CPU's vector
units do, so a forward over 8 tokens costs about twice a 1-token forward even with the
transposed product. oneDNN (shipped inside torch as `torch.ops.mkldnn`) with the weight copied
once into its blocked layout reads the weights at the memory's rate and keeps the arithmetic
cheap (`python benchmarks/linear_kernels.py` and `python benchmarks/forward_cost.py` measure
both; `docs/benchmark.md` has the figures). It computes the same IEEE float32 products in
another order (`torch.backends.mkldnn` left at its default precision, which is checked),
so again only rounding changes. `SkinnyLinear` takes this path for float32 on CPU when
gradients are off; float64 (which oneDNN does not multiply) and training keep the
transposed product.
"""

from typing import no_type_check

import torch
from torch import nn
from torch.utils.weak import WeakTensorKeyDictionary

from mtdecode.tensor_types import Float, Tensor

#: row counts up to this use the transposed product (measured crossover: about 8 to 12 rows)
MAX_SKINNY_ROWS = 8
#: rows -> columns actually computed (the fastest widths measured in SmolLM2's forward, `benchmarks/forward_cost.py`)
PADDED_WIDTH = {1: 2, 2: 4, 3: 4}


@no_type_check  # per linear layer per forward (see `mtdecode.tensor_types`)
def skinny_matmul(
    x: Float[Tensor, "*rows dim_in"], weight: Float[Tensor, "dim_out dim_in"]
) -> Float[Tensor, "*rows dim_out"]:
    """`x @ weight.T`, taking the faster path for 1 to `MAX_SKINNY_ROWS` rows on CPU: 1 row is computed as 2
    columns, 2 or 3 rows as 4 (the first row repeated), the widths whose kernels were fastest."""
    rows = x.numel() // x.shape[-1]
    if x.device.type != "cpu" or not 1 <= rows <= MAX_SKINNY_ROWS:
        return x @ weight.T
    flat = x.reshape(rows, x.shape[-1])  # (rows, dim_in)
    width = PADDED_WIDTH.get(rows, rows)
    if width > rows:
        flat = torch.cat([flat, flat[:1].expand(width - rows, -1)])  # (width, dim_in)
    return (weight @ flat.T)[:, :rows].T.reshape(*x.shape[:-1], weight.shape[0])


#: False sends float32 through the transposed MKL product too (benchmarks/forward_cost.py compares the two)
ONEDNN = True
#: row count oneDNN's layout is chosen for (measured: 4 and 8 were equally fast from 1 to 32 rows, 1 was slower)
PACKED_FOR_ROWS = 4
_HAVE_ONEDNN = torch.backends.mkldnn.is_available()


@no_type_check
def uses_onednn(x: Tensor, weight: Tensor) -> bool:
    """Whether `fast_matmul` multiplies `x` by `weight` with oneDNN: float32 on CPU, no gradients, default precision."""
    return (
        ONEDNN
        and _HAVE_ONEDNN
        and x.dtype is torch.float32
        and weight.dtype is torch.float32
        and x.device.type == "cpu"
        and not (torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad))
        and _ieee_float32()
    )


@no_type_check
def _ieee_float32() -> bool:
    """False when a user asked oneDNN for bf16 or tf32 products in float32 (they would not be exact float32)."""
    precision = getattr(getattr(torch.backends.mkldnn, "matmul", None), "fp32_precision", "none")
    return precision in ("none", "ieee")


@no_type_check
def packed(weight: Float[Tensor, "dim_out dim_in"]) -> Tensor:
    """oneDNN's blocked copy of `weight`, made once and made again if the weight changes in place."""
    version = (weight.data_ptr(), weight._version)
    entry = _PACKED.get(weight)
    if entry is None or entry[0] != version:
        entry = (version, torch.ops.mkldnn._reorder_linear_weight(weight.detach(), PACKED_FOR_ROWS))
        _PACKED[weight] = entry
    return entry[1]


#: weight -> (its version, oneDNN's blocked copy); entries go with their weights, and a copied model packs its own
_PACKED = WeakTensorKeyDictionary()


@no_type_check
def fast_matmul(
    x: Float[Tensor, "*rows dim_in"], weight: Float[Tensor, "dim_out dim_in"]
) -> Float[Tensor, "*rows dim_out"]:
    """`x @ weight.T` by the fastest path measured: oneDNN for float32 on CPU (`uses_onednn`), else `skinny_matmul`."""
    if uses_onednn(x, weight):
        return torch.ops.mkldnn._linear_pointwise(x, packed(weight), None, "none", [], "")
    return skinny_matmul(x, weight)


class SkinnyLinear(nn.Linear):
    """An `nn.Linear` whose forward is `fast_matmul` (same parameters, same state dict)."""

    @no_type_check
    def forward(self, x: Tensor) -> Tensor:
        y = fast_matmul(x, self.weight)
        return y if self.bias is None else y + self.bias


def skinny_linears(model: nn.Module, enable: bool = True) -> nn.Module:
    """Switch every plain `nn.Linear` in `model` to `SkinnyLinear` (or back, with `enable=False`),
    in place; returns `model`."""
    old, new = (nn.Linear, SkinnyLinear) if enable else (SkinnyLinear, nn.Linear)
    for module in model.modules():
        if type(module) is old:
            module.__class__ = new
    return model
