"""What the sub-commands share: argument checks that end in a one-line usage error, loading a model."""

import argparse
import dataclasses
import os
import sys
import types
import typing
from pathlib import Path

import mtdecode
from mtdecode.strategies import REGISTRY
from mtdecode.zoo import DEFAULT_MODEL, DRAFT_MODEL, tensor_parallel_plan

#: the dtypes --dtype takes
DTYPES = ("float64", "float32", "bfloat16", "float16")


class UsageError(Exception):
    """A bad argument: reported in one line, exit code 2."""


class Parser(argparse.ArgumentParser):
    """argparse, but its errors raise `UsageError` instead of printing the usage and exiting."""

    def error(self, message: str):
        raise UsageError(message)


def strategy_settings(name: str, assignments: list[str]) -> dict:
    """`--set key=value` pairs, checked against the strategy's dataclass fields and converted to their types."""
    fields = {f.name: f for f in dataclasses.fields(REGISTRY[name]) if f.init and f.name not in ("draft", "head")}
    settings = {}
    for assignment in assignments:
        key, sep, text = assignment.partition("=")
        if not sep:
            raise UsageError(f"--set takes key=value, got {assignment!r}")
        if key not in fields:
            known = ", ".join(fields) or "none"
            raise UsageError(f"{name} has no setting {key!r} (its settings: {known})")
        settings[key] = convert(text, fields[key].type, key)
    return settings


def convert(text: str, annotation, key: str):
    """Turn `text` into a value of type `annotation` (int, float, bool, or one of these or None)."""
    options = typing.get_args(annotation) if isinstance(annotation, types.UnionType) else (annotation,)
    if type(None) in options and text.lower() == "none":
        return None
    for kind in (bool, int, float):
        if kind not in options:
            continue
        if kind is bool:
            if text.lower() in ("true", "false"):
                return text.lower() == "true"
            continue
        try:
            return kind(text)
        except ValueError:
            continue
    wanted = " or ".join("None" if o is type(None) else getattr(o, "__name__", str(o)) for o in options)
    raise UsageError(f"setting {key}={text!r}: expected {wanted}")


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """`--model`, `--draft` and `--device`, shared by `generate` and `bench`."""
    parser.add_argument("--model", default=DEFAULT_MODEL, help="the embedded model's name or a local model folder")
    parser.add_argument(
        "--draft", help=f"draft model for strategies that need one (default with the embedded model: {DRAFT_MODEL})"
    )
    parser.add_argument("--device", default="cpu", help="torch device for the models (cpu, cuda, ...)")
    parser.add_argument(
        "--quantize",
        choices=["int8"],
        help="int8: the target and the draft with int8 linear layers (CPU; cheaper, different models: see load_model)",
    )
    add_tp_argument(parser)


def add_tp_argument(parser: argparse.ArgumentParser) -> None:
    """`--tp`: the target sharded over the ranks of `torchrun` (`load`)."""
    parser.add_argument("--tp", action="store_true", help="under torchrun: shard the target over the ranks (tensor "
                        "parallelism; transformers' plan, or the MLPs alone where the heads do not split evenly); a "
                        "draft stays whole on every rank. Rank 0 prints")  # fmt: skip


def check_output(path: str | None, option: str) -> None:
    """Fail before any work if an output file cannot be written where asked."""
    if path is not None and not Path(path).resolve().parent.is_dir():
        raise UsageError(f"{option} {path}: its folder does not exist")


def check_model_name(name: str) -> None:
    """The embedded model, the shipped draft, or an existing folder (nothing is fetched from a hub)."""
    if name not in (DEFAULT_MODEL, DRAFT_MODEL) and not Path(name).is_dir():
        raise UsageError(f"no model {name!r}: give {DEFAULT_MODEL} or a local model folder")


def draft_name(args: argparse.Namespace, wanted: bool, who: str) -> str | None:
    """The draft to load: `--draft`, else the shipped draft if the model is the embedded one."""
    if not wanted:
        return None
    if args.draft is not None:
        return args.draft
    if args.model == DEFAULT_MODEL:
        return DRAFT_MODEL
    raise UsageError(f"{who} needs a draft model: pass --draft (a local model folder with the same vocabulary)")


def check_device(device: str) -> None:
    """A device torch knows and can use here (CUDA only if torch sees a GPU)."""
    import torch

    try:
        kind = torch.device(device).type
    except RuntimeError as error:
        raise UsageError(f"--device {device}: {_first_line(error)}") from error
    if kind == "cuda" and not torch.cuda.is_available():
        raise UsageError(f"--device {device}: torch sees no CUDA GPU on this machine")


def load(name: str, device: str, quantize: str | None = None, dtype: str | None = None, *, tp: bool = False):
    """`mtdecode.load_model` (in `dtype`, a torch dtype's name; default float32), with its failures turned into
    one-line usage errors; with `tp`, sharded over the ranks of `torchrun` (`mtdecode.zoo.tensor_parallel_plan`)."""
    import torch

    check_model_name(name)
    check_device(device)
    if device == "cuda" and "LOCAL_RANK" in os.environ:  # under torchrun, each rank's own GPU (a draft's too)
        device = f"cuda:{os.environ['LOCAL_RANK']}"
    plan = None
    if tp:
        if "WORLD_SIZE" not in os.environ:
            raise UsageError("--tp runs under torchrun: torchrun --nproc-per-node N -m mtdecode ... --tp")
        if quantize:
            raise UsageError("--tp shards a float model: leave out --quantize")
        plan = tensor_parallel_plan(name)
    sharding = {None: "", "auto": ", sharded", "mlp": ", its MLPs sharded (its heads do not split evenly)"}[plan]
    ranks = f" over {os.environ['WORLD_SIZE']} ranks" if plan else ""
    if os.environ.get("RANK", "0") == "0":  # under torchrun, rank 0 speaks for all
        print(f"loading {name}{' (int8)' if quantize else ''}{f' in {dtype}' if dtype else ''}{sharding}{ranks} ...",
              file=sys.stderr, flush=True)  # fmt: skip
    try:
        return mtdecode.load_model(name, device=device, quantize=quantize, dtype=getattr(torch, dtype or "float32"),
                                   tp_plan=plan)  # fmt: skip
    except (OSError, ValueError, RuntimeError, mtdecode.UnsupportedModelError) as error:
        raise UsageError(f"cannot load model {name!r}: {_first_line(error)}") from error


def _first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text}")
    return value


def at_least_zero(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text}")
    return value
