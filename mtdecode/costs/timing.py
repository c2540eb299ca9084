"""Timing this host: forwards over n new tokens per row, repeated, the fastest kept, and kept on disk.

`forward_costs` measures how a forward's cost grows with its new tokens, once per model architecture, dtype,
device, host and number of rows, and keeps it (`mtdecode.store`), so that every process weighs the same numbers.
A measurement taken in a busy moment is taken again (`quietest`). `read_once` keeps what a process has read, per
model object, so that a kept measurement's file is read once.
"""

import os
import statistics
import time
import weakref
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, NamedTuple

import torch

from mtdecode import distributed, store
from mtdecode.model import CausalLM, Runner

#: numbers of new tokens whose forward cost is measured
SIZES = (1, 2, 4, 6, 8, 12, 16, 24, 32, 48, 64)


#: cached tokens before the timed forwards: about a benchmark prompt and its answer (a forward's cost grows with n
#: a little faster after a longer context)
CONTEXT = 256


#: numbers of rows at which a batch's forward cost t(B, n) is measured; other batch sizes are interpolated
ROWS = (1, 2, 4, 8, 16, 32)


#: the most tokens (rows x new tokens) in one timed forward of a batch: past it a forward's cost grows in
#: proportion to its tokens (every core is busy), so the last measured slope is continued instead
MOST_TOKENS = 1024


#: a measurement of the forward costs whose mean scatter over the sizes exceeds `QUIET` is taken again, up to
#: `QUIET_TRIES` times in all, and the quietest kept (`quietest`): a measurement taken in a busy minute scatters, sets
#: wide margins and keeps a batch from guessing for good
QUIET, QUIET_TRIES = 0.05, 3


class Timed(NamedTuple):
    """The forward costs per number of new tokens n, from repeats of their timing (`summarise`): the seconds kept
    (`costs`), how far the median repeat lies above the fastest, relative to it (`scatter`: the host's noise while
    they were timed), and for a batch the standard error of each kept t(B, n) / t(B, 1), relative to it
    (`uncertainty`)."""

    costs: dict[int, float]
    scatter: dict[int, float]
    uncertainty: dict[int, float]


def summarise(times: dict[int, list[float]], *, ratios: bool = False) -> Timed:
    """The `Timed` of every repeat's seconds per number of new tokens (the sizes interleaved in each repeat, as
    `_measure` times them).

    Each cost is the fastest repeat: on a shared machine noise only ever adds time. With `ratios` (a batch's), only the
    1-token cost is; the others are it times the median over the repeats of each repeat's own t(n) / t(1), and
    `uncertainty` is that median's standard error (1.2533 times the ratios' standard deviation over the square root
    of their number), relative to the median. The rules weigh t(B, n) against t(B, 1), and a repeat times both
    within a few seconds, while the fastest of each may come from moments far apart: the median of the repeats'
    ratios scatters less than the ratio of the fastest of each (`docs/benchmark.md`)."""
    fastest = {n: min(t) for n, t in times.items()}
    scatter = {n: statistics.median(t) / fastest[n] - 1 for n, t in times.items()}
    if not ratios:
        return Timed(fastest, scatter, {})
    each = {n: [a / b for a, b in zip(t, times[1], strict=True)] for n, t in times.items()}
    median = {n: statistics.median(r) for n, r in each.items()}
    error = {n: 1.2533 * statistics.stdev(r) / len(r) ** 0.5 if len(r) > 1 else 0.0 for n, r in each.items()}
    return Timed({n: fastest[1] * median[n] for n in each}, scatter, {n: error[n] / median[n] for n in each})


#: model -> device -> the kept `Timed` (`uncertainty` empty for one row, whose kept measurements predate it)
_COSTS: "weakref.WeakKeyDictionary[CausalLM, dict[str, Timed]]" = weakref.WeakKeyDictionary()


def use_reference_costs() -> None:
    """From now on, in this process and the ones it starts, take every cost from the reference costs that ship with
    mtdecode (`mtdecode.store.REFERENCE`) instead of timing this host: what the course's notebooks do, so that
    their conclusions do not depend on the load of a shared class server."""
    if os.environ.get("MTDECODE_COSTS") != "record-reference":  # recording them (`mtdecode.store`) goes on
        os.environ["MTDECODE_COSTS"] = "reference"
    _COSTS.clear()  # costs already read in this process came from the host


def forward_costs(
    model: CausalLM, *, rows: int = 1, context: int = CONTEXT, repeats: int | None = None
) -> dict[int, float]:
    """Seconds of one forward over n new tokens per row, for `rows` rows side by side, after a `context`-token
    cache per row, then the cache rolled back to keep one of them as a verifying step does (the fastest of
    `repeats`, 5; for several rows, the fastest 1-token forward times each size's median ratio to it, `summarise`),
    for n in `SIZES` (for several rows, the sizes up to 4 and those of at most `MOST_TOKENS` tokens in all;
    `context` is cut to what the model can attend over). t(B, n) of the issue on batch goodput is
    `forward_costs(model, rows=B)[n]`.

    Measured once per model architecture, dtype, device, host and number of rows, and kept on disk
    (`mtdecode.store`): every later call, in this process or another, gets the same numbers, so the rules that weigh
    them make the same choices and a seeded run repeats.
    """
    return _measured(model, context, repeats, rows).costs


def scatter(model: CausalLM, *, rows: int = 1) -> dict[int, float]:
    """How far the median of `forward_costs`' repeats lies above the fastest, relative to it, per size: the host's
    noise while they were measured (noise only ever adds time)."""
    return _measured(model, CONTEXT, None, rows).scatter


def uncertainty(model: CausalLM, *, rows: int) -> dict[int, float]:
    """The standard error of each kept t(rows, n) / t(rows, 1), relative to it, for `rows` rows (more than one): how
    far the measured ratio the rules weigh may lie from the host's (`summarise`)."""
    if rows == 1:
        raise ValueError("one row's kept forward costs state no uncertainty: its margin is `scatter`'s")
    return _measured(model, CONTEXT, None, rows).uncertainty


#: what a batch's kept forward costs hold, a part of their key: costs kept before `Timed.uncertainty` are measured
#: again
BATCH_PARTS = ("costs", "scatter", "uncertainty")


def _measured(model: CausalLM, context: int, repeats: int | None, rows: int = 1) -> Timed:
    repeats = repeats or 5
    per_device = _COSTS.setdefault(model, {})
    key = f"{model.device} {context} {repeats} {rows}"
    if key not in per_device:
        what = {"model": store.module_key(model.hf), "host": store.host_key(), "context": context, "repeats": repeats}
        parts = BATCH_PARTS if rows > 1 else BATCH_PARTS[:2]
        if rows > 1:  # one row keeps its key and parts, so what was kept (and the reference costs) stays valid
            what.update(rows=rows, parts=list(parts))

        def measure() -> dict:
            timed = quietest(lambda: _measure(model, context, repeats, rows), ratios=rows > 1)
            return {part: timed._asdict()[part] for part in parts}

        value = store.kept("forward", what, measure)
        per_device[key] = Timed(*({int(n): t for n, t in value.get(part, {}).items()} for part in BATCH_PARTS))
    return per_device[key]


def quietest(
    measure_once: Callable[[], dict[int, list[float]]],
    tries: int = QUIET_TRIES,
    quiet: float = QUIET,
    *,
    ratios: bool = False,
) -> Timed:
    """Up to `tries` calls of `measure_once()` (each every repeat's seconds per size, as `_measure` returns them):
    measured again while the last call's mean scatter over the sizes exceeds `quiet`, and every call's repeats
    summarised together (`summarise`, with `ratios` as given): noise only ever adds time, so more repeats come closer
    to the cost, and to its ratios; the scatter kept is the quietest call's. The costs are measured once and kept, so
    without this a busy minute at that one moment would keep its slow forwards and its scatter, and the margins they
    set (`margin`, `batch_margin`), for good."""
    calls = [measure_once()]
    while len(calls) < tries and statistics.fmean(summarise(calls[-1]).scatter.values()) > quiet:
        calls.append(measure_once())
    pooled = summarise({n: [seconds for call in calls for seconds in call[n]] for n in calls[0]}, ratios=ratios)
    quietest_call = min(map(summarise, calls), key=lambda call: statistics.fmean(call.scatter.values()))
    return pooled._replace(scatter=quietest_call.scatter)


class _Answers(dict):
    """What `read_once` read for one model object, or for a chain of them: the question -> the answer; `then`, the
    answers for the chains that go on to another model (held weakly, as the first model is)."""

    def __init__(self) -> None:
        super().__init__()
        self.then: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


#: `read_once`'s answers per first model object (held weakly: they go with the model)
_READ: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def read_once(models: Sequence[CausalLM | torch.nn.Module], question: tuple, read: Callable[[], Any]) -> Any:
    """`read()` the first time this process asks `question` of these model objects where they are now (device and
    dtype), of the kept measurements in use (`store.costs_dir`) and of the host as the keys name it (`store.host_key`:
    its kernels and threads, or the reference costs); the same answer after.
    A kept measurement's key hashes every parameter's shape and its file is read under a lock: about 10 ms, which is
    a per cent of a short call of `generate` at one or two rows if every call paid it."""
    table = _READ
    for model in models:
        answers = table.setdefault(model, _Answers())
        table = answers.then
    key = (*map(_placed, models), str(store.costs_dir()), *sorted(store.host_key().items()), *question)
    if key not in answers:
        answers[key] = read()
    return answers[key]


def _placed(model: CausalLM | torch.nn.Module) -> tuple[str, str]:
    """Where a model's weights are now: device and dtype (of its first parameter)."""
    first = next((model.hf if isinstance(model, CausalLM) else model).parameters(), None)
    return ("", "") if first is None else (str(first.device), str(first.dtype))


def _time_forward(model: CausalLM, rows: int) -> float:
    """t(rows, 1) now, as the kept curve times it: the fastest of 5 after `CONTEXT` entries per row."""
    return min(_measure(model, CONTEXT, 5, rows, sizes=[1])[1])


def measured_sizes(rows: int) -> list[int]:
    """The numbers of new tokens per row whose forward cost is measured for `rows` rows."""
    return [n for n in SIZES if rows == 1 or n <= 4 or rows * n <= MOST_TOKENS]


def _measure(
    model: CausalLM, context: int, repeats: int, rows: int = 1, sizes: Sequence[int] | None = None
) -> dict[int, list[float]]:
    """Every repeat's seconds of a forward over n new tokens per row of `rows` rows after `context` cached entries,
    for n in `sizes` (default: `measured_sizes`), the sizes interleaved in each repeat."""
    sizes = measured_sizes(rows) if sizes is None else sizes
    context = max(1, min(context, model.max_length - max(sizes)))
    generator = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, model.vocab_size, (rows, context + max(sizes)), generator=generator, device="cpu")
    tokens = tokens.to(model.device)
    times: dict[int, list[float]] = {n: [] for n in sizes}
    runner = Runner(model, "tuning")
    runner.extend(tokens[:, :context])
    runner.cache.commit()
    def forward(n: int) -> None:
        runner.extend(tokens[:, context : context + n], logits_to_keep=n)
        runner.cache.crop(context + 1)  # one new entry kept, the others dropped (n = 1: kept as it is)

    for _ in range(repeats):
        for n in sizes:  # interleaved, so a busy moment on the machine hits every size alike
            times[n].append(seconds(partial(forward, n)))
            runner.cache.crop(context)
    return times


def seconds(run: Callable[[], object]) -> float:
    """How long one call of `run` takes: the clock every measurement of the package reads. On several ranks, rank
    0's time on every rank (`mtdecode.distributed.agreed`), so that what a measurement does next (measure again
    while noisy) is the same on all of them."""
    start = time.perf_counter()
    run()
    return distributed.agreed(time.perf_counter() - start)


def fastest(run: Callable[[], object], repeats: int = 5, *, then: Callable[[], object] = lambda: None) -> float:
    """The fastest of `repeats` calls of `run`, in seconds (the one a busy moment on the machine slowed least);
    `then` runs after each call, untimed (to put a cache back as it was)."""
    best = float("inf")
    for _ in range(repeats):
        best = min(best, seconds(run))
        then()
    return best
