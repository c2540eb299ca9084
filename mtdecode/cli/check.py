"""The sub-command `check`: a decoder of your own against the oracle (`mtdecode.testing`)."""

import argparse
import sys
from pathlib import Path

from mtdecode.cli.common import (
    UsageError,
    _first_line,
    check_output,
    load,
)


def check(args: argparse.Namespace) -> int:
    """`mtdecode check module:function`: run the oracle on a black-box decoder. Exit 0 if it conforms, 1 if a check
    fails, 3 if the decoder crashed (its traceback is printed), 4 if inconclusive (it never verified a guess)."""
    import json

    import torch

    from mtdecode.testing import blackbox
    from mtdecode.testing.report import VERDICTS
    from mtdecode.testing.seeds import check_seeds

    check_output(args.json, "--json")
    unknown = [f for f in args.families or () if f not in blackbox.GREEDY_MODELS]
    if unknown:
        raise UsageError(f"unknown --families {', '.join(unknown)}; choose from {', '.join(blackbox.GREEDY_MODELS)}")
    decoder = remote(args) if args.python else load_decoder(args.target)
    dtype = None if args.dtype is None else getattr(torch, args.dtype)
    model = None if args.model is None else load(args.model, args.device, dtype=args.dtype, tp=args.tp)
    greedy = dict(examples=args.examples, dtype=dtype, model=model, require_guesses=not args.plain)
    if args.families:
        greedy["families"] = args.families
    if args.max_prompt is not None:
        greedy["max_prompt"] = args.max_prompt
    runs = {
        "greedy": lambda: blackbox.check_greedy(decoder, **greedy),
        "sampling": lambda: blackbox.check_sampling(
            decoder, samples=args.samples, tokens=args.tokens, require_guesses=not args.plain
        ),
        "seeds": lambda: check_seeds(decoder),
    }
    reports = []
    for name in args.checks:
        print(f"mtdecode check: {name} ...", file=sys.stderr, flush=True)
        reports.append(runs[name]())
        print(reports[-1], end="\n\n")
    if args.json:
        Path(args.json).write_text(json.dumps([r.to_json() for r in reports], indent=2) + "\n")
    verdicts = {r.verdict for r in reports}
    verdict = next(v for v in ("crashed", "fails", "inconclusive", "conforms") if v in verdicts)
    said = {"conforms": "conforms", "fails": "does NOT conform", "crashed": "crashed", "inconclusive": "inconclusive"}
    each = ", ".join(f"{n} {r.verdict}" for n, r in zip(args.checks, reports, strict=True))
    print(f"{args.target}: {said[verdict]} ({each})")
    return VERDICTS[verdict]


def remote(args: argparse.Namespace):
    """The decoder `args.target` in the interpreter `args.python` (`mtdecode.testing.bridge`), started now."""
    from mtdecode.testing.bridge import BridgeError, remote_decoder

    decoder = remote_decoder(args.python, args.target)
    try:
        decoder.start()
    except BridgeError as error:
        raise UsageError(f"{args.target} in {args.python}: {_first_line(error)}") from error
    return decoder


def load_decoder(target: str):
    """`package.module:function` or `path/to/file.py:function` (the function may be an attribute path) -> the
    callable, or a UsageError. The current folder is importable, as in `python -c`."""
    import importlib
    import importlib.util
    import inspect
    import os

    module_name, sep, attribute = target.rpartition(":")
    if not sep or not module_name or not attribute:
        raise UsageError(f"expected package.module:function or file.py:function, got {target!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        if module_name.endswith(".py"):
            path = Path(module_name).resolve()
            if not path.is_file():
                raise UsageError(f"no such file: {module_name}")
            sys.path.insert(0, str(path.parent))  # its own imports of its neighbours work, as when run as a script
            spec = importlib.util.spec_from_file_location(path.stem, path)
            value = importlib.util.module_from_spec(spec)
            sys.modules[path.stem] = value
            spec.loader.exec_module(value)
        else:
            value = importlib.import_module(module_name)
    except ImportError as error:
        raise UsageError(f"cannot import {module_name!r}: {_first_line(error)}") from error
    for part in attribute.split("."):
        if not hasattr(value, part):
            raise UsageError(f"{module_name!r} has no attribute {attribute!r}")
        value = getattr(value, part)
    if not callable(value):
        raise UsageError(f"{target} is a {type(value).__name__}, not a callable decoder")
    try:
        inspect.signature(value).bind(None, [1], max_new_tokens=1, temperature=0.0, top_k=None, top_p=None, seed=0)
    except TypeError as error:
        raise UsageError(
            f"{target} does not take (model, prompt, *, max_new_tokens, temperature, top_k, top_p, seed): {error}"
        ) from error
    except ValueError:  # a builtin without a signature: let the first call tell
        pass
    return value
