"""What mtdecode keeps on disk between processes: the dequantized default model (`mtdecode.zoo`) and the
forward costs measured on this host (`mtdecode.costs`).

Measured costs steer the drafting rules (how many guesses a row verifies), and with them how many random
numbers a sampled row draws. Measured afresh in every process, timing noise would change them a little,
and a seeded run would not repeat across processes. So each measurement is made once per model
architecture, dtype, device and host, kept as JSON, and read back by every later process: a seeded
`generate` then repeats bit for bit across processes on the same host (`docs/concepts/rounding.md` says
what else a repeat needs, and what makes runs differ across hosts).

- `cache_dir()`: `$XDG_CACHE_HOME/mtdecode` (default `~/.cache/mtdecode`).
- `costs_dir()`: `$MTDECODE_COSTS_DIR`, else `cache_dir() / "costs"`. Delete a file there (or run
  `mtdecode costs --measure-again`) to measure again.
- `kept(kind, key, measure)`: the JSON value stored under `key`, made by `measure()` the first time. One
  process measures while others wait for it (a file lock), so parallel test workers agree too; the ranks of
  a distributed run all take rank 0's (`mtdecode.distributed`).
- `announcing(callback)`: within it, `callback(kind, folder)` is called before each measurement that was not
  kept yet (`make demo` prints a progress line with it).

**Reference costs.** A course on a shared class server should not draw its conclusions from timings taken
under the class's load. mtdecode ships the costs of the course's models measured once on an idle reference
host (`REFERENCE`, described in `docs/measurements.md`). `mtdecode.costs.timing.use_reference_costs()` (or
`MTDECODE_COSTS=reference`) makes every later measurement read them instead: the same choices and numbers on
every machine, and nothing timed. A cost that was not recorded raises `LookupError`;
`MTDECODE_COSTS=record-reference` records the missing ones on the host at hand.
"""

import contextlib
import hashlib
import json
import os
import platform
import tempfile
import weakref
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path

import torch
from filelock import FileLock

from mtdecode import distributed

#: the reference costs that ship with mtdecode (see the module's docstring)
REFERENCE = Path(__file__).resolve().parent / "zoo" / "costs"


def reference_mode() -> str | None:
    """`"reference"` or `"record-reference"` when the shipped reference costs are in use (`MTDECODE_COSTS`)."""
    mode = os.environ.get("MTDECODE_COSTS")
    if mode not in (None, "", "reference", "record-reference"):
        raise ValueError(f"MTDECODE_COSTS must be 'reference' or 'record-reference', not {mode!r}")
    return mode or None


def cache_dir() -> Path:
    """Where mtdecode keeps what it builds: `$XDG_CACHE_HOME/mtdecode` (default `~/.cache/mtdecode`)."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "mtdecode"


def costs_dir() -> Path:
    """Where measured costs are kept: `$MTDECODE_COSTS_DIR`, else `cache_dir() / "costs"` (`REFERENCE` when the
    reference costs are in use)."""
    if reference_mode():
        return REFERENCE
    return Path(os.environ.get("MTDECODE_COSTS_DIR") or cache_dir() / "costs")


def kept(kind: str, key: dict, measure: Callable[[], dict]) -> dict:
    """The value kept for `key` (JSON-ready), measured by `measure()` and written the first time it is asked for.

    The file is `costs_dir() / f"{kind}-{digest}.json"`, holding the key beside the value so that a person can
    read what was measured where. JSON keeps floats exactly (their shortest repr), so the process that measured
    and every later one use the same numbers. On several ranks (`mtdecode.distributed`) every rank takes rank 0's
    value, measured by all of them together where none was kept.
    """
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    folder = costs_dir()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{kind}-{digest}.json"
    if distributed.ranks() > 1:
        return _kept_together(kind, path, key, measure)
    if reference_mode() == "reference":  # read only: the shipped files are not written, and nothing is timed
        stored = _stored(path, key)
        if stored is None:
            raise LookupError(_no_reference(kind, key, folder))
        return stored["value"]
    with FileLock(str(path) + ".lock"):
        stored = _stored(path, key)
        return stored["value"] if stored is not None else _measure(kind, path, key, measure)


def _kept_together(kind: str, path: Path, key: dict, measure: Callable[[], dict]) -> dict:
    """`kept` on several ranks (`mtdecode.distributed`): rank 0 reads the file and every rank takes what it holds;
    where it holds nothing, every rank measures, together (a sharded model's forwards need every rank, and the
    measurement's clock is rank 0's: `mtdecode.costs.timing.seconds`), and rank 0's value is kept and used by all."""
    found = None
    if distributed.rank() == 0:
        stored = _stored(path, key)
        found = {"value": stored["value"]} if stored is not None else {}
        if stored is None and reference_mode() == "reference":
            found = {"error": _no_reference(kind, key, path.parent)}
    found = distributed.agreed(found)
    if "error" in found:
        raise LookupError(found["error"])
    if "value" in found:
        return found["value"]
    return distributed.agreed(_measure(kind, path, key, measure, write=distributed.rank() == 0))


def _stored(path: Path, key: dict) -> dict | None:
    """The kept file at `path` (its key, its value, where it was measured) if it was kept for `key`."""
    stored = json.loads(path.read_text()) if path.exists() else {}
    return stored if stored.get("key") == key else None


def _no_reference(kind: str, key: dict, folder: Path) -> str:
    return (
        f"no reference {kind} cost for {json.dumps(key, sort_keys=True)} in {folder}; record it on an idle "
        "host with MTDECODE_COSTS=record-reference, or unset MTDECODE_COSTS to measure on this one"
    )


def _measure(kind: str, path: Path, key: dict, measure: Callable[[], dict], *, write: bool = True) -> dict:
    """`measure()`, announced (`announcing`), and kept at `path` unless `write` is false."""
    if write:
        for callback in _ANNOUNCE:
            callback(kind, path.parent)
    value = json.loads(json.dumps(measure()))  # the same round trip a later reader makes
    if write:
        with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".tmp") as f:
            kept_file = {"key": key, "value": value}
            if reference_mode():  # a reference cost says where it was measured
                kept_file["measured_on"] = {**this_host(), "cpu": cpu_name()}
            json.dump(kept_file, f, indent=1, sort_keys=True)
        Path(f.name).replace(path)  # atomic: a half-written file is never read
    return value


#: the callbacks of the `announcing` blocks in force
_ANNOUNCE: list[Callable[[str, Path], None]] = []


@contextlib.contextmanager
def announcing(callback: Callable[[str, Path], None]) -> Iterator[None]:
    """Call `callback(kind, folder)` before each measurement `kept` makes within this block (not for kept values)."""
    _ANNOUNCE.append(callback)
    try:
        yield
    finally:
        _ANNOUNCE.remove(callback)


def forget(kind: str | None = None) -> int:
    """Delete the kept measurements (of one `kind`, or all); return how many files went."""
    folder = costs_dir()
    files = list(folder.glob(f"{kind or '*'}-*.json")) if folder.exists() else []
    for path in files:
        path.unlink(missing_ok=True)
    return len(files)


def weights_key(module: torch.nn.Module) -> str:
    """A fingerprint of a module's weight values (what `module_key` leaves out), for what depends on them: each
    parameter's sum and first values, hashed; computed once per module object. Of a sharded module, every rank's
    shards (`mtdecode.distributed.local`), hashed together."""
    if module not in _WEIGHTS:
        with torch.no_grad():
            weights = [(name, distributed.local(p)) for name, p in module.named_parameters()]
            parts = [(name, float(p.double().sum()), p.flatten()[:8].tolist()) for name, p in weights]
        digest = hashlib.sha256(repr(parts).encode()).hexdigest()
        if distributed.is_sharded(module):
            digest = hashlib.sha256(repr(distributed.gathered(digest)).encode()).hexdigest()
        _WEIGHTS[module] = digest[:16]
    return _WEIGHTS[module]


_WEIGHTS = weakref.WeakKeyDictionary()  # module -> its `weights_key`


def module_key(module: torch.nn.Module) -> dict:
    """What a forward's cost depends on, for a model or a head: its class, architecture (config without names and
    versions), parameter shapes and dtypes, the kinds of its layers (a `SkinnyLinear` or an int8 one costs what a
    float `Linear` does not) and its device. Weight values are left out: they do not change the cost."""
    config = getattr(module, "config", None)
    settings = {}
    if config is not None:
        settings = {k: v for k, v in config.to_dict().items() if "name" not in k and "version" not in k}
    shapes = hashlib.sha256(
        repr([(name, tuple(p.shape), str(p.dtype)) for name, p in module.named_parameters()]).encode()
    ).hexdigest()[:16]
    device = next((p.device for p in module.parameters()), torch.device("cpu"))
    return {
        "class": type(module).__qualname__,
        "config": hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:16],
        "parameters": shapes,
        "layers": sorted({_kind(m) for m in module.modules()}),
        "attention": getattr(config, "_attn_implementation", None),
        "device": str(device),
        "device_name": "reference" if reference_mode() else _device_name(device),
    }


def _kind(module: torch.nn.Module) -> str:
    """A layer's kind for `module_key`: its class, or the class it was switched from to skip unread cells
    (`mtdecode.tokenwise`), which costs what that class does where every cell is read, as in every measurement."""
    cls = type(module)
    return getattr(cls, "tokenwise_of", cls).__qualname__


def _device_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_name()


def host_key() -> dict:
    """What else a measured cost depends on: torch, its CPU kernels and threads, the machine (`"reference"` for
    the shipped reference costs, whatever the host)."""
    return {"host": "reference"} if reference_mode() else this_host()


def this_host() -> dict:
    """This host as `host_key` describes it: torch, its CPU kernels and threads, the machine, and the number of ranks
    of a distributed run."""
    host = {
        "torch": torch.__version__,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "threads": torch.get_num_threads(),
        "machine": platform.machine(),
    }
    if distributed.ranks() > 1:  # a sharded forward costs its collectives too (a single process's keys stay)
        host["ranks"] = distributed.ranks()
    return host


@cache
def cpu_name() -> str:
    """The CPU's model name (Linux's /proc/cpuinfo), or what `platform` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
