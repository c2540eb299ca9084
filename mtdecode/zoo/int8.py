"""Int8 linear layers for CPU whose rows never influence each other.

Why not torch's `quantize_dynamic`: it quantizes a layer's whole input with ONE scale, taken
from the largest activation among all the rows fed together. A token's output then depends
on which other tokens share its forward: rejected guesses, a lookahead window, other rows of
the batch. `mtdecode.model`'s mask probe sees it at once (a hidden token changes the output
by a fifth of a visible one's effect), and no strategy could be exact against such a model.

Here every row (token) gets its own scale, and the product runs in integers:

    x_q = round(x / s_x),  s_x = max|x| / 127                  per row
    W_q = round(W / s_w),  s_w = max|W_j| / 127                per output channel j (once, at load)
    y   = (x_q @ W_q^T) * s_x * s_w + bias                     int8 x int8 -> int32, exact

The integer product is exact, so a layer's output for a row is bitwise the same whatever
other rows are fed with it. Attention stays in float, though, and a last-bit difference there
(a k-token forward against k 1-token ones) can move an activation across a step of the int8
grid, a change far larger than the float difference: in float32 an exact strategy then
reproduces the int8 model's own greedy tokens less often than a float32 model's (in float64
such flips are too rare to see; `tests/test_int8.py`). It is also a different model from
float32; `benchmarks/int8_quality.py` measures how different.

`torch._int_mm` (int8 x int8 -> int32) is fast on x86 CPUs for few rows, faster than float32's product and
nearly flat in the rows (`benchmarks/forward_cost.py --paths int8` measures it).

**It is exact only on CPUs with VNNI** (AVX-VNNI or AVX512-VNNI dot-product instructions).
Without them, torch's oneDNN kernels add pairs of byte products in 16-bit integers, which
saturate: with `ONEDNN_MAX_CPU_ISA=AVX2` or `AVX512_CORE`, 9 x 48 by 48 x 40 random int8
matrices came out up to 26,585 off. Such CPUs exist among this project's hosts (AMD before
Zen 4, Intel before Cascade Lake), so `int8_linears` first checks that the product is exact
here (`exact_int_mm`) and refuses with a clear error where it is not.
"""

import functools

import torch
from torch import nn

from mtdecode.tensor_types import Float, Int, Tensor

#: the largest int8 magnitude used (symmetric: -127..127)
LEVELS = 127


@functools.cache
def exact_int_mm() -> bool:
    """Whether `torch._int_mm` sums exactly on this CPU: a product whose int16 pair sums would saturate (127 x 127
    twice is 32,258 per pair, 64 pairs) must come out at 128 x 127 x (-127) in every entry."""
    a, b = torch.full((8, 128), 127, dtype=torch.int8), torch.full((128, 8), -127, dtype=torch.int8)
    return bool((torch._int_mm(a, b) == -128 * 127 * 127).all())


class Int8Linear(nn.Module):
    """`y = x W^T + b` with W in int8 (a scale per output channel) and x quantized per row.

    **Arguments:**

    - `linear`: the float `nn.Linear` to quantize (its weight is read once).

    **Raises:** `RuntimeError` on a CPU where `torch._int_mm` is not exact (`exact_int_mm`).
    """

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        if not exact_int_mm():
            raise RuntimeError(
                "int8 layers need exact int8 products, but torch._int_mm on this CPU saturates (oneDNN without "
                "VNNI instructions, or ONEDNN_MAX_CPU_ISA below AVX2_VNNI); load the model without quantize="
            )
        weight = linear.weight.detach()  # (out, in)
        scale = weight.abs().amax(dim=1).clamp(min=torch.finfo(weight.dtype).tiny) / LEVELS  # (out,)
        quantized = torch.round(weight / scale[:, None]).clamp(-LEVELS, LEVELS).to(torch.int8)
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.register_buffer("weight_t", quantized.t().contiguous())  # (in, out), the layout _int_mm takes
        self.register_buffer("weight_scale", scale)
        self.register_buffer("bias", None if linear.bias is None else linear.bias.detach())

    def forward(self, x: Float[Tensor, "*rows dim_in"]) -> Float[Tensor, "*rows dim_out"]:
        flat = x.reshape(-1, self.in_features)  # (rows, in), in x's own float type
        x_q, x_scale = quantize_rows(flat)
        product = torch._int_mm(x_q, self.weight_t)  # (rows, out), int32, exact
        y = product.to(x.dtype) * (x_scale * self.weight_scale.to(x.dtype))  # per row times per channel
        if self.bias is not None:
            y = y + self.bias.to(x.dtype)
        return y.reshape(*x.shape[:-1], self.out_features)

    def dequantized(self) -> Float[Tensor, "dim_out dim_in"]:
        """The weight this layer multiplies by, as floats (for inspection and tests)."""
        return (self.weight_t.t().to(self.weight_scale.dtype) * self.weight_scale[:, None]).contiguous()


def quantize_rows(x: Float[Tensor, "rows dim"]) -> tuple[Int[Tensor, "rows dim"], Float[Tensor, "rows 1"]]:
    """Each row as int8 with its own scale max|row| / 127 (an all-zero row gets scale 1)."""
    scale = x.abs().amax(dim=1, keepdim=True) / LEVELS
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    return torch.round(x / scale).clamp(-LEVELS, LEVELS).to(torch.int8), scale


def int8_linears(model: nn.Module) -> nn.Module:
    """Replace every `nn.Linear` in `model` (subclasses included) by an `Int8Linear`, in place; returns `model`.

    A tied output layer gets its own int8 copy; the input embedding stays float.

    **Raises:** `ValueError` for layer sizes `torch._int_mm` cannot take; `RuntimeError` as `Int8Linear`.
    """
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.Linear):
                if child.in_features % 8 or child.out_features % 8:
                    raise ValueError(
                        f"{name}: int8 layers need in and out features divisible by 8 "
                        f"(torch._int_mm), got {child.in_features} -> {child.out_features}"
                    )
                setattr(parent, name, Int8Linear(child))
    return model
