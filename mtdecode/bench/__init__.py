"""`mtdecode bench`: every strategy, and transformers' own decoders, on a small Spec-Bench-like suite.

The suite (`prompts.json` beside this file, its source recorded inside) has four tasks:
multi-turn chat, code editing, summarisation/extraction of a given passage, and short math
reasoning. For each task every prompt is decoded by every contender in one process, the
order rotating from prompt to prompt (A B C, B C A, C A B, ...), so the slow drifts of a
shared machine hit every contender alike. Then, per contender and task:

- tokens/s, and the speed-up: its tokens/s over `Autoregressive`'s on the same prompts;
- tokens per target forward pass (transformers' decoders are counted with a forward hook);
- identical: in how many runs the tokens equal `Autoregressive`'s greedy tokens. In bfloat16 and
  float16 (`--dtype`), where exact means exact up to ties (`mtdecode.testing.ties`), every run that
  differs is read again as greedy decoding reads it: a run whose every difference lies within the
  calibrated ε counts as a near-tie, one with a larger gap anywhere as beyond ε (a bug), and each
  difference's gap is kept (`Tally.differences`).

Decoding is greedy (temperature 0) and stops at the model's end-of-turn token.
"""

import ctypes
import json
import os
import platform
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

import mtdecode
from mtdecode.model import CausalLM
from mtdecode.strategies import REGISTRY, needs_draft

SUITE = Path(__file__).with_name("prompts.json")
BASELINE = "autoregressive"
#: transformers' own decoders, run on the same model: greedy, assisted generation with the
#: same draft, and prompt lookup
PEERS = ("hf-greedy", "hf-assisted", "hf-prompt-lookup")
#: transformers' default n-gram match length is 2; 10 guesses per step, as in its docs' example
HF_PROMPT_LOOKUP_TOKENS = 10


#: glibc's `mallopt` parameter (malloc.h): free memory at the heap's top beyond this many bytes goes back to the OS
M_TRIM_THRESHOLD = -1
#: glibc's `mallopt` parameter (malloc.h): a block of at least this many bytes gets pages of its own (mmap), which
#: go back to the OS when it is freed
M_MMAP_THRESHOLD = -3
#: glibc's `mallopt` parameter (malloc.h): how many blocks may have pages of their own at once (0: none)
M_MMAP_MAX = -4


def hold_freed_memory(every_size: bool = False) -> bool:
    """Keep memory that a decoder frees within the process, for the next run to reuse: on glibc (Linux), blocks up to
    32 MiB come from the heap rather than fresh pages of their own, and the heap is not trimmed below 2 GiB.
    `every_size`: blocks of any size come from the heap (glibc maps nothing of its own), for work whose tensors are
    larger, such as the EAGLE recipe's training (`mtdecode.recipes.eagle.train`).

    By default glibc returns large freed blocks to the OS, so a run's big forwards fault in fresh pages where the run
    before it gave its memory back, and what a run costs depends on what ran before it (a one-off trace at 8 rows:
    the same forward over the prompts 0.89 s after one decoder's run, 1.02 s after another's). A benchmark calls this
    once at its start, so that every contender runs on an allocator in the same state.

    **Returns:** whether the allocator was set (False off glibc, where nothing changes)."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int  # both are C ints
    mapped = mallopt(M_MMAP_MAX, 0) if every_size else mallopt(M_MMAP_THRESHOLD, 32 << 20)
    return bool(mapped) and bool(mallopt(M_TRIM_THRESHOLD, 2**31 - 1))


def load_suite() -> dict:
    """The prompt suite: `{"source": ..., "tasks": {name: {"description", "prompts": [messages, ...]}}}`."""
    return json.loads(SUITE.read_text())


@dataclass(frozen=True)
class Output:
    tokens: list[int]
    forwards: int  # target forward passes


#: a contender decodes one tokenized prompt
Contender = Callable[[list[int]], Output]


def strategy_contender(model: CausalLM, strategy, *, max_new_tokens: int, eos_token_id: int | None) -> Contender:
    """An mtdecode strategy, greedy, seeded (so its steps, not only its tokens, repeat)."""

    def run(prompt: list[int]) -> Output:
        result = mtdecode.generate(  # seeded: Jacobi's and lookahead's first guesses repeat from run to run
            model, prompt, strategy, max_new_tokens=max_new_tokens, eos_token_id=eos_token_id, seed=0
        )
        return Output(result.tokens[0].tolist(), result.stats.target_forwards)

    return run


def hf_contender(model: CausalLM, *, max_new_tokens: int, eos_token_id: int | None, **options) -> Contender:
    """transformers' `generate` (greedy) with extra `options`; a forward hook counts the target's passes."""

    def run(prompt: list[int]) -> Output:
        forwards = 0

        def count(*_):
            nonlocal forwards
            forwards += 1

        ids = torch.tensor([prompt], device=model.device)
        hook = model.hf.register_forward_hook(count)
        try:
            out = model.hf.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                do_sample=False,
                max_new_tokens=max_new_tokens,
                eos_token_id=eos_token_id,
                pad_token_id=eos_token_id if eos_token_id is not None else 0,
                **options,
            )
        finally:
            hook.remove()
        return Output(out[0, len(prompt) :].tolist(), forwards)

    return run


def contenders_for(
    names: Sequence[str],
    model: CausalLM,
    draft: CausalLM | None,
    *,
    max_new_tokens: int,
    eos_token_id: int | None,
    options: dict[str, dict] | None = None,
    extra: dict[str, object] | None = None,
) -> dict[str, Contender]:
    """`Autoregressive` first (the baseline), then each named strategy or peer, then the `extra` strategies under
    their names (`KIND:LABEL`, e.g. `eagle:my-head`: a registered kind with settings of its own).

    Strategies take their default settings, or `options[name]` (e.g. `{"speculative": {"num_draft_tokens": 1}}`).
    """
    options = options or {}
    settings = dict(max_new_tokens=max_new_tokens, eos_token_id=eos_token_id)
    chosen = {BASELINE: strategy_contender(model, REGISTRY[BASELINE](), **settings)}
    for name in names:
        if name == BASELINE:
            continue
        if name == "hf-greedy":
            chosen[name] = hf_contender(model, **settings)
        elif name == "hf-assisted":
            chosen[name] = hf_contender(model, assistant_model=_need(draft, name).hf, **settings)
        elif name == "hf-prompt-lookup":
            chosen[name] = hf_contender(model, prompt_lookup_num_tokens=HF_PROMPT_LOOKUP_TOKENS, **settings)
        elif needs_draft(REGISTRY[name]):
            strategy = REGISTRY[name](draft=_need(draft, name), **options.get(name, {}))
            chosen[name] = strategy_contender(model, strategy, **settings)
        else:
            chosen[name] = strategy_contender(model, REGISTRY[name](**options.get(name, {})), **settings)
    for name, strategy in (extra or {}).items():
        chosen[name] = strategy_contender(model, strategy, **settings)
    return chosen


def _need(draft: CausalLM | None, name: str) -> CausalLM:
    if draft is None:
        raise ValueError(f"{name} needs a draft model")
    return draft


@dataclass
class Tally:
    """Sums over the runs of one contender on one task; `near_ties` and `beyond` count the runs that differ from
    greedy's tokens only at near-ties, or somewhere beyond ε (judged only where a `judge` was given), and
    `differences` lists each difference of those runs as (gap, top-2 margin)."""

    seconds: float = 0.0
    tokens: int = 0
    forwards: int = 0
    identical: int = 0
    runs: int = 0
    near_ties: int = 0
    beyond: int = 0
    differences: list = field(default_factory=list)

    def add(self, other: "Tally") -> None:
        for name in ("seconds", "tokens", "forwards", "identical", "runs", "near_ties", "beyond", "differences"):
            setattr(self, name, getattr(self, name) + getattr(other, name))


#: reads a run's tokens as greedy decoding would: prompt, tokens -> the differences (`mtdecode.testing.ties`)
Judge = Callable[[list[int], list[int]], list]


def race(
    contenders: dict[str, Contender],
    prompts: list[list[int]],
    on_run: Callable[[str], None],
    judge: Judge | None = None,
) -> dict[str, Tally]:
    """Decode every prompt with every contender, rotating who goes first; `on_run(name)` after each run. With a
    `judge`, every exact contender's run that is not identical to greedy's is judged up to ties."""
    names = list(contenders)
    tallies = {name: Tally() for name in names}
    for i, prompt in enumerate(prompts):
        shift = i % len(names)
        outputs = {}
        for name in names[shift:] + names[:shift]:
            start = time.perf_counter()
            outputs[name] = contenders[name](prompt)
            tallies[name].seconds += time.perf_counter() - start
            tallies[name].tokens += len(outputs[name].tokens)
            tallies[name].forwards += outputs[name].forwards
            tallies[name].runs += 1
            on_run(name)
        for name in names:
            same = outputs[name].tokens == outputs[BASELINE].tokens
            tallies[name].identical += same
            if judge is not None and not same and _is_exact(name):
                found = judge(prompt, outputs[name].tokens)
                tallies[name].differences += [(d.gap, d.top2) for d in found]
                near = bool(found) and all(d.near_tie for d in found)
                tallies[name].near_ties += near
                tallies[name].beyond += not near
    return tallies


@dataclass(frozen=True)
class Row:
    """One line of the benchmark table."""

    task: str
    contender: str
    tokens_per_second: float
    speedup: float
    tokens_per_forward: float
    identical: int
    runs: int
    exact: bool  # whether the contender promises greedy's tokens (MTAD does not)
    near_ties: int = 0  # runs that differ from greedy's only at near-ties (half precision)
    beyond: int = 0  # runs with a difference beyond ε
    differences: list = field(default_factory=list)  # [gap, top-2 margin] of every difference in those runs


def rows_for(task: str, tallies: dict[str, Tally], exact: dict[str, bool]) -> list[Row]:
    base = tallies[BASELINE].tokens / tallies[BASELINE].seconds
    rows = []
    for name, t in tallies.items():
        speed = t.tokens / t.seconds
        per_forward = t.tokens / t.forwards if t.forwards else 0.0
        rows.append(Row(task, name, speed, speed / base, per_forward, t.identical, t.runs, exact[name], t.near_ties,
                        t.beyond, [list(d) for d in t.differences]))  # fmt: skip
    return rows


def run(
    model: CausalLM,
    tokenizer,
    draft: CausalLM | None,
    *,
    names: Sequence[str],
    tasks: Sequence[str],
    prompts_per_task: int,
    max_new_tokens: int,
    options: dict[str, dict] | None = None,
    progress: bool = True,
    judge: Judge | None = None,
    extra: dict[str, object] | None = None,
) -> list[Row]:
    """Run the benchmark; returns one `Row` per task and contender, then one per contender over all tasks.

    `options[name]` are settings for strategy `name` (its defaults otherwise); `judge` (`race`) reads the runs
    that differ from greedy's up to ties; `extra` strategies race beside the named ones (`contenders_for`).
    """
    from tqdm.auto import tqdm

    suite = load_suite()["tasks"]
    eos = tokenizer.eos_token_id
    contenders = contenders_for(names, model, draft, max_new_tokens=max_new_tokens, eos_token_id=eos, options=options,
                                extra=extra)  # fmt: skip
    exact = {name: _is_exact(name) for name in contenders}
    prompts = {
        task: [tokenize(tokenizer, messages) for messages in suite[task]["prompts"][:prompts_per_task]]
        for task in tasks
    }

    # warm-up outside the timings: one-off allocations, and lookahead's measurement of its forward costs
    warm = prompts[tasks[0]][0]
    for contender in contenders.values():
        contender(warm[: min(len(warm), 16)])

    total = sum(len(p) for p in prompts.values()) * len(contenders)
    bar = tqdm(total=total, unit="run", desc="bench", disable=not progress)
    rows, overall = [], {name: Tally() for name in contenders}
    for task in tasks:
        bar.set_description(f"bench {task}")

        def tick(name: str) -> None:
            bar.set_postfix_str(name, refresh=False)
            bar.update()

        tallies = race(contenders, prompts[task], tick, judge)
        rows += rows_for(task, tallies, exact)
        for name, tally in tallies.items():
            overall[name].add(tally)
    bar.close()
    return rows + rows_for("all", overall, exact)


def tie_judge(model: CausalLM, tokenizer, tasks: Sequence[str], *, quiet: bool = False):
    """In half precision, a `Judge` that reads a run up to ties (`mtdecode.testing.ties`) with the ε calibrated on
    the first prompt of (up to) two of `tasks`, and that `TieBound`; (None, None) in float32 and float64."""
    from mtdecode.testing.ties import BIT_EXACT, calibrate, greedy_differences

    if model.dtype in BIT_EXACT:
        return None, None
    if not quiet:
        print(f"calibrating ε for {model.dtype} ...", file=sys.stderr, flush=True)
    texts = [load_suite()["tasks"][task]["prompts"][0] for task in list(tasks)[:2]]
    bound = calibrate(model, [tokenize(tokenizer, messages) for messages in texts])

    def judge(prompt: list[int], tokens: list[int]) -> list:
        return greedy_differences(model, prompt, tokens, epsilon=bound.epsilon)

    return judge, bound


def _is_exact(name: str) -> bool:
    return name in PEERS or getattr(REGISTRY[name.partition(":")[0]], "exact", True)


def tokenize(tokenizer, messages: list[dict]) -> list[int]:
    return list(tokenizer.apply_chat_template(messages, add_generation_prompt=True)["input_ids"])


def table(rows: Sequence[Row]) -> list[tuple]:
    """Rows as printable tuples, under `TABLE_HEADER`."""
    lines = []
    for r in rows:
        same = f"{r.identical}/{r.runs}" + ("" if r.exact else " (not exact by design)")
        if r.near_ties:
            same += f", {r.near_ties} more up to ties"
        if r.beyond:
            same += f", {r.beyond} BEYOND ε"
        per_forward = f"{r.tokens_per_forward:.2f}" if r.tokens_per_forward else "-"
        lines.append((r.task, r.contender, f"{r.tokens_per_second:.1f}", f"{r.speedup:.2f}x", per_forward, same))
    return lines


TABLE_HEADER = ("task", "contender", "tokens/s", "speed-up", "tokens/target forward", "identical to greedy")


def write_json(path: str | Path, rows: Sequence[Row], settings: dict) -> None:
    """The rows, the settings and the machine, as JSON."""
    machine = dict(
        cpus=os.cpu_count(),
        platform=platform.platform(),
        processor=platform.processor() or platform.machine(),
        cpu_model=cpu_model(),
        cpu_flags=sorted({"avx2", "avx512f", "avx512_vnni", "amx_tile"} & set(_cpu_info("flags").split())),
        torch=torch.__version__,
        torch_threads=torch.get_num_threads(),
    )
    document = dict(settings=settings, machine=machine, rows=[asdict(r) for r in rows])
    Path(path).write_text(json.dumps(document, indent=1) + "\n")


def _cpu_info(field: str) -> str:
    """The first `field` line of /proc/cpuinfo ('' where there is none, e.g. not Linux)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == field:
                return value.strip()
    except OSError:
        pass
    return ""


def cpu_model() -> str:
    """The CPU's model name, e.g. 'AMD EPYC 7B13' (the platform's processor string where /proc/cpuinfo is missing)."""
    return _cpu_info("model name") or platform.processor() or platform.machine()


def read_json(path: str | Path) -> list[Row]:
    """The rows of a file that `write_json` wrote (to print or plot them again)."""
    return [Row(**row) for row in json.loads(Path(path).read_text())["rows"]]


#: font sizes for `plot`: the figure is about 12 inches wide and shown at about half that on a docs page
PLOT_FONTS = {"font.size": 16, "axes.titlesize": 18, "axes.labelsize": 16, "xtick.labelsize": 16,
              "ytick.labelsize": 15, "legend.fontsize": 15}


def plot(path: str | Path, rows: Sequence[Row], title: str) -> None:
    """Two panels of grouped bars: speed-up over Autoregressive, and tokens per target forward.
    Text and axes take matplotlib's current colours, so a style (the docs' dark one, for example) carries over."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = list(dict.fromkeys(r.task for r in rows))
    names = list(dict.fromkeys(r.contender for r in rows))
    value = {(r.task, r.contender): r for r in rows}
    width = 0.8 / len(tasks)
    with plt.rc_context(PLOT_FONTS):
        fig, axes = plt.subplots(2, 1, figsize=(max(7.0, 1.0 * len(names) + 2), 8), sharex=True)
        for panel, (ax, label) in enumerate(
            zip(axes, ("speed-up over autoregressive", "tokens per target forward"), strict=True)
        ):
            for t, task in enumerate(tasks):
                xs = [i + (t - (len(tasks) - 1) / 2) * width for i in range(len(names))]
                ys = [
                    (value[task, n].speedup if panel == 0 else value[task, n].tokens_per_forward)
                    if (task, n) in value
                    else 0.0
                    for n in names
                ]
                ax.bar(xs, ys, width, label=task)
            ax.axhline(1.0, color=plt.rcParams["axes.edgecolor"], linewidth=1.0)
            ax.set_ylim(0, 1.3 * max(ax.get_ylim()[1], 1.0))  # head-room for the legend
            ax.set_ylabel(label)
            ax.grid(axis="y", alpha=0.3)
        axes[0].set_title(title)
        axes[0].legend(ncol=len(tasks), loc="upper left")
        axes[1].set_xticks(range(len(names)), names, rotation=30, ha="right")
        fig.tight_layout()
        fig.savefig(path, dpi=110)
    plt.close(fig)
