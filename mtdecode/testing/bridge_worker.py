"""The other side of `mtdecode.testing.bridge`: runs one decoder in this interpreter for an oracle elsewhere.

    python bridge_worker.py package.module:function FOLDER

This script imports only the standard library, torch and transformers (the interpreter running it
need not have mtdecode), and it keeps to Python 3.8 syntax. It adds FOLDER to `sys.path`, imports
the decoder, then answers JSON-lines requests on stdin with one JSON line each on stdout:

- `{"op": "load", "key", "folder", "dtype", "device", "probe"}`: load a model saved by the bridge,
  reply with its fingerprint (a sha256 of every parameter's bytes, the logits of one probe forward);
- `{"op": "decode", "key", "eos", "pad", "prompts", "seeds", "settings"}`: run the decoder on every
  prompt (one call if it takes batches), measuring each forward of the model as
  `mtdecode.testing.coverage` does (tokens fed per row, tokens already cached); reply with the
  outputs and the calls, or with the decoder's traceback;
- `{"op": "drop", "key"}` forgets a model; `{"op": "exit"}` (or the end of stdin) ends the worker.

Whatever the decoder prints goes to stderr: the replies travel on a private copy of the original
stdout, and file descriptor 1 is pointed at stderr before anything else is imported.
"""

import contextlib
import hashlib
import importlib
import json
import os
import sys
import traceback
from typing import no_type_check


def open_channel():
    """Keep the real stdout for replies and send everything else written to stdout (fd 1) to stderr.

    **Returns:** a text file writing to the private copy of the original stdout.
    """
    channel = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return channel


def unshadow_path() -> None:
    """Drop this script's own folder from `sys.path`, so that its neighbours (e.g. `coverage.py`) shadow nothing."""
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]


def import_target(target: str):
    """The decoder named by `"package.module:function"`."""
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise ValueError(f"the target {target!r} is not of the form 'package.module:function'")
    found = importlib.import_module(module_name)
    for part in attribute.split("."):
        found = getattr(found, part)
    return found


@no_type_check  # plain values, per forward (see `mtdecode.tensor_types`)
def cached_length(kwargs: dict):
    """Tokens already in the cache a forward is given (None: no cache), for legacy tuples and Cache objects alike."""
    cache = kwargs.get("cache", kwargs.get("past_key_values"))  # transformers 5.24 renamed it `cache`
    if cache is None:
        return None
    if isinstance(cache, (tuple, list)):  # the legacy format: ((key, value), ...) per layer
        return int(cache[0][0].shape[-2]) if len(cache) and cache[0] is not None else 0
    length = getattr(cache, "get_seq_length", None)
    return int(length()) if length is not None else None


@no_type_check
def fed_tokens(args: tuple, kwargs: dict) -> int:
    """Tokens per row that a forward is fed."""
    import torch

    ids = kwargs.get("input_ids", args[0] if args else None)
    if ids is None:
        ids = kwargs.get("inputs_embeds")
    return int(ids.shape[1]) if isinstance(ids, torch.Tensor) and ids.dim() >= 2 else 1


@contextlib.contextmanager
def counting(model, forwards: list):
    """Append `[fed, cached]` to `forwards` for every forward of `model` (not of copies of it) while the block runs."""

    def hook(module, args, kwargs):
        if module is model:
            forwards.append([fed_tokens(args, kwargs), cached_length(kwargs)])

    handle = model.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        yield forwards
    finally:
        handle.remove()


@contextlib.contextmanager
def default_dtype(dtype):
    """torch's default dtype set to `dtype` while the block runs (None: left as it is)."""
    import torch

    if dtype is None:
        yield
        return
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


def compatible_loading(dtype) -> dict:
    """The keyword arguments this transformers' `from_pretrained` wants for the dtype (`dtype` since 4.56)."""
    import inspect

    from transformers import PreTrainedModel

    parameters = inspect.signature(PreTrainedModel.from_pretrained).parameters
    modern = "dtype" in parameters or _major_version() >= 5
    return {"dtype": dtype} if modern else {"torch_dtype": dtype}


def _major_version() -> int:
    import transformers

    try:
        return int(transformers.__version__.split(".")[0])
    except ValueError:
        return 0


def fingerprint(model, probe: list, dtype_for_masks) -> dict:
    """Hashes of every parameter's bytes (by name) and the logits of one forward over `probe`."""
    import torch

    hashes = {}
    for name, tensor in sorted(model.state_dict().items()):
        data = tensor.detach().cpu().contiguous()
        digest = hashlib.sha256(str(data.dtype).encode() + str(tuple(data.shape)).encode())
        digest.update(data.view(-1).view(torch.uint8).numpy().tobytes() if data.numel() else b"")
        hashes[name] = digest.hexdigest()
    ids = torch.tensor([probe], device=model.device)
    with torch.no_grad(), default_dtype(dtype_for_masks):
        logits = model.forward(input_ids=ids).logits[0].double().cpu().tolist()  # forward(): no hooks fire
    return {"parameters": hashes, "logits": logits}


def probe_dtype(model, probe: list, dtype):
    """The default dtype this model's forwards need: None if they run as they are, else the model's own dtype.

    Older transformers build attention masks with `torch.full(..., torch.finfo(dtype).min)` in the
    default dtype, which overflows for a float64 model unless the default dtype is float64 too.
    """
    import torch

    try:
        with torch.no_grad():
            model.forward(input_ids=torch.tensor([probe], device=model.device))
        return None
    except RuntimeError as error:
        if "overflow" not in str(error) or not dtype.is_floating_point:
            raise
        return dtype


class Worker:
    """The models loaded so far and the decoder, answering one request at a time."""

    def __init__(self, decoder) -> None:
        self.decoder = decoder
        self.models = {}

    def load(self, request: dict) -> dict:
        import torch
        from transformers import AutoModelForCausalLM

        dtype = getattr(torch, request["dtype"])
        folder = request["folder"]
        model = AutoModelForCausalLM.from_pretrained(folder, **compatible_loading(dtype))
        device = request.get("device", "cpu")
        if device != "cpu" and not (device.startswith("cuda") and torch.cuda.is_available()):
            device = "cpu"
        model = model.to(device).eval()
        masks = probe_dtype(model, request["probe"], dtype)
        self.models[request["key"]] = (model, masks)
        return {
            "ok": True,
            "fingerprint": fingerprint(model, request["probe"], masks),
            "default_dtype": str(masks) if masks is not None else None,
            "device": str(model.device),
        }

    def decode(self, request: dict) -> dict:
        model, masks = self.models[request["key"]]
        model.generation_config.eos_token_id = request.get("eos")
        model.generation_config.pad_token_id = request.get("pad")
        settings, prompts, seeds = request["settings"], request["prompts"], request["seeds"]
        calls = []
        try:
            with default_dtype(masks):
                if getattr(self.decoder, "takes_batches", False):
                    calls.append(self.call(model, lambda: self.decoder.batch(model, prompts, seeds=seeds, **settings)))
                else:
                    for index, prompt in enumerate(prompts):
                        one = lambda p=prompt, s=seeds[index]: [self.decoder(model, p, seed=s, **settings)]  # noqa: E731
                        calls.append(self.call(model, one))
        except Exception as error:  # the decoder under test may raise anything: send its traceback back
            return {"ok": False, "error": f"{type(error).__name__}: {error}", "traceback": decoder_traceback(error)}
        outputs = [row for call in calls for row in call["outputs"]]
        return {"ok": True, "outputs": outputs, "calls": calls}

    def call(self, model, run) -> dict:
        """One decoder call, with the forwards it made."""
        forwards = []
        with counting(model, forwards):
            outputs = run()
        return {"outputs": [plain(row) for row in outputs], "forwards": forwards}

    def drop(self, request: dict) -> dict:
        self.models.pop(request["key"], None)
        return {"ok": True}


def decoder_traceback(error: BaseException) -> str:
    """The traceback of `error` from the decoder's first frame on (this worker's own frames left out)."""
    here = os.path.abspath(__file__)
    frames = error.__traceback__
    while frames is not None and frames.tb_next is not None and frames.tb_frame.f_code.co_filename == here:
        frames = frames.tb_next
    return "".join(traceback.format_exception(type(error), error, frames))


def plain(row):
    """A decoder's output row as JSON can carry it (tensors become lists; anything else goes as it is or as repr)."""
    if hasattr(row, "tolist"):
        row = row.tolist()
    try:
        json.dumps(row)
        return row
    except (TypeError, ValueError):
        return repr(row)


def serve(worker: Worker, channel) -> None:
    """Answer requests from stdin until it ends or asks to exit."""
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        op = request.get("op")
        if op == "exit":
            break
        try:
            reply = getattr(worker, op)(request) if op in ("load", "decode", "drop") else {"ok": False, "error": op}
        except Exception as error:  # a failure of the worker itself (loading a model, say): report, keep serving
            reply = {"ok": False, "error": f"{type(error).__name__}: {error}", "traceback": traceback.format_exc()}
        channel.write(json.dumps(reply) + "\n")
        channel.flush()


def main(argv: list) -> int:
    channel = open_channel()
    unshadow_path()
    target, folder = argv[1], os.path.abspath(argv[2])
    sys.path.insert(0, folder)
    try:
        decoder = import_target(target)  # first: a target that is not there fails before torch is imported
        import torch
        import transformers
    except BaseException as error:  # report why the decoder cannot be imported, then stop
        reply = {"ok": False, "error": f"{type(error).__name__}: {error}", "traceback": traceback.format_exc()}
        channel.write(json.dumps(reply) + "\n")
        return 2
    hello = {
        "ok": True,
        "python": sys.version.split()[0],
        "executable": sys.executable,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "takes_batches": bool(getattr(decoder, "takes_batches", False)),
    }
    channel.write(json.dumps(hello) + "\n")
    channel.flush()
    serve(Worker(decoder), channel)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
