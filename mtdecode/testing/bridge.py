"""Run a decoder in another Python interpreter: a venv pinned to an old transformers, say.

A research project's decoder often runs only with the library versions it was written for
(lookahead decoding's `lade` needs transformers 4.34), while the oracle needs a recent one.
`remote_decoder(python, "package.module:function")` is a decoder the checks can call like any
other: each call sends the prompts to a worker process (`bridge_worker.py`, which imports only
the standard library, torch and transformers) started once with that interpreter, which runs
the decoder there and sends the tokens back.

The model crosses exactly: the oracle's model is saved once (config and safetensors, in its own
dtype) to a temporary folder, loaded by the other side's transformers, and refused unless every
parameter has the same bytes on both sides and a probe forward gives the same logits up to
`LOGIT_TOLERANCE`. The tolerance is there because older transformers run parts of a float64 model
in float32 (transformers 4.34's Llama: the softmax of eager attention and the returned logits), so
their logits may differ from the oracle's by ~1e-6. Any difference at all is warned about
(`BridgeWarning`), since a near-tie may then break the other way, and kept in `transfers`.

The worker counts the forwards of that model per decoder call as `mtdecode.testing.coverage`
does, and the bridge adds them to the check's `coverage.active()` record, so coverage reports
what the remote decoder did.

A decoder that raises there raises `DecoderError` here, with its traceback; a worker that
cannot start, cannot import the decoder, cannot take the model exactly, or dies raises
`BridgeError` (a `DecoderError` too, so a check reports the decoder as crashed), naming the
interpreter, with the worker's traceback or the end of its stderr as its `traceback`. Call
`start()` first to see such a setup error before any check runs.
"""

import atexit
import json
import os
import shutil
import subprocess
import tempfile
import threading
import warnings
import weakref
from collections.abc import Callable
from pathlib import Path

import torch

from mtdecode.testing import coverage
from mtdecode.testing.bridge_worker import fingerprint
from mtdecode.testing.decoders import DecoderError
from mtdecode.testing.ties import LOGIT_TOLERANCE  # a model loaded wrongly is off by far more

WORKER = Path(__file__).with_name("bridge_worker.py")


#: how much of the worker's stderr an error shows
STDERR_TAIL = 4000


class BridgeError(DecoderError):
    """The decoder could not be run in the other interpreter: the worker could not start, could not import it,
    could not take the model exactly, or died. `traceback` holds the details: the worker's traceback, or the
    end of its stderr. A `DecoderError` (crashed), so that a check reports it as the decoder's crash."""

    def __init__(self, message: str, details: str = "") -> None:
        super().__init__(message, crashed=True, traceback=details)


class BridgeWarning(UserWarning):
    """The model in the other interpreter computes logits slightly different from the oracle's (see `transfers`)."""


class RemoteDecoder:
    """A decoder (taking batches) that runs `target` in the interpreter `python` (see the module docstring).

    **Arguments:**

    - `python`: the other interpreter (a path, or a name on `PATH`).
    - `target`: the decoder there, as `"package.module:function"`.
    - `cwd`: the folder the worker runs in and imports from (default: the current folder).
    """

    takes_batches = True
    #: the bridge adds the worker's counts to the check's coverage itself (`run_batch` counts nothing more)
    records_own_calls = True

    def __init__(self, python: str, target: str, *, cwd: str | None = None) -> None:
        self.python = python
        self.target = target
        self.cwd = str(Path(cwd or os.getcwd()).resolve())
        self.__name__ = self.__qualname__ = f"{target} (in {python})"
        #: what the worker said about itself when it started (python, torch and transformers versions)
        self.versions: dict = {}
        #: per model moved so far: the largest probe-logit difference and the default dtype the worker needed
        self.transfers: list[dict] = []
        self._lock = threading.RLock()
        self._process: subprocess.Popen | None = None
        self._stderr = None
        self._models: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._dropped: list[str] = []
        self._next_key = 0
        atexit.register(_close_at_exit, weakref.ref(self))

    def __repr__(self) -> str:
        return f"remote_decoder({self.python!r}, {self.target!r}, cwd={self.cwd!r})"

    def __call__(self, model, prompt, *, max_new_tokens, temperature, top_k, top_p, seed) -> list:
        settings = dict(max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p)
        return self.batch(model, [prompt], seeds=[seed], **settings)[0]

    def batch(self, model, prompts, *, max_new_tokens, temperature, top_k, top_p, seeds) -> list:
        """Decode `prompts` in the worker (one list of new tokens per prompt); add its forwards to the active coverage
        record, if any. **Raises:** `DecoderError` if the decoder raised there; `BridgeError` if the worker failed."""
        hf = getattr(model, "hf", model)
        settings = dict(
            max_new_tokens=int(max_new_tokens),
            temperature=float(temperature),
            top_k=None if top_k is None else int(top_k),
            top_p=None if top_p is None else float(top_p),
        )
        with self._lock:
            request = {
                "op": "decode",
                "key": self._key_for(hf),
                "eos": hf.generation_config.eos_token_id,
                "pad": hf.generation_config.pad_token_id,
                "prompts": [[int(t) for t in p] for p in prompts],
                "seeds": [int(s) for s in seeds],
                "settings": settings,
            }
            reply = self._ask(request)
        if not reply.get("ok"):
            raise DecoderError(
                f"the decoder raised {reply.get('error')} (in {self.python})",
                crashed=True,
                traceback=reply.get("traceback", ""),
            )
        replay(reply["calls"], coverage.active())
        return reply["outputs"]

    def restarted(self) -> "RemoteDecoder":
        """The same decoder in a new worker process (`check_seeds` compares the two)."""
        return RemoteDecoder(self.python, self.target, cwd=self.cwd)

    @property
    def decodes_one_at_a_time(self) -> bool:
        """Whether the decoder over there takes one prompt per call (the bridge itself takes batches, to cross
        once per batch); `check_sampling` then gives it the sample count of a decoder that does not take batches.
        Starts the worker if it is not running."""
        return not self.start().get("takes_batches", True)

    def start(self) -> dict:
        """Start the worker now if it is not running (any call starts it anyway), so that a wrong interpreter or
        target shows before a check begins; returns the versions on the other side (`versions`). **Raises:**
        `BridgeError` if the worker cannot start or cannot import the decoder."""
        with self._lock:
            self._ensure_started()
        return self.versions

    def close(self) -> None:
        """Stop the worker (it starts again on the next call)."""
        with self._lock:
            process, self._process = self._process, None
            self._models = weakref.WeakKeyDictionary()
            if process is not None:
                stop(process)
            if self._stderr is not None:
                self._stderr.close()
                self._stderr = None

    # ------------------------------------------------------------ the worker

    def _ensure_started(self) -> None:
        if self._process is None or self._process.poll() is not None:
            self._process = None
            self._start()

    def _start(self) -> None:
        """Start the worker and read its greeting (the versions on that side)."""
        executable, env = resolve(self.python), worker_environment()
        if self._stderr is not None:
            self._stderr.close()
        self._stderr = tempfile.TemporaryFile()
        try:
            self._process = subprocess.Popen(
                [executable, "-u", str(WORKER), self.target, self.cwd],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self._stderr,
                cwd=self.cwd,
                env=env,
                text=True,
                encoding="utf-8",
            )
        except OSError as error:
            self._process = None
            raise BridgeError(f"cannot start the interpreter {self.python!r}: {error}") from error
        self._models = weakref.WeakKeyDictionary()
        hello = self._read()
        if not hello.get("ok"):
            process, self._process = self._process, None
            stop(process)
            raise BridgeError(
                f"the worker in {self.python} could not import {self.target!r} (from {self.cwd}): {hello.get('error')}",
                hello.get("traceback", ""),
            )
        self.versions = {k: v for k, v in hello.items() if k != "ok"}

    def _ask(self, request: dict) -> dict:
        """Send one request to the running worker and read its reply."""
        self._drop_forgotten()
        self._send(request)
        return self._read()

    def _send(self, request: dict) -> None:
        try:
            self._process.stdin.write(json.dumps(request) + "\n")
            self._process.stdin.flush()
        except (BrokenPipeError, OSError) as error:
            self._died(error)

    def _read(self) -> dict:
        line = self._process.stdout.readline()
        if not line:
            self._died(None)
        try:
            return json.loads(line)
        except json.JSONDecodeError:
            self._died(f"unreadable reply {line[:200]!r}")

    def _died(self, why) -> None:
        process, self._process = self._process, None
        code = process.wait(timeout=10) if process is not None else None
        self._models = weakref.WeakKeyDictionary()
        reason = f" ({why})" if why else ""
        tail = self.stderr_tail()
        last = next((line for line in reversed(tail.splitlines()) if line.strip()), "nothing")
        raise BridgeError(
            f"the worker running {self.target!r} in {self.python} stopped{reason}, exit code {code}; "
            f"the last line of its stderr: {last.strip()}",
            f"the end of the worker's stderr:\n{tail}",
        )

    def stderr_tail(self, size: int = STDERR_TAIL) -> str:
        """The last `size` characters the worker wrote to stderr (the decoder's prints end up there too)."""
        if self._stderr is None:
            return ""
        self._stderr.flush()
        end = self._stderr.seek(0, os.SEEK_END)
        self._stderr.seek(max(0, end - size))
        return self._stderr.read().decode("utf-8", "replace")

    # ------------------------------------------------------------ models

    def _key_for(self, hf) -> str:
        """The worker's name for `hf`, moving it there first if it is new (or the worker restarted)."""
        self._ensure_started()
        key = self._models.get(hf)
        if key is None:
            key = f"m{self._next_key}"
            self._next_key += 1
            transfer(self, hf, key)
            self._models[hf] = key
            weakref.finalize(hf, self._dropped.append, key)  # freed in the worker on the next request
        return key

    def _drop_forgotten(self) -> None:
        """Tell the worker to free the models the oracle no longer holds."""
        while self._dropped and self._process is not None:
            self._send({"op": "drop", "key": self._dropped.pop()})
            self._read()


def transfer(decoder: RemoteDecoder, hf, key: str) -> None:
    """Save `hf`, have `decoder`'s worker load it as `key`, and check that both sides hold the same model."""
    folder = tempfile.mkdtemp(prefix="mtdecode-bridge-")
    try:
        save_portable(hf, folder)
        probe = probe_tokens(hf.config.vocab_size)
        request = {
            "op": "load",
            "key": key,
            "folder": folder,
            "dtype": str(hf.dtype).removeprefix("torch."),
            "device": str(hf.device),
            "probe": probe,
        }
        decoder._drop_forgotten()
        reply = decoder._ask(request)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if not reply.get("ok"):
        raise BridgeError(
            f"the worker in {decoder.python} (transformers {decoder.versions.get('transformers', '?')}) could not load "
            f"the oracle's {hf.config.model_type} model: {reply.get('error')}",
            reply.get("traceback", ""),
        )
    difference = compare_fingerprints(fingerprint(hf, probe, None), reply["fingerprint"], hf.dtype, decoder)
    decoder.transfers.append({"key": key, "max_logit_difference": difference, **_worker_notes(reply)})
    if difference > 0:
        warnings.warn(
            f"the model in {decoder.python} (transformers {decoder.versions.get('transformers', '?')}) has the "
            f"oracle's weights but its probe logits differ from the oracle's by up to {difference:.2g}: near-ties may "
            "break the other way there",
            BridgeWarning,
            stacklevel=2,
        )


def worker_environment() -> dict[str, str]:
    """The worker's environment: this one's, unbuffered, offline, and with as many threads as this process uses (a
    worker with every core competes with the oracle's own work)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONHOME", "PYTHONSTARTUP")}
    env.update(PYTHONUNBUFFERED="1", PYTHONIOENCODING="utf-8")
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TRANSFORMERS_OFFLINE", "1")
    env.setdefault("OMP_NUM_THREADS", str(torch.get_num_threads()))
    return env


def _close_at_exit(reference: weakref.ref) -> None:
    decoder = reference()
    if decoder is not None:
        decoder.close()


def _worker_notes(reply: dict) -> dict:
    return {"default_dtype": reply.get("default_dtype"), "device": reply.get("device")}


def remote_decoder(python: str, target: str, *, cwd: str | None = None) -> Callable:
    """A decoder that runs `target` (`"package.module:function"`) in the interpreter `python`.

    **Arguments:**

    - `python`: the other interpreter, e.g. `lade-venv/bin/python` (it needs torch and
      transformers, not mtdecode).
    - `target`: the decoder there; it may take batches (`takes_batches`, `batch`) or not.
    - `cwd`: the folder to run in and import `target` from (default: the current folder).

    **Returns:** a `RemoteDecoder`: it takes batches, counts its own calls into the check's
    coverage (`records_own_calls`), starts its worker on the first call and stops it on `close()`
    or at exit.
    """
    return RemoteDecoder(python, target, cwd=cwd)


def replay(calls: list[dict], record: coverage.Coverage | None) -> None:
    """Add the forwards the worker counted, call by call, to `record` (nothing if None)."""
    if record is None:
        return
    for call in calls:
        record.begin_call()
        for fed, cached in call["forwards"]:
            record.record(fed, cached)
        record.end_call([row for row in call["outputs"] if isinstance(row, list)])


def resolve(python: str) -> str:
    """The absolute path of the interpreter `python` (a path, or a name on `PATH`).

    **Raises:** `BridgeError` if there is no such executable.
    """
    found = shutil.which(python) if os.sep not in python else python
    if found is None or not os.path.isfile(found) or not os.access(found, os.X_OK):
        raise BridgeError(f"the interpreter {python!r} does not exist or is not executable")
    return os.path.abspath(found)


def probe_tokens(vocab_size: int, length: int = 4) -> list[int]:
    """A short prompt that uses several tokens of the vocabulary, for the probe forward."""
    return [(1 + 7 * i) % vocab_size for i in range(length)]


def save_portable(hf, folder: str) -> None:
    """Save `hf` (config and safetensors, dtype kept) so that transformers 4.34 to 5.x load it alike.

    The config gets the older spellings beside the newer ones: `torch_dtype` next to `dtype`, and
    `rope_theta` / `rope_scaling` next to `rope_parameters`.
    """
    from transformers.utils import logging

    shown = logging.is_progress_bar_enabled()
    logging.disable_progress_bar()
    try:
        hf.save_pretrained(folder, safe_serialization=True)
    finally:
        if shown:
            logging.enable_progress_bar()
    path = Path(folder) / "config.json"
    config = json.loads(path.read_text())
    dtype = str(hf.dtype).removeprefix("torch.")
    config["torch_dtype"] = dtype
    config.setdefault("dtype", dtype)
    rope = config.get("rope_parameters")
    if isinstance(rope, dict) and "rope_theta" in rope:
        config.setdefault("rope_theta", rope["rope_theta"])
        if rope.get("rope_type", "default") == "default":
            config.setdefault("rope_scaling", None)
        elif "factor" in rope:
            config.setdefault("rope_scaling", {"type": rope["rope_type"], "factor": rope["factor"]})
    path.write_text(json.dumps(config, indent=2))


def compare_fingerprints(ours: dict, theirs: dict, dtype: torch.dtype, decoder: RemoteDecoder) -> float:
    """Check that the worker's model is the oracle's: the same bytes in every parameter, and the same probe
    logits within `LOGIT_TOLERANCE`.

    **Returns:** the largest probe-logit difference.

    **Raises:** `BridgeError` naming what differs.
    """
    where = f"in {decoder.python} (transformers {decoder.versions.get('transformers', '?')})"
    missing = sorted(set(ours["parameters"]) ^ set(theirs["parameters"]))
    if missing:
        raise BridgeError(f"the model loaded {where} has other parameters than the oracle's: {missing[:5]}")
    changed = [name for name in ours["parameters"] if ours["parameters"][name] != theirs["parameters"][name]]
    if changed:
        raise BridgeError(f"the model loaded {where} differs from the oracle's in the bytes of {changed[:5]}")
    mine, other = torch.tensor(ours["logits"], dtype=torch.float64), torch.tensor(theirs["logits"], dtype=torch.float64)
    if mine.shape != other.shape:
        raise BridgeError(
            f"the probe forward {where} gave logits of shape {tuple(other.shape)}, not {tuple(mine.shape)}"
        )
    difference = float((mine - other).abs().max()) if mine.numel() else 0.0
    allowed = LOGIT_TOLERANCE.get(dtype, 1e-4) * max(1.0, float(mine.abs().max()) if mine.numel() else 1.0)
    if not difference <= allowed:
        raise BridgeError(
            f"the model loaded {where} has the oracle's weights but computes other logits on a probe: they differ by "
            f"up to {difference:.3g} (allowed {allowed:.3g}); the two transformers versions do not run this model alike"
        )
    return difference


def stop(process: subprocess.Popen) -> None:
    """Ask the worker to exit, then make sure it has."""
    try:
        if process.poll() is None:
            process.stdin.write(json.dumps({"op": "exit"}) + "\n")
            process.stdin.flush()
            process.stdin.close()
            process.wait(timeout=10)
    except (OSError, ValueError, subprocess.TimeoutExpired):
        process.kill()
        process.wait()
    for stream in (process.stdin, process.stdout):
        if stream is not None and not stream.closed:
            stream.close()
