"""The `mtdecode` command line: watch a strategy decode, benchmark every strategy, draw the masks.

    mtdecode generate --strategy lookahead --prompt "Why is the sky blue?" [--set window=5 ...]
    mtdecode bench [--quick] [--json FILE] [--plot FILE.png]
    mtdecode masks lookahead --window 4 --ngram 3 --guesses 2 --out mask.png
    mtdecode masks batch --draft-tokens 2 --out batch.png     # one panel per row of a batch
    mtdecode check mypackage.module:my_decoder [--checks greedy sampling seeds] [--python PATH] [--json FILE]

Strategies come from `mtdecode.strategies.REGISTRY`, and their settings from the fields of
their dataclasses, so a strategy added to the registry shows up here with nothing else to
wire. Bad arguments end in a one-line error and exit code 2.
"""

import argparse
import dataclasses
import sys
import time
import types
import typing
import warnings
from pathlib import Path

import mtdecode
from mtdecode import bench as suite
from mtdecode.strategies import REGISTRY, needs_draft
from mtdecode.zoo import DEFAULT_MODEL, DRAFT_MODEL

#: the dtypes --dtype takes
DTYPES = ("float64", "float32", "bfloat16", "float16")


class UsageError(Exception):
    """A bad argument: reported in one line, exit code 2."""


class Parser(argparse.ArgumentParser):
    """argparse, but its errors raise `UsageError` instead of printing the usage and exiting."""

    def error(self, message: str):
        raise UsageError(message)


# ----------------------------------------------------------------------------- shared arguments


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


def load(name: str, device: str, quantize: str | None = None, dtype: str | None = None):
    """`mtdecode.load_model` (in `dtype`, a torch dtype's name; default float32), with its failures turned into
    one-line usage errors."""
    import torch

    check_model_name(name)
    check_device(device)
    print(f"loading {name}{' (int8)' if quantize else ''}{f' in {dtype}' if dtype else ''} ...", file=sys.stderr,
          flush=True)  # fmt: skip
    try:
        return mtdecode.load_model(name, device=device, quantize=quantize, dtype=getattr(torch, dtype or "float32"))
    except (OSError, ValueError, RuntimeError, mtdecode.UnsupportedModelError) as error:
        raise UsageError(f"cannot load model {name!r}: {_first_line(error)}") from error


def _first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


# ----------------------------------------------------------------------------- mtdecode generate


def generate(args: argparse.Namespace) -> int:
    """`mtdecode generate`: one prompt, one strategy, the answer streamed and coloured by step."""
    from mtdecode.trace import Trace, summary_line, wants_color

    check_output(args.html, "--html")
    check_device(args.device)
    check_model_name(args.model)
    strategy_class = REGISTRY[args.strategy]
    settings = strategy_settings(args.strategy, args.set)
    if args.draft is not None and not needs_draft(strategy_class):
        raise UsageError(f"{args.strategy} takes no draft model; --draft is for: {', '.join(_drafted())}")
    draft_wanted = draft_name(args, needs_draft(strategy_class), args.strategy)

    model = load(args.model, args.device, args.quantize)
    tokenizer = mtdecode.load_tokenizer(args.model)
    if draft_wanted is not None:
        settings["draft"] = load(draft_wanted, args.device, args.quantize)
    try:
        strategy = strategy_class(**settings)
    except (TypeError, ValueError) as error:
        raise UsageError(f"{args.strategy}: {_first_line(error)}") from error
    if not tokenizer.chat_template:
        raise UsageError(f"the tokenizer of {args.model!r} has no chat template")
    messages = [{"role": "user", "content": args.prompt}]
    prompt = list(tokenizer.apply_chat_template(messages, add_generation_prompt=True)["input_ids"])

    trace = Trace(tokenizer, stream=sys.stdout, color=wants_color(args.color))
    # the run's choices are printed below the answer, a greedy fallback among them, rather than as a Python warning
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mtdecode.GreedyFallbackWarning)
        try:
            # warm-up, untimed: one-off allocations, and lookahead's one measurement of its forward costs
            mtdecode.generate(model, prompt[:8], strategy, max_new_tokens=2)
            result = mtdecode.generate(
                model,
                prompt,
                strategy,
                max_new_tokens=args.max_new_tokens,
                temperature=args.temperature,
                top_k=args.top_k,
                top_p=args.top_p,
                eos_token_id=tokenizer.eos_token_id,
                seed=args.seed,
                on_step=trace.add,
            )
        except (ValueError, mtdecode.UnsupportedModelError) as error:  # generate's checks: budget, context, sampler
            raise UsageError(_first_line(error)) from error
    trace.finish()
    summary = summary_line(result.stats)
    print(f"\n\n[{args.strategy}] {summary}")
    for choice in result.stats.choices:  # what a tuned strategy chose on this host, and why
        print(f"[{args.strategy}] {'warning: ' if choice.greedy else ''}{choice}")
    if args.html:
        title = f"mtdecode generate --strategy {args.strategy}"
        summary = "; ".join([summary, *map(str, result.stats.choices)])
        Path(args.html).write_text(trace.html(title=title, prompt=args.prompt, summary=summary))
        print(f"coloured trace written to {args.html}")
    return 0


def _drafted() -> list[str]:
    return [name for name, cls in REGISTRY.items() if needs_draft(cls)]


# ----------------------------------------------------------------------------- mtdecode bench

QUICK = dict(prompts_per_task=1, max_new_tokens=32)
FULL = dict(prompts_per_task=8, max_new_tokens=64)


def bench(args: argparse.Namespace) -> int:
    """`mtdecode bench`: the prompt suite through every contender (see `mtdecode.bench`)."""
    from mtdecode.demo import print_table

    check_output(args.json, "--json")
    check_output(args.plot, "--plot")
    check_device(args.device)
    check_model_name(args.model)
    names = args.strategies or [*REGISTRY, *suite.PEERS]
    if not args.strategies and args.model != DEFAULT_MODEL:  # the shipped EAGLE head fits the default model only
        names.remove("eagle")
        print(f"eagle is left out: its shipped head is trained for {DEFAULT_MODEL}, not {args.model}", file=sys.stderr)
    tasks = args.tasks or list(suite.load_suite()["tasks"])
    size = dict(QUICK if args.quick else FULL)
    if args.prompts_per_task is not None:
        size["prompts_per_task"] = args.prompts_per_task
    if args.max_new_tokens is not None:
        size["max_new_tokens"] = args.max_new_tokens
    options = bench_options(args.set, names)
    drafted = [n for n in names if n == "hf-assisted" or (n in REGISTRY and needs_draft(REGISTRY[n]))]
    draft_wanted = draft_name(args, bool(drafted), " and ".join(drafted))

    start = time.perf_counter()
    suite.hold_freed_memory()  # no run pays for the pages that the one before it gave back
    model = load(args.model, args.device, args.quantize, args.dtype)
    tokenizer = mtdecode.load_tokenizer(args.model)
    draft = load(draft_wanted, args.device, args.quantize, args.dtype) if draft_wanted else None
    _quiet_transformers()
    judge, bound = suite.tie_judge(model, tokenizer, tasks)
    # a greedy fallback is printed with the tuning's other choices below the table, not as a warning mid-run
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mtdecode.GreedyFallbackWarning)
        try:
            rows = suite.run(
                model, tokenizer, draft, names=names, tasks=tasks, options=options, progress=not args.no_progress,
                judge=judge, **size,
            )  # fmt: skip
        except (TypeError, ValueError) as error:  # a strategy refused a --set value, or the draft does not fit
            raise UsageError(_first_line(error)) from error
    seconds = time.perf_counter() - start

    print(
        f"\n{args.model} ({args.dtype or 'float32'}): {size['prompts_per_task']} prompt(s) per task, at most "
        f"{size['max_new_tokens']} new tokens, greedy, interleaved runs in one process; {seconds:.0f} s in all"
    )
    print_table(suite.TABLE_HEADER, suite.table(rows))
    if bound is not None:
        print(f"\nexact up to ties in {bound.dtype}: a run that differs from greedy's is judged with {bound}")
    from mtdecode import tuning

    choices = tuning.explain(model, draft)  # measured in the warm-up, served from the cache here
    print("\nwhat the tuned strategies chose on this host, and why:\n" + "\n".join(f"- {line}" for line in choices))
    settings = dict(
        model=args.model,
        dtype=args.dtype or "float32",
        epsilon=None if bound is None else bound.epsilon,
        quantize=args.quantize,
        draft=draft_wanted,
        tasks=tasks,
        options=options,
        seconds=round(seconds, 1),
        tuning=choices,
        forward_costs={n: round(t, 6) for n, t in tuning.forward_costs(model).items()},
        **size,
    )
    if args.json:
        suite.write_json(args.json, rows, settings)
        print(f"results written to {args.json}")
    if args.plot:
        suite.plot(args.plot, rows, title=f"{Path(args.model).name}, greedy, {size['max_new_tokens']} new tokens")
        print(f"plot written to {args.plot}")
    return 0


def bench_options(assignments: list[str], names: list[str]) -> dict[str, dict]:
    """`--set NAME.KEY=VALUE` for the benchmark: settings per strategy."""
    grouped: dict[str, list[str]] = {}
    for assignment in assignments:
        name, dot, rest = assignment.partition(".")
        if not dot or name not in REGISTRY:
            raise UsageError(f"bench --set takes STRATEGY.KEY=VALUE with a strategy name, got {assignment!r}")
        if name not in names:
            raise UsageError(f"--set {assignment}: {name} is not among the strategies benchmarked")
        grouped.setdefault(name, []).append(rest)
    return {name: strategy_settings(name, rest) for name, rest in grouped.items()}


def _quiet_transformers() -> None:
    """transformers warns on every assisted-generation call; the benchmark's table is what matters."""
    from transformers.utils import logging

    logging.set_verbosity_error()


# ----------------------------------------------------------------------------- mtdecode masks


def masks(args: argparse.Namespace) -> int:
    """`mtdecode masks`: draw one strategy's attention mask, every row and column labelled."""
    from mtdecode.masks import figures

    check_output(args.out, "--out")
    prefix = figures.prefix_names(args.prefix)
    if args.kind == "batch":  # one panel per row: rows that hold different numbers of cached tokens
        import matplotlib

        matplotlib.use("Agg")
        panels = figures.batch_mask(args.draft_tokens)
        figures.plot_batch(panels, args.out)
        shape = (len(panels), *panels[0].mask.shape)
        print(f"speculative verification over a batch of {len(panels)} rows: {shape} masks written to {args.out}")
        return 0
    try:
        if args.kind == "lookahead":
            figure = figures.lookahead_mask(args.window, args.ngram, args.guesses, prefix)
        elif args.kind == "speculative":
            figure = figures.speculative_mask(args.draft_tokens, prefix)
        elif args.kind == "tree":
            parents = [int(p) for p in args.parents.split(",")]
            figure = figures.tree_mask(parents, prefix)
        else:
            figure = figures.causal_mask(args.length, prefix)
    except ValueError as error:
        raise UsageError(_first_line(error)) from error

    import matplotlib

    matplotlib.use("Agg")
    figure.plot(args.out)
    print(f"{figure.title}: {tuple(figure.mask.shape)} mask written to {args.out}")
    return 0


# ----------------------------------------------------------------------------- mtdecode check


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
    model = None if args.model is None else load(args.model, args.device, dtype=args.dtype)
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


# ----------------------------------------------------------------------------- the parser


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


def build_parser() -> Parser:
    parser = Parser(prog="mtdecode", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True, parser_class=Parser)

    g = commands.add_parser("generate", help="answer one prompt, coloured by step")
    g.add_argument("--strategy", required=True, choices=list(REGISTRY))
    g.add_argument("--prompt", required=True)
    add_model_arguments(g)
    g.add_argument("--temperature", type=float, default=0.0, help="0 is greedy (default)")
    g.add_argument("--top-k", type=int)
    g.add_argument("--top-p", type=float)
    g.add_argument("--max-new-tokens", type=at_least_zero, default=128)
    g.add_argument("--seed", type=int, help="seed for sampling (default: a fresh one each run)")
    g.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a strategy setting, e.g. window=5")
    g.add_argument("--html", help="also write the coloured trace to this HTML file")
    g.add_argument("--color", choices=("auto", "always", "never"), default="auto")
    g.set_defaults(run=generate)

    b = commands.add_parser("bench", help="every strategy and transformers' decoders on the prompt suite")
    add_model_arguments(b)
    b.add_argument("--quick", action="store_true", help=f"1 prompt per task, {QUICK['max_new_tokens']} new tokens")
    b.add_argument("--strategies", nargs="+", choices=[*REGISTRY, *suite.PEERS], help="default: all, and the peers")
    b.add_argument("--tasks", nargs="+", choices=list(suite.load_suite()["tasks"]))
    b.add_argument("--prompts-per-task", type=positive)
    b.add_argument("--max-new-tokens", type=positive)
    b.add_argument(
        "--set", action="append", default=[], metavar="NAME.KEY=VALUE", help="e.g. speculative.num_draft_tokens=1"
    )
    b.add_argument("--dtype", choices=DTYPES[1:], help="the models' dtype (default float32); in bfloat16 and float16 "
                   "a run that differs from greedy's is judged up to ties (docs/concepts/rounding.md)")
    b.add_argument("--json", help="write the results to this JSON file")
    b.add_argument("--plot", help="draw speed-up and tokens per forward to this PNG file")
    b.add_argument("--no-progress", action="store_true", help="no progress bar")
    b.set_defaults(run=bench)

    m = commands.add_parser("masks", help="draw the attention mask a strategy builds")
    m.add_argument("kind", choices=("lookahead", "speculative", "tree", "causal", "batch"))
    m.add_argument("--out", required=True, help="picture file (.png, .svg, ...)")
    m.add_argument("--prefix", type=at_least_zero, default=2, help="committed tokens already in the cache")
    m.add_argument("--window", type=positive, default=4, help="lookahead: W, the window's columns")
    m.add_argument("--ngram", type=positive, default=3, help="lookahead: N, the n-gram size (N-1 window rows)")
    m.add_argument("--guesses", type=at_least_zero, default=2, help="lookahead: G, candidate n-grams verified")
    m.add_argument("--draft-tokens", type=positive, default=4, help="speculative, batch: k, the draft's guesses")
    m.add_argument(
        "--parents", default="-1,0,0,1,-1", help="tree: each node's parent, -1 for the prefix (--parents=-1,0)"
    )
    m.add_argument("--length", type=positive, default=4, help="causal: new tokens")
    m.set_defaults(run=masks)

    c = commands.add_parser(
        "check", help="check a decoder of your own against the oracle (mtdecode.testing); exit 0 conforms, 1 fails, "
        "2 usage error, 3 the decoder crashed, 4 inconclusive (it never verified a guess)")
    c.add_argument("target", help="package.module:function or file.py:function, a decoder(model, prompt, *, "
                   "max_new_tokens, temperature, top_k, top_p, seed); the current folder is importable")
    c.add_argument("--checks", nargs="+", choices=("greedy", "sampling", "seeds"),
                   default=["greedy", "sampling", "seeds"], help="which checks to run (default: all three)")
    c.add_argument("--sampling", action="store_true", help=argparse.SUPPRESS)  # the default now; old scripts pass it
    c.add_argument("--families", nargs="+", metavar="MODEL",
                   help="greedy: which tiny models (default all: llama qwen2 mistral-window llama-32k llama-eos "
                   "llama-ties)")
    c.add_argument("--examples", type=positive, help="greedy: Hypothesis examples per model (default 25)")
    c.add_argument("--max-prompt", type=positive, help="greedy: the longest prompt generated (default 300)")
    c.add_argument("--samples", type=positive, help="sampling: runs per setting (default 20,000 for a decoder that "
                   "takes batches, else 5,000)")
    c.add_argument("--tokens", type=positive, default=None, help="sampling: tokens per block (default 2, or 3 "
                   "when the decoder guessed nothing in 2-token runs; 3 for bugs that show after two accepted guesses)")
    c.add_argument(
        "--dtype", choices=DTYPES, help="the models' dtype (default float64 for the oracle's tiny models, float32 for "
        "--model); bfloat16 and float16 are judged exact up to ties (docs/concepts/rounding.md)")
    c.add_argument("--model", help="check greedy decoding on this local model folder (or the embedded model's name) "
                   "instead of the oracle's tiny models")
    c.add_argument("--device", default="cpu", help="torch device for --model (cpu, cuda, ...)")
    c.add_argument("--python", metavar="PATH", help="run the decoder in this other interpreter (a venv with another "
                   "transformers, no mtdecode needed), through a subprocess bridge that moves the models exactly")
    c.add_argument("--plain", action="store_true", help="the decoder does not guess (plain greedy or sampling): do "
                   "not call it inconclusive for never verifying a guess")
    c.add_argument("--json", help="write the reports to this JSON file")
    c.set_defaults(run=check)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit code (2 for a bad argument)."""
    from transformers.utils import logging

    logging.disable_progress_bar()  # per-file loading bars; the CLI prints its own progress
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        return args.run(args)
    except UsageError as error:
        print(f"mtdecode: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\nmtdecode: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
