"""The int8 option (`load_model(..., quantize="int8")`, `mtdecode.zoo.int8`): each row's output is
independent of the other rows fed with it (bitwise), the product is within the error that
quantization allows, and in float64 strategies reproduce the quantized model's own greedy tokens."""

import copy
import functools
import os
import subprocess
import sys

import pytest
import torch

import mtdecode
from mtdecode.strategies import Lookahead, Speculative
from mtdecode.testing import assert_greedy_parity, tiny_model
from mtdecode.zoo import int8
from mtdecode.zoo.int8 import LEVELS, Int8Linear, exact_int_mm, int8_linears

#: int8 layers exist only where torch._int_mm is exact (CPUs with VNNI); elsewhere they are refused (tested below)
needs_exact_int_mm = pytest.mark.skipif(not exact_int_mm(), reason="torch._int_mm saturates on this CPU (no VNNI)")

VOCAB = 64


def layer(seed: int = 0, *, bias: bool = True, dtype=torch.float32) -> torch.nn.Linear:
    torch.manual_seed(seed)
    return torch.nn.Linear(48, 40, bias=bias).to(dtype)


@needs_exact_int_mm
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_row_gives_the_same_bits_whatever_rows_come_with_it(dtype):
    q = Int8Linear(layer(dtype=dtype))
    x = torch.randn(17, 48, dtype=dtype, generator=torch.Generator().manual_seed(1))
    x[3] *= 1000  # one row with huge activations: with a shared scale it would crush every other row
    together = q(x)
    for row in range(17):
        assert torch.equal(q(x[row : row + 1]), together[row : row + 1])


@needs_exact_int_mm
def test_the_product_is_within_the_quantization_error():
    """|x w - s_x x_q s_w w_q| <= sum_k |x_k| s_w / 2 + |w_k| s_x / 2 + s_x s_w / 4 per output (round to nearest
    halves a step), plus float64 rounding, which is far below it."""
    linear = layer(bias=False, dtype=torch.float64)
    q = Int8Linear(linear)
    x = torch.randn(9, 48, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    s_x = x.abs().amax(1, keepdim=True) / LEVELS  # (rows, 1)
    w = linear.weight.detach()
    s_w = w.abs().amax(1) / LEVELS  # (out,)
    bound = x.abs() @ (s_w[:, None] / 2).expand_as(w).T + s_x / 2 * w.abs().sum(1) + 48 * s_x * s_w / 4
    error = (q(x) - x @ w.T).abs()
    assert bool((error <= bound).all())
    assert error.max() > 0  # it is a different model
    assert torch.allclose(q.dequantized(), w, atol=float(s_w.max()) / 2 + 1e-12)


@functools.cache
def int8_model():
    """A float64 tiny Llama whose linear layers are int8 (dims divisible by 8)."""
    return mtdecode.CausalLM(int8_linears(copy.deepcopy(tiny_model("llama", vocab_size=VOCAB, seed=5))))


@needs_exact_int_mm
def test_the_int8_model_obeys_masks_and_strategies_stay_exact_with_it():
    """`CausalLM` probes that a hidden token changes nothing: torch's per-tensor dynamic quantization fails
    that probe, per-row scales pass it. Then speculative and lookahead equal greedy decoding of the int8 model."""
    model = int8_model()  # wrapping ran the probe
    assert isinstance(model.hf.lm_head, Int8Linear)
    draft = tiny_model("llama", vocab_size=VOCAB, seed=6, layers=1)
    for strategy in (Speculative(draft, 3), Lookahead(3, 3, 3)):
        for prompt in ([1, 2, 3], [7] * 5, list(range(10))):
            assert_greedy_parity(model, prompt, strategy, max_new_tokens=24)


def test_a_layer_int_mm_cannot_take_is_refused():
    model = torch.nn.Sequential(torch.nn.Linear(12, 16))
    with pytest.raises(ValueError, match="divisible by 8"):
        int8_linears(model)


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"quantize": "int4"}, "quantize must be None or 'int8'"),
        ({"quantize": "int8", "dtype": torch.float64}, "needs device='cpu' and dtype=torch.float32"),
        ({"quantize": "int8", "device": "meta"}, "needs device='cpu'"),
    ],
)
def test_nonsense_quantize_settings_are_refused_before_loading(settings, message):
    with pytest.raises(ValueError, match=message):
        mtdecode.load_model("no-such-folder", **settings)


@needs_exact_int_mm
def test_torch_dynamic_quantization_would_let_rows_influence_each_other():
    """Why the module has its own layer: torch's dynamic int8 layer quantizes all rows with one scale, so one row
    with large activations changes the others' outputs (on SmolLM2, `CausalLM`'s mask probe refuses such a model:
    a hidden token moved the logits by 1.86 where a visible one moved them by 9.68)."""
    import warnings

    from torch.ao.quantization import quantize_dynamic

    x = torch.randn(17, 48, generator=torch.Generator().manual_seed(1))
    x[3] *= 1000
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = quantize_dynamic(torch.nn.Sequential(layer()), {torch.nn.Linear}, dtype=torch.qint8)
    assert not torch.equal(theirs(x[:1]), theirs(x)[:1])
    ours = Int8Linear(layer())
    assert torch.equal(ours(x[:1]), ours(x)[:1])


def test_int8_layers_are_refused_where_int_mm_saturates(monkeypatch):
    monkeypatch.setattr(int8, "exact_int_mm", lambda: False)
    with pytest.raises(RuntimeError, match="saturates"):
        Int8Linear(layer())
    with pytest.raises(RuntimeError, match="saturates"):
        int8_linears(torch.nn.Sequential(layer()))


def test_the_check_sees_the_saturation_of_a_cpu_without_vnni():
    """oneDNN limited to AVX2 (as on AMD before Zen 4) adds byte products in 16-bit pairs: the check must say so."""
    code = "from mtdecode.zoo.int8 import exact_int_mm; print(exact_int_mm())"
    env = {**os.environ, "ONEDNN_MAX_CPU_ISA": "AVX2"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
