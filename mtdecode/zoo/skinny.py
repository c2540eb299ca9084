"""Faster linear layers for a few rows at a time on CPU.

Multi-token strategies feed the target 2 to 8 tokens per forward. On this project's CPU
(torch 2.13, MKL) `F.linear` over 2 or 3 rows costs about as much as 2 or 3 separate
one-row products, so verifying k guesses costs nearly k greedy steps. Computing the same
product as `(weight @ x.T).T` takes a faster MKL path: measured with
`python benchmarks/forward_cost.py`, SmolLM2's forward over 2 to 5 new tokens then costs
about what a 1-token forward costs.

One row is the worst case of all: `F.linear` then runs a matrix-vector product, which on
the 2-core AMD EPYC host streamed the weights at about a third of the rate the 2-column
product reaches (the 49,152 x 576 LM head: 7.3 ms for one row, 2.6 ms for two). Feeding the
row twice and keeping one column made SmolLM2's 1-token forward 42 ms -> 28 ms there; it
speeds up greedy decoding and every draft model alike. Likewise 2 and 3 rows run fastest
padded to 4 columns (`PADDED_WIDTH`). Padding repeats a real row, and every column of a
product is computed on its own, so the padding changes no row's value beyond rounding.

The result is the same product summed in a different order, so it can differ from
`F.linear` in the last bits; like any change of batch shape, it does not change what a
strategy computes, only rounding. `load_model` applies it to CPU models it builds;
`skinny_linears(model)` applies it to any model.
"""

import torch
from torch import nn

from mtdecode.tensor_types import Float, Tensor

#: row counts up to this use the transposed product (measured crossover: about 8 to 12 rows)
MAX_SKINNY_ROWS = 8
#: rows -> columns actually computed (measured in SmolLM2's forward on the 2-core AMD EPYC host: 1 row as a
#: matrix-vector product 42 ms, as 2 columns 28 ms; 2 and 3 rows as themselves 35 and 39 ms, as 4 columns 30 and 32)
PADDED_WIDTH = {1: 2, 2: 4, 3: 4}


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


class SkinnyLinear(nn.Linear):
    """An `nn.Linear` whose forward is `skinny_matmul` (same parameters, same state dict)."""

    def forward(self, x: Tensor) -> Tensor:
        y = skinny_matmul(x, self.weight)
        return y if self.bias is None else y + self.bias


def skinny_linears(model: nn.Module, enable: bool = True) -> nn.Module:
    """Switch every plain `nn.Linear` in `model` to `SkinnyLinear` (or back, with `enable=False`),
    in place; returns `model`."""
    old, new = (nn.Linear, SkinnyLinear) if enable else (SkinnyLinear, nn.Linear)
    for module in model.modules():
        if type(module) is old:
            module.__class__ = new
    return model
