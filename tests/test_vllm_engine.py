"""vLLM's side of the oracle without vLLM: the models widened for its CPU attention, the EAGLE head's layout, and
the decoder's talk with its workers (against a stand-in worker)."""

import copy
import json
import sys

import pytest
import torch
from einops import rearrange

from mtdecode.testing import coverage
from mtdecode.testing.blackbox import greedy_model, sampling_model
from mtdecode.testing.decoders import DecoderError, run_batch
from mtdecode.testing.vllm_engine import Engines, eagle_head, vllm_decoder, widened_heads, widened_size

PROMPT = torch.tensor([[1, 2, 3, 4, 5, 1, 2, 3, 6, 7, 1, 2]])


@pytest.mark.parametrize(("head", "wide"), [(8, 32), (4, 64), (16, 64), (32, 32), (5, 80)])
def test_a_head_is_widened_to_the_smallest_vllm_size_a_power_of_4_above_it(head, wide):
    assert widened_size(head) == wide


def test_a_head_no_vllm_size_fits_is_refused():
    with pytest.raises(ValueError, match="no head size"):
        widened_size(9)  # 9, 36, 144, 576: none is a size vLLM's CPU attention takes


@pytest.mark.parametrize("label", ["llama", "llama-32k", "sampling"])
def test_the_widened_model_computes_what_the_model_computes(label):
    """In transformers, the widened copy's logits match the model's to float32 rounding (the sums run over more
    terms); undoing the query scale, or putting the rotary pairs anywhere else, gives another model."""
    model = copy.deepcopy(sampling_model()).float() if label == "sampling" else greedy_model(label, torch.float32)
    wide = widened_heads(model)
    assert wide.config.head_dim == widened_size(model.config.head_dim)
    with torch.no_grad():
        expected, got = model(PROMPT).logits, wide(PROMPT).logits
        torch.testing.assert_close(got, expected, atol=1e-4 * expected.abs().max().item(), rtol=0)
        d, size = model.config.head_dim, wide.config.head_dim
        for layer in wide.model.layers:  # the rotary pairs moved to the first dimensions of each head
            for projection in (layer.self_attn.q_proj, layer.self_attn.k_proj):
                heads = rearrange(projection.weight, "(heads dim) hidden -> heads dim hidden", dim=size)
                moved = torch.zeros_like(heads)
                nonzero = heads.abs().sum(-1).sum(0) > 0
                moved[:, :d] = heads[:, nonzero]
                projection.weight.copy_(rearrange(moved, "heads dim hidden -> (heads dim) hidden"))
        assert (wide(PROMPT).logits - expected).abs().max() > 1e-2
        unscaled = widened_heads(model)
        for layer in unscaled.model.layers:
            layer.self_attn.q_proj.weight /= (size // d) ** 0.5
        assert (unscaled(PROMPT).logits - expected).abs().max() > 1e-2


def test_the_eagle_head_has_the_layout_vllm_loads():
    model = greedy_model("llama", torch.float32)
    head = eagle_head(widened_heads(model))
    hidden = model.config.hidden_size
    assert head["fc.weight"].shape == (hidden, 2 * hidden)
    assert {name.split(".")[0] for name in head} == {"fc", "layers"}
    assert not any("input_layernorm" in name for name in head)  # EAGLE's one layer has no input norm
    last = widened_heads(model).model.layers[-1]
    assert head["layers.0.mlp.down_proj.weight"].equal(last.mlp.down_proj.weight)
    assert (head["fc.weight"][:, hidden:] - torch.eye(hidden)).abs().max() < 0.5  # it starts from the state


WORKER_STAND_IN = """\
import json, os, sys
engine = None
for line in sys.stdin:
    request = json.loads(line)
    key = [request["model"], request["speculative"], request["context"]]
    assert engine in (None, key), "one engine per worker"
    engine = key
    assert json.load(open(os.path.join(request["model"], "config.json")))["head_dim"] == 32
    plan = json.loads(os.environ["STAND_IN_WORKER"])
    if plan.get("die"):
        print("worker going down", file=sys.stderr)
        sys.exit(1)
    if "error" in plan:
        print(json.dumps(plan), flush=True)
        continue
    rows = len(request["prompts"])
    answer = {"tokens": [[s % 16] * request["max_new_tokens"] for s in request["seeds"]],
              "drafted": plan["drafted"][:rows], "accepted": plan["accepted"][:rows], "pid": os.getpid()}
    print(json.dumps(answer), flush=True)
"""


def test_the_vllm_decoder_talks_to_one_worker_per_engine_and_counts_each_row(tmp_path, monkeypatch):
    python = tmp_path / "vllm" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(f"#!{sys.executable}\nimport sys\nsys.argv = sys.argv[:1]\n" + WORKER_STAND_IN)
    python.chmod(0o755)
    monkeypatch.setenv("STAND_IN_WORKER", json.dumps({"drafted": [3, 0, 0], "accepted": [1, 0, 2]}))
    engines = Engines(tmp_path)
    decoder = vllm_decoder("ngram", folder=tmp_path, engines=engines)
    models = [greedy_model(label, torch.float32) for label in ("llama", "llama-eos", "llama-ties")]
    try:
        record = coverage.Coverage()
        with coverage.watching(models[0], record):
            got = run_batch(decoder, models[0], [[1], [2], [3]], max_new_tokens=2, temperature=1.0, seeds=[4, 5, 6])
        assert got == [[4, 4], [5, 5], [6, 6]]
        # one call of three rows: the first and the last drafted or accepted, the middle one did neither
        assert (record.calls, record.rows, record.rows_guessing, record.drafted, record.accepted) == (1, 3, 2, 3, 3)
        for model in models:  # each model is another engine, so another worker; two are kept
            decoder(model, [1, 2], max_new_tokens=1, temperature=0.0, top_k=None, top_p=None, seed=0)
        assert len(engines.workers) == Engines.KEPT
        monkeypatch.setenv("STAND_IN_WORKER", json.dumps({"error": "Traceback: ValueError: bad"}))
        engines.close()
        with pytest.raises(DecoderError, match="vLLM raised") as error:
            decoder(models[0], [1, 2], max_new_tokens=1, temperature=0.0, top_k=None, top_p=None, seed=0)
        assert "ValueError: bad" in error.value.traceback
        engines.close()
        monkeypatch.setenv("STAND_IN_WORKER", json.dumps({"die": True}))
        with pytest.raises(DecoderError, match="worker died") as error:
            decoder(models[0], [1, 2], max_new_tokens=1, temperature=0.0, top_k=None, top_p=None, seed=0)
        assert "worker going down" in error.value.traceback
    finally:
        engines.close()


def test_an_unbuilt_vllm_is_a_clear_error(tmp_path):
    decoder = vllm_decoder("none", folder=tmp_path, engines=Engines(tmp_path))
    with pytest.raises(FileNotFoundError, match="make engines"):
        decoder(greedy_model("llama", torch.float32), [1], max_new_tokens=1, temperature=0.0, top_k=None, top_p=None,
                seed=0)  # fmt: skip


def test_an_unknown_method_is_refused():
    with pytest.raises(ValueError, match="choose from none, ngram"):
        vllm_decoder("medusa")
