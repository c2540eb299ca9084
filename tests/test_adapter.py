"""The model adapter: its logits equal transformers' own forward (the first test worth writing),
and models it cannot drive are refused with a clear error."""

import pytest
import torch

from mtdecode import CausalLM, KVCache, UnsupportedModelError, masks
from mtdecode.attention import GROUPED_SDPA
from mtdecode.model import probe
from mtdecode.testing import tiny_model
from mtdecode.testing.models import IgnoresMask, IgnoresPositions, MasksByColumn, broken_copy
from mtdecode.testing.tolerance import rounding_tolerance

from conftest import DEVICES

SEQUENCE = [5, 9, 2, 33, 17, 8, 40, 1, 12, 60, 3, 7]


def hf_logits(model, tokens):
    with torch.no_grad():
        return model(torch.tensor([tokens], device=model.device)).logits[0]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "family, overrides",
    [
        ("llama", {}),
        ("llama", {"attn_implementation": "eager"}),
        ("qwen2", {}),
        ("mistral", {}),
        ("mistral", {"sliding_window": 4}),  # the adapter applies the window through the mask
        ("qwen2", {"use_sliding_window": True, "sliding_window": 3, "max_window_layers": 1}),  # mixed layers
    ],
)
def test_adapter_logits_equal_transformers(family, overrides, device):
    model = tiny_model(family, device=device, **overrides)
    adapter = CausalLM(model)
    cache = KVCache()
    # prompt in one forward, then the rest one token at a time, as decoding does
    logits = [
        adapter.forward(
            torch.tensor([SEQUENCE[:5]], device=device),
            torch.arange(5, device=device)[None],
            masks.causal(5, 0, device=device)[None, None],
            cache,
        )[0]
    ]
    cache.commit()
    for i in range(5, len(SEQUENCE)):
        logits.append(
            adapter.forward(
                torch.tensor([[SEQUENCE[i]]], device=device),
                torch.tensor([[i]], device=device),
                masks.causal(1, i, device=device)[None, None],
                cache,
            )[0]
        )
        cache.commit()
    reference = hf_logits(model, SEQUENCE)
    # float64 with sdpa agrees to ~1e-15; eager attention takes its softmax in float32 (~1e-7): the
    # tolerance follows the precision the computation really runs in (mtdecode.testing.tolerance)
    tolerance = rounding_tolerance(model, reference, keys=len(SEQUENCE))
    torch.testing.assert_close(torch.cat(logits), reference, rtol=0, atol=tolerance)


@pytest.mark.parametrize("attn_implementation", ["sdpa", "eager"])
def test_the_tolerance_is_far_below_a_real_mistake(attn_implementation):
    """Control for the test above: the mistakes an adapter can make (a position off by one, a key the
    mask should show but hides) move the logits by at least 100 times the rounding tolerance."""
    model = tiny_model("llama", attn_implementation=attn_implementation)
    adapter = CausalLM(model)
    reference = hf_logits(model, SEQUENCE)
    tolerance = rounding_tolerance(model, reference, keys=len(SEQUENCE))
    n = len(SEQUENCE)
    ids = torch.tensor([SEQUENCE])
    off_by_one = torch.arange(n)
    off_by_one[-1] += 1  # the last token one place too far (rotary positions only matter relative to each other)
    shifted = adapter.forward(ids, off_by_one[None], masks.causal(n, 0)[None, None], KVCache())[0]
    hidden = masks.causal(n, 0)
    hidden[n - 1, n - 2] = False  # the last token cannot see the one before it
    leaked = adapter.forward(ids, torch.arange(n)[None], hidden[None, None], KVCache())[0]
    assert (shifted[-1] - reference[-1]).abs().max() > 100 * tolerance
    assert (leaked[-1] - reference[-1]).abs().max() > 100 * tolerance


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_grouped_attention_verifies_a_tree_as_transformers_sdpa_does(dtype, monkeypatch):
    """`mtdecode.attention.grouped_sdpa`, which the models `load_model` loads run: a token tree after a prompt, under
    a 4-D mask, gets the logits transformers' sdpa gives with the same weights (within the rounding tolerance), and
    torch's kernel really attends the grouped heads itself (the forwards with several queries ask it to)."""
    grouped, plain = (tiny_model("llama", dtype=dtype, attn_implementation=a) for a in (GROUPED_SDPA, "sdpa"))
    assert grouped.config.num_key_value_heads < grouped.config.num_attention_heads  # 2 query heads per key head
    asked = []
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def kernel(*args, **kwargs):
        asked.append(kwargs.get("enable_gqa", False))
        return sdpa(*args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", kernel)
    prompt, parents = SEQUENCE[:5], torch.tensor([-1, 0, 0, 1, 3])  # x0, two children of it, a chain below one

    def tree_logits(model):
        adapter, cache = CausalLM(model, probe=False), KVCache()
        adapter.forward(torch.tensor([prompt]), torch.arange(5)[None], masks.causal(5, 0)[None, None], cache)
        cache.commit()
        sees = torch.cat([torch.ones(len(parents), 5, dtype=torch.bool), masks.tree(parents)], dim=1)
        nodes = torch.tensor([SEQUENCE[5 : 5 + len(parents)]])
        return adapter.forward(nodes, masks.tree_positions(parents, prefix=5)[None], sees[None, None], cache)[0]

    asked.clear()
    mine = tree_logits(grouped)
    assert asked == [True] * (2 * grouped.config.num_hidden_layers)  # each layer, both forwards
    reference = tree_logits(plain)
    tolerance = rounding_tolerance(plain, reference, keys=5 + len(parents))
    torch.testing.assert_close(mine, reference, rtol=0, atol=tolerance)


def test_transformers_builds_its_own_masks_for_the_grouped_attention():
    """transformers' `generate` on a left-padded batch (it builds the masks itself) decodes a model running the
    grouped attention as it decodes the same weights under sdpa: the padding stays hidden."""
    grouped, plain = (tiny_model("llama", attn_implementation=a) for a in (GROUPED_SDPA, "sdpa"))
    ids = torch.tensor([[0, 0, 5, 9, 2], [7, 3, 1, 4, 6]])
    attention = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    out = [m.generate(ids, attention_mask=attention, max_new_tokens=6, do_sample=False) for m in (grouped, plain)]
    assert torch.equal(*out)


def test_sliding_window_is_really_applied():
    """Control for the test above: without the window in the mask the logits would differ."""
    windowed = tiny_model("mistral", sliding_window=4)
    unwindowed = tiny_model("mistral", sliding_window=None)
    assert not torch.allclose(hf_logits(windowed, SEQUENCE), hf_logits(unwindowed, SEQUENCE))


def test_mask_shape_is_checked():
    adapter = CausalLM(tiny_model())
    with pytest.raises(ValueError, match=r"expected \(batch, 1, new, cached \+ new\)"):
        adapter.forward(torch.tensor([[1, 2]]), torch.tensor([[0, 1]]), masks.causal(2, 1)[None, None], KVCache())


def test_refuses_attention_that_cannot_take_masks():
    model = tiny_model()
    model.config._attn_implementation = "flash_attention_2"
    with pytest.raises(UnsupportedModelError, match="LlamaForCausalLM.*flash_attention_2.*sdpa"):
        CausalLM(model)


def test_refuses_training_mode_and_non_models():
    with pytest.raises(UnsupportedModelError, match="training mode"):
        CausalLM(tiny_model().train())
    with pytest.raises(UnsupportedModelError, match="PreTrainedModel"):
        CausalLM.wrap(torch.nn.Linear(2, 2))


def test_wrap_is_made_once_per_model():
    model = tiny_model()
    assert CausalLM.wrap(model) is CausalLM.wrap(model)
    adapter = CausalLM.wrap(model)
    assert CausalLM.wrap(adapter) is adapter


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_features_are_the_top_hidden_state_of_the_same_forward(family):
    """`forward_features` (what a feature-level draft reads): the logits are the output layer applied to the
    returned features, bit for bit, so they come from the same forward; every new token has its features even
    where `logits_to_keep` cuts the logits; and they equal transformers' own last hidden state over the whole
    sequence, up to rounding, when fed in two pieces on top of the cache."""
    model = tiny_model(family)
    adapter = CausalLM(model)
    cache = KVCache()
    first, rest = SEQUENCE[:5], SEQUENCE[5:]
    _, head = adapter.forward_features(
        torch.tensor([first]), torch.arange(5)[None], masks.causal(5, 0)[None, None], cache
    )
    cache.commit()
    n = len(rest)
    logits, features = adapter.forward_features(
        torch.tensor([rest]), torch.arange(5, 5 + n)[None], masks.causal(n, 5)[None, None], cache, logits_to_keep=3
    )
    assert features.shape == (1, n, model.config.hidden_size) and logits.shape == (1, 3, model.config.vocab_size)
    with torch.no_grad():
        assert torch.equal(model.get_output_embeddings()(features[:, -3:]), logits)
        reference = model(torch.tensor([SEQUENCE]), output_hidden_states=True).hidden_states[-1]
    tolerance = rounding_tolerance(model, reference, keys=len(SEQUENCE))
    torch.testing.assert_close(torch.cat([head, features], dim=1), reference, rtol=0, atol=tolerance)
    assert cache.columns == len(SEQUENCE)  # the features came with the cache entries, from one forward each


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize(
    "broken, stage",
    [
        (IgnoresMask, "left padding"),
        (IgnoresPositions, "hidden columns with positions that skip them"),
        (MasksByColumn, "hidden columns with positions that skip them"),
    ],
)
def test_the_probe_names_what_a_model_gets_wrong(broken, stage, dtype):
    """Each broken model is refused before the first token, with the stage of the probe it failed, in every dtype;
    the same weights in the real class pass."""
    model = tiny_model(dtype=dtype)
    assert probe.probe_custom_mask(CausalLM(model, probe=False)).dtype == str(dtype).removeprefix("torch.")
    with pytest.raises(UnsupportedModelError, match=f"{broken.__name__} did not obey .*\\({stage}: "):
        CausalLM(broken_copy(model, broken))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_a_dtype_too_coarse_for_the_probe_is_probed_in_float32(dtype, monkeypatch):
    """Where the dtype's own noise would hide a leak (`ProbeReading.resolves` false, forced here for half
    precision), the probe reads a float32 copy: the real class still passes and every broken one is still refused,
    and the model itself stays in its dtype."""
    monkeypatch.setattr(probe.ProbeReading, "resolves", property(lambda reading: reading.dtype != "bfloat16"
                                                                   and reading.dtype != "float16"))  # fmt: skip
    model = tiny_model(dtype=dtype)
    reading = probe.probe_custom_mask(CausalLM(model, probe=False))
    assert reading.dtype == "float32" and model.dtype == dtype
    for broken in (IgnoresMask, IgnoresPositions, MasksByColumn):
        with pytest.raises(UnsupportedModelError, match=f"{broken.__name__} did not obey .* rounding in float32 "):
            CausalLM(broken_copy(model, broken))


def test_a_leak_is_judged_against_the_noise_as_well_as_the_effect():
    """The rule itself: a leak counts above a tenth of the effect and above four times the noise; a dtype whose
    noise reaches an eighth of the effect cannot resolve a leak."""
    quiet = probe.ProbeReading("float32", effect=10.0, noise=1e-4, leaks=(("a", 1e-4), ("b", 1.01)))
    assert quiet.threshold == pytest.approx(1.0) and quiet.resolves and quiet.failed() == ("b", 1.01)
    noisy = probe.ProbeReading("bfloat16", effect=10.0, noise=0.5, leaks=(("a", 1.5), ("b", 1.99)))
    assert noisy.threshold == pytest.approx(2.0) and noisy.resolves and noisy.failed() is None
    deaf = probe.ProbeReading("bfloat16", effect=10.0, noise=1.25, leaks=())
    assert not deaf.resolves


def test_alibi_is_refused_with_its_reason():
    """Falcon with ALiBi builds its bias from a 2-D padding mask (it crashed on a 4-D one): refused, saying why."""
    from transformers import AutoModelForCausalLM

    from mtdecode.testing.families import tiny_config

    config = tiny_config("falcon")
    config.alibi = True
    model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa").to(torch.float64).eval()
    with pytest.raises(UnsupportedModelError, match="FalconForCausalLM uses ALiBi, a bias it builds from a 2-D"):
        CausalLM(model)
