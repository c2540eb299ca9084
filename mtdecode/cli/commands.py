"""The sub-commands `generate`, `bench`, `masks` and `costs`."""

import argparse
import sys
import time
import warnings
from pathlib import Path

import mtdecode
from mtdecode import bench as suite
from mtdecode.cli.common import (
    UsageError,
    _first_line,
    check_device,
    check_model_name,
    check_output,
    draft_name,
    load,
    strategy_settings,
)
from mtdecode.strategies import REGISTRY, needs_draft
from mtdecode.zoo import DEFAULT_MODEL


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

    model = load(args.model, args.device, args.quantize, tp=args.tp)
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
    heads = [head_folder(folder) for folder in args.eagle_head]
    model = load(args.model, args.device, args.quantize, args.dtype, tp=args.tp)
    tokenizer = mtdecode.load_tokenizer(args.model)
    draft = load(draft_wanted, args.device, args.quantize, args.dtype) if draft_wanted else None
    extra = eagle_heads(heads, model, options.get("eagle", {}))
    _quiet_transformers()
    judge, bound = suite.tie_judge(model, tokenizer, tasks)
    # a greedy fallback is printed with the policies' other choices below the table, not as a warning mid-run
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mtdecode.GreedyFallbackWarning)
        try:
            rows = suite.run(
                model, tokenizer, draft, names=names, tasks=tasks, options=options, progress=not args.no_progress,
                judge=judge, extra=extra, **size,
            )  # fmt: skip
        except (TypeError, ValueError) as error:  # a strategy refused a --set value, or the draft does not fit
            raise UsageError(_first_line(error)) from error
    seconds = time.perf_counter() - start

    print(
        f"\n{args.model} ({args.dtype or 'float32'}{sharded()}): {size['prompts_per_task']} prompt(s) per task, at "
        f"most {size['max_new_tokens']} new tokens, greedy, interleaved runs; {seconds:.0f} s in all"
    )
    print_table(suite.TABLE_HEADER, suite.table(rows))
    if bound is not None:
        print(f"\nexact up to ties in {bound.dtype}: a run that differs from greedy's is judged with {bound}")
    from mtdecode.costs import timing
    from mtdecode.policy import report

    choices = report.explain(model, draft)  # measured in the warm-up, served from the cache here
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
        forward_costs={n: round(t, 6) for n, t in timing.forward_costs(model).items()},
        **size,
    )
    if args.json:
        suite.write_json(args.json, rows, settings)
        print(f"results written to {args.json}")
    if args.plot:
        suite.plot(args.plot, rows, title=f"{Path(args.model).name}, greedy, {size['max_new_tokens']} new tokens")
        print(f"plot written to {args.plot}")
    return 0


def sharded() -> str:
    """How the target is sharded, for a table's header: over how many ranks, or nothing."""
    from mtdecode import distributed

    return f", sharded over {distributed.ranks()} ranks" if distributed.ranks() > 1 else ""


def head_folder(folder: str) -> Path:
    """`--eagle-head FOLDER`: a folder that holds an exported head."""
    if not (Path(folder) / "head.safetensors").is_file():
        raise UsageError(f"--eagle-head {folder}: no head.safetensors there (python -m mtdecode.recipes.eagle export "
                         "--work WORK --out FOLDER writes one)")  # fmt: skip
    return Path(folder)


def eagle_heads(folders: list[Path], model, settings: dict) -> dict:
    """EAGLE with the head exported to each folder, raced as `eagle:FOLDER-NAME` beside the other contenders,
    with `--set eagle.KEY=VALUE`'s settings."""
    from mtdecode.strategies import Eagle
    from mtdecode.zoo.eagle import load_head

    heads = {}
    for folder in folders:
        try:
            head = load_head(model.hf, folder).to(model.device)
        except (RuntimeError, ValueError) as error:  # another width or vocabulary than the target's
            reason = _first_line(error)
            raise UsageError(f"--eagle-head {folder}: the head does not fit {model.name}: {reason}") from error
        heads[f"eagle:{folder.name}"] = Eagle(head=head, **settings)
    return heads


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


def costs(args: argparse.Namespace) -> int:
    """`mtdecode costs`: this host's forward costs for a model, and what each tuned strategy chooses on them."""
    from mtdecode import store
    from mtdecode.costs import curves, reference, timing
    from mtdecode.policy.report import explain

    if args.record_reference:
        reference.record_reference()
        return 0
    if args.measure_again:
        print(f"forgot {store.forget()} kept measurements in {store.costs_dir()}")
    check_model_name(args.model)
    model = load(args.model, args.device)
    forward = timing.forward_costs(model)
    print("new tokens:  " + "  ".join(f"{n:>5}" for n in forward))
    print("vs 1 token:  " + "  ".join(f"{curves.relative_cost(forward, n):5.2f}" for n in forward))
    for line in explain(model)[1:]:
        print(line)
    print(f"(kept in {store.costs_dir()})")
    return 0
