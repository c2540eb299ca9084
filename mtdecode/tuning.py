"""Choosing lookahead's W, N and G for the model and device at hand.

A lookahead step feeds (W + G)(N - 1) tokens: the window's N - 1 rows of W (x0 included)
and G candidates of N - 1. Whether that pays depends on how the forward cost grows with
the number of tokens. On a large GPU it hardly grows up to a few hundred tokens, which is
why the paper's defaults are W = 7, N = 5, G = 7 (56 tokens); on a 2-core CPU a forward over
8 tokens costs about 1.2 times a 1-token forward and one over 56 about 2.7 times
(`benchmarks/forward_cost.py`).

`forward_costs` measures that growth once per model architecture, dtype, device and host, and keeps
it on disk (`mtdecode.store`), so that every process weighs the same numbers; `choose` then picks
the (W, N, G) with the best predicted tokens per second:

    predicted speed-up = (1 + E[accepted]) / (cost((W + G)(N - 1)) / cost(1))

E[accepted] comes from a deliberately simple model: each useful candidate matches the
next i tokens with probability a^i, independently, so P(accepted >= i) = 1 - (1 - a^i)^c
for i = 1..N-1, with c = min(G, W) useful candidates (the window adds only W n-grams a
step), or c = G when the pool is seeded from the prompt. The hit rates are fitted by
`python benchmarks/lookahead_grid.py` on the default model: `HIT_RATE` on chat prompts,
`PROMPT_POOL_HIT_RATE` on code-editing prompts with the prompt's n-grams in the pool. They
describe those prompts, not the text you decode; the settings they give are a starting
point that `benchmarks/speedup.py` checks.

The model leaves out each step's bookkeeping, and the costs are measured on a shared machine,
so a predicted gain counts only if it exceeds the measurement's own uncertainty (`margin`; a measurement
taken in a busy moment is taken again, `quietest`): below that, `Lookahead()` decodes greedily.
`lookahead_plan` words the choice, which `Lookahead` records in `result.stats.choices` and `generate`
turns into a `GreedyFallbackWarning` when it is greedy.

The other measurements the rules weigh are kept here too, beside the forward costs: a batch's t(B, n)
(`batch_seconds`, `batch_draft_costs`), a draft's acceptance (`draft_acceptance`) and Jacobi's own
(`jacobi_acceptance`), one more depth of an EAGLE head's tree (`measure_depth_cost`, with its parts in
`depth_timings`), what an EAGLE step does beside its target forward in a batch, timed in a run
(`measure_eagle_steps`), and one more depth of MTAD's beams (`measure_beam_depth_cost`). Those timings, and a draft
forward (`draft_forward_cost`), are kept with a target forward timed right after them and weighed as shares of it
(`kept_beside_forward`), so that a host's speed at one hour does not price work timed at another.
"""

import functools
import os
import statistics
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple

import torch

from mtdecode import masks, store
from mtdecode.beams import BEAM_WIDTH, score_children
from mtdecode.costs import BatchCosts, DraftCosts
from mtdecode.generate import generate
from mtdecode.model import CausalLM, Runner
from mtdecode.plain import decode_plainly
from mtdecode.sampling import Sampler
from mtdecode.session import Choice, Session, Step
from mtdecode.strategy import DecodingStrategy
from mtdecode.tensor_types import Float, Int, Tensor
from mtdecode.zoo.eagle import TREE_WIDTH, EagleHead, HeadRunner

#: numbers of new tokens whose forward cost is measured
SIZES = (1, 2, 4, 6, 8, 12, 16, 24, 32, 48, 64)
#: chance that a candidate's next token matches, fitted on chat prompts (see the module docstring)
HIT_RATE = 0.06
#: the same with the prompt's n-grams in the pool, fitted on code-editing prompts
PROMPT_POOL_HIT_RATE = 0.25
#: cached tokens before the timed forwards: about a benchmark prompt and its answer (a forward over n tokens
#: grew 3 to 5% more with n after 256 tokens than after 64 on the 2-core AMD EPYC host)
CONTEXT = 256
#: the search space of `choose`
MAX_WINDOW, MAX_NGRAM, MAX_GUESSES = 16, 8, 16
#: numbers of rows at which a batch's forward cost t(B, n) is measured; other batch sizes are interpolated
ROWS = (1, 2, 4, 8, 16, 32)
#: what a batch's step spends besides its forwards (verification, cache roll-back, the rule, Python), as a fraction
#: of the step: `benchmarks/step_overhead.py` measured 2 to 5% of a 1-token forward per step; a batch's guesses must
#: be predicted to end it sooner by more than this and the costs' scatter (`batch_margin`); one row's step with
#: guesses costs this much more than a plain step (`step_overhead`: 0.7 to 1.2 ms more per forward call than greedy's,
#: against a 26 ms forward, in the last run)
BOOKKEEPING = 0.05
#: the most tokens (rows x new tokens) in one timed forward of a batch: past it a forward's cost grows in
#: proportion to its tokens (every core is busy), so the last measured slope is continued instead
MOST_TOKENS = 1024

#: a measurement of the forward costs whose mean scatter over the sizes exceeds `QUIET` is taken again, up to
#: `QUIET_TRIES` times in all, and the quietest kept (`quietest`): on the 2-core AMD EPYC host, t(2, 1) measured in a
#: busy minute scattered by 21%, which set margins of 0.36 at 2 rows and 0.28 at 4 and kept every 4-row batch from
#: guessing (0.12 at both, measured this way)
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

    Each cost is the fastest repeat: on a shared machine noise only ever adds time (medians of 3 put a 2-token forward
    anywhere from 1.10x to 1.43x of one token in runs an hour apart). With `ratios` (a batch's), only the 1-token
    cost is; the others are it times the median over the repeats of each repeat's own t(n) / t(1), and
    `uncertainty` is that median's standard error (1.2533 times the ratios' standard deviation over the square root
    of their number), relative to the median. The rules weigh t(B, n) against t(B, 1), and a repeat times both
    within a few seconds, while the fastest of each may come from moments far apart: on the 2-core AMD EPYC host, 12
    measurements of five repeats in a row put t(4, 2) / t(4, 1) at a standard deviation of 0.104 as the fastest of
    each, 0.070 as the median of the repeats' ratios (`docs/benchmark.md`).
    """
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


#: what `kept_beside_forward` weighs a kept timing against: a part of its keys, so timings kept before are taken again
AGAINST = "t(rows, 1) timed after"


def kept_beside_forward(
    kind: str, key: dict, target: CausalLM, rows: int, measure: Callable[[], dict[str, float]]
) -> dict[str, float]:
    """The seconds `measure()` times (by part) beside a forward of `target`, in units of the kept t(1, 1).

    Measured once per `key`, target architecture, number of rows and host, and kept on disk (`mtdecode.store`) with
    t(`rows`, 1) of the target timed right after them, as the kept curve times it (`forward_costs`: the fastest of 5,
    after `CONTEXT` entries); each part is returned as its share of that forward times the kept t(rows, 1). The host's
    speed moves from hour to hour (the 2-core Intel host ran t(8, 1) 1.45x slower one evening than when its curve
    was kept that morning, and near its curve's speed twenty minutes later): seconds timed in one hour over a forward
    timed in another would price the work by the two hours' speeds, not by what it costs beside a forward.
    """

    def timed() -> dict[str, float]:
        seconds = measure()
        return {**seconds, "forward": _time_forward(target, rows)}  # t(rows, 1) at the same moment

    key = {**key, "target": store.module_key(target.hf), "rows": rows, "against": AGAINST, "host": store.host_key()}
    value = store.kept(kind, key, timed)
    unit = value["forward"] / batch_relative(target, rows, 1)  # the kept t(1, 1), in that moment's seconds
    return {part: seconds / unit for part, seconds in value.items() if part != "forward"}


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
    for _ in range(repeats):
        for n in sizes:  # interleaved, so a busy moment on the machine hits every size alike
            start = time.perf_counter()
            runner.extend(tokens[:, context : context + n], logits_to_keep=n)
            runner.cache.crop(context + 1)  # one new entry kept, the others dropped (n = 1: kept as it is)
            times[n].append(time.perf_counter() - start)
            runner.cache.crop(context)
    return times


def margin(model: CausalLM, tokens: int, *, rows: int = 1) -> float:
    """How much a predicted speed-up must exceed 1 to be a gain: the uncertainty of t(1) plus that of t(tokens) (at
    the nearest measured size at or above it), for `rows` rows: those of its own measurement where `rows` is one of
    `ROWS`, else the larger of the two measurements that `batch_seconds` interpolates between (past the largest
    number of rows measured, that measurement's). For one row each uncertainty is `scatter`'s at that size (the
    median's distance above the fastest, which lookahead's one-row choice has always weighed); for a batch, two
    standard errors of the measured t(rows, tokens) / t(rows, 1) (`uncertainty`)."""
    if rows in ROWS:
        measured = [rows]
    else:
        measured = [r for r in ROWS if r >= rows][:1] or [ROWS[-1]]
        measured += [r for r in ROWS if r < rows][-1:]
    total = 0.0
    for r in measured:
        spread = scatter(model) if r == 1 else uncertainty(model, rows=r)
        size = min([n for n in spread if n >= tokens], default=max(spread))
        # one row: the repeats' scatter at 1 token and at `size`; a batch: two standard errors of t(r, size) / t(r, 1)
        total = max(total, spread[1] + spread[size] if r == 1 else 2 * spread[size])
    return total


def batch_seconds(model: CausalLM, rows: int, tokens: int) -> float:
    """t(rows, tokens): seconds of a forward over `tokens` new tokens in each of `rows` rows, measured at the
    neighbouring numbers of rows in `ROWS` and interpolated linearly between them (continued past the largest);
    between measured sizes, and past the largest measured for that many rows, as `relative_cost` does."""

    def measured(r: int) -> float:
        costs = forward_costs(model, rows=r)
        return relative_cost(costs, tokens) * costs[1]

    return between_rows(rows, measured)


def between_rows(rows: int, measured: Callable[[int], float]) -> float:
    """`measured(rows)` where `rows` is one of `ROWS`; else interpolated linearly between the neighbouring numbers of
    rows in `ROWS`, and past the largest, the last segment's slope continued."""
    if rows in ROWS:
        return measured(rows)
    below = max(r for r in ROWS if r <= rows)
    above = min([r for r in ROWS if r >= rows], default=None)
    if above is None:  # past the largest: continue the last segment's slope
        below, above = ROWS[-2], ROWS[-1]
    low, high = measured(below), measured(above)
    return low + (high - low) * (rows - below) / (above - below)


def batch_relative(model: CausalLM, rows: int, tokens: int) -> float:
    """t(rows, tokens) / t(1, 1): a batch's forward in units of a 1-token forward of one row (for one row, exactly
    `relative_cost`)."""
    costs = forward_costs(model)
    if rows == 1:
        return relative_cost(costs, tokens)
    return batch_seconds(model, rows, tokens) / costs[1]


def batch_forward_costs(model: CausalLM, rows: int) -> dict[int, float]:
    """`forward_costs` for `rows` rows at every size of `SIZES` (`batch_seconds`): what `choose` weighs for a batch."""
    if rows == 1:
        return forward_costs(model)
    return {n: batch_seconds(model, rows, n) for n in SIZES}


def batch_curve(model: CausalLM, rows: int, longest: int, *, planned: bool = True) -> list[float]:
    """t(rows, 1..longest) in units of t(1, 1), a 1-token forward of one row: the batch's step costs. `planned`:
    never cheaper than fewer tokens (where a wider forward measured cheaper, a faster kernel or noise, one more token
    counts as free); else as measured (`measured_curve`)."""
    measured = [batch_relative(model, rows, n) for n in range(1, longest + 1)]
    return [max(measured[: n + 1]) for n in range(len(measured))] if planned else measured


def batch_draft_costs(
    target: CausalLM,
    draft: CausalLM | None,
    rows: int,
    *,
    longest: int = 32,
    planned: bool | None = None,
    draft_cost: float | None = None,
    overhead: float | None = None,
) -> BatchCosts:
    """The `BatchCosts` of a batch of `rows` rows, measured on this host, in units of t(1, 1): the target's forwards
    over 1..`longest` tokens per row and, per guess, a draft forward over one token per row (`draft_forward_cost`;
    `draft` None: guesses that cost nothing to make), or `draft_cost` if given (MTAD's, `measure_beam_depth_cost`).
    The curve is planned (`batch_curve`) where there is a draft and as measured where there is none, unless `planned`
    says otherwise. One row's are `draft_costs`' (or `copy_costs`'). `overhead`: what a step with guesses spends
    beside its forwards beyond a plain step (`DraftCosts.overhead`; None: `step_overhead`), where the strategy
    measured it (`Eagle`'s, `measure_eagle_steps`)."""
    planned = draft is not None if planned is None else planned
    curve = batch_curve(target, rows, longest, planned=planned)
    if draft_cost is None:
        draft_cost = 0.0 if draft is None else draft_forward_cost(target, draft, rows)
    overhead = step_overhead(rows) if overhead is None else overhead
    return BatchCosts({rows: DraftCosts(draft_cost, curve, overhead)}, margin=batch_margin(target, rows))


def draft_forward_cost(target: CausalLM, draft: CausalLM, rows: int) -> float:
    """A draft forward over one token per row for a batch of `rows` rows, in units of t(1, 1) of the target: the
    draft's t(rows, 1) timed beside the target's (`kept_beside_forward`) at the numbers of rows in `ROWS`, and
    interpolated between them (`between_rows`). The two models' kept curves were timed minutes apart, so their ratio
    would mix two moments' speeds."""

    def measured(r: int) -> float:
        def kept() -> dict[str, float]:
            key = {"draft": store.module_key(draft.hf)}
            return kept_beside_forward("draft-forward", key, target, r, lambda: {"draft": _time_forward(draft, r)})

        return read_once((target, draft), ("draft-forward", r), kept)["draft"]

    return between_rows(rows, measured)


def step_overhead(rows: int) -> float:
    """What a step with guesses spends besides its forwards beyond a plain step (`DraftCosts.overhead`), for one
    row: `BOOKKEEPING`, so that a guess whose expected gain is smaller is not verified. For a batch, 0: the batch
    rule's margin holds it (`batch_margin`)."""
    return BOOKKEEPING if rows == 1 else 0.0


def batch_margin(model: CausalLM, rows: int) -> float:
    """How much sooner guesses must be predicted to end a batch of `rows` rows before they count (`BatchCosts.margin`):
    `BOOKKEEPING` for what the cost model leaves out, plus two standard errors of the measured t(rows, 2) / t(rows, 1)
    (`margin`, `uncertainty`); 0 for one row, whose rule weighs its rate instead. `MTDECODE_BATCH_MARGIN` in the
    environment can override it (a number in [0, 1))."""
    if rows == 1:
        return 0.0
    if "MTDECODE_BATCH_MARGIN" in os.environ:
        return float(os.environ["MTDECODE_BATCH_MARGIN"])
    return min(0.5, BOOKKEEPING + margin(model, 2, rows=rows))


def relative_cost(costs: dict[int, float], tokens: int) -> float:
    """cost(tokens) / cost(1), interpolated linearly between measured sizes (extrapolated past the largest)."""
    sizes = sorted(costs)
    below = max([n for n in sizes if n <= tokens], default=sizes[0])
    above = min([n for n in sizes if n >= tokens], default=None)
    if above is None:  # past the largest size: continue the last segment's slope
        below, above = sizes[-2], sizes[-1]
    if above == below:
        return costs[below] / costs[1]
    slope = (costs[above] - costs[below]) / (above - below)
    return (costs[below] + slope * (tokens - below)) / costs[1]


#: tokens of the target's own greedy text on which `draft_acceptance` scores the draft, after a start of `START` tokens
ACCEPTANCE_TOKENS, START = 64, 8


def draft_acceptance(target: CausalLM, draft: CausalLM) -> float:
    """How often the draft's greedy guess is the target's greedy token, given the target's text so far: the chance
    that a first guess is accepted at temperature 0 (alpha in Leviathan et al., Section 3.1), which the stopping rule
    takes as its prior (`rule_for`'s `acceptance`). Scored on `ACCEPTANCE_TOKENS` tokens of the target's own greedy
    continuation of `START` tokens it sampled with a fixed seed; measured once per pair of models and host and kept on
    disk like the costs (`mtdecode.store`), so that every process uses the same number."""

    def kept() -> float:
        key = {
            "target": store.module_key(target.hf) | {"weights": store.weights_key(target.hf)},
            "draft": store.module_key(draft.hf) | {"weights": store.weights_key(draft.hf)},
            "host": store.host_key(),
        }
        return store.kept("acceptance", key, lambda: {"acceptance": _score_draft(target, draft)})["acceptance"]

    return read_once((target, draft), ("acceptance",), kept)


def _score_draft(target: CausalLM, draft: CausalLM) -> float:
    text = _target_text(target, ACCEPTANCE_TOKENS)
    with torch.no_grad():
        guesses = Runner(draft, "tuning").extend(text.to(draft.device))[:, START:-1].argmax(-1)  # (1, tokens)
    return float((guesses.to(text.device) == text[:, START + 1 :]).double().mean())


def _target_text(target: CausalLM, greedy: int) -> Int[Tensor, "1 tokens"]:
    """Token 0, then `START` tokens sampled from the target with a fixed seed, then `greedy` tokens of its greedy
    continuation: text of the target's own on which a guesser is scored."""
    generator = torch.Generator().manual_seed(0)
    runner, text = Runner(target, "tuning"), torch.zeros(1, 1, dtype=torch.long, device=target.device)
    logits = runner.extend(text, logits_to_keep=1)[:, -1]  # (1, vocab)
    with torch.no_grad():
        for i in range(START + greedy):
            runner.cache.commit()
            sampled = torch.multinomial(torch.softmax(logits.double().cpu(), -1), 1, generator=generator)
            token = sampled.to(text.device) if i < START else logits.argmax(-1, keepdim=True)
            text = torch.cat([text, token], dim=1)
            logits = runner.extend(text[:, -1:], logits_to_keep=1)[:, -1]
    return text


def jacobi_acceptance(target: CausalLM) -> float:
    """How often a Jacobi guess at the first place of the block is accepted: Jacobi decoding with one guess per
    step, greedy, for `ACCEPTANCE_TOKENS` tokens after the start that `draft_acceptance` uses; its accepted guesses
    over its steps. `Jacobi`'s rule takes it as the first place's prior: guesses made after a wrong token seldom
    converge on real text (the papers' plain Jacobi gains a few percent of tokens per step), and an even chance
    instead made the rule verify a dozen guesses before their record said they do not pay. Measured once per model
    and host and kept on disk (`mtdecode.store`), like the costs."""

    def score() -> dict:
        text = _target_text(target, 0)[0].tolist()
        kept = jacobi_guesses(target, text, text[-1], ACCEPTANCE_TOKENS)  # any start converges: a prompt token
        return {"acceptance": sum(kept) / len(kept)}

    def kept() -> float:
        key = {"target": store.module_key(target.hf) | {"weights": store.weights_key(target.hf)}}
        return store.kept("jacobi-acceptance", key | {"host": store.host_key()}, score)["acceptance"]

    return read_once((target,), ("jacobi-acceptance",), kept)


def jacobi_guesses(target: CausalLM, text: list[int], guess: int, tokens: int) -> list[bool]:
    """Whether each step of `Jacobi(block=1)` (`mtdecode.strategies.jacobi`, greedy) kept its guess, from `text` and a
    first `guess` until at least `tokens` new tokens. Each step is one forward over the whole text and the guess, with
    no cache (the text is short): the guess is kept if it is the target's token after the text, and the next guess
    is the target's token after the guess (the Jacobi update, which repeats the new token after a kept guess)."""
    kept, start = [], len(text)
    with torch.no_grad():
        while len(text) - start < tokens:
            fed = torch.tensor([text + [guess]], device=target.device)
            after_text, after_guess = Runner(target, "tuning").extend(fed, logits_to_keep=2)[0].argmax(-1).tolist()
            kept.append(guess == after_text)
            text = text + ([guess, after_guess] if kept[-1] else [after_text])
            guess = after_guess
    return kept


def draft_costs(target: CausalLM, draft: CausalLM, *, longest: int = 32) -> DraftCosts:
    """One row's costs that `mtdecode.policy.rule` weighs, measured on this host: a draft forward and
    target forwards over 1..`longest` tokens, in units of a 1-token target forward (`batch_draft_costs` for 1 row)."""
    return batch_draft_costs(target, draft, 1, longest=longest).at(1)


def copy_costs(target: CausalLM, *, longest: int = 32) -> DraftCosts:
    """The same for guesses that cost nothing to make (prompt lookup copies them from the text), with the curve as
    measured: `Rule.plan` weighs every width at once, so a wider forward that measured cheaper than a
    narrower one is a real choice there (on some hosts 2 tokens cost more than 4)."""
    return batch_draft_costs(target, None, 1, longest=longest).at(1)


def candidate_costs(model: CausalLM, window: int, ngram: int, guesses: int, *, rows: int = 1) -> BatchCosts:
    """What a lookahead step of `rows` rows costs with 0, 1, ..., `guesses` candidates verified, in units of a
    1-token forward of one row (as `DraftCosts.target`, indexed by candidates: `step(g)` is the forward over x0, the
    window's (W + g)(N - 1) - 1 other cells and g candidates of N - 1 tokens, in every row), as measured on this
    host."""
    steps = [batch_relative(model, rows, (window + g) * (ngram - 1)) for g in range(guesses + 1)]
    costs = DraftCosts(draft=0.0, target=steps, overhead=step_overhead(rows))
    return BatchCosts({rows: costs}, margin=batch_margin(model, rows))


def measured_curve(model: CausalLM, longest: int) -> list[float]:
    """t(1..longest): a forward over n tokens against one, as measured (interpolated between measured sizes)."""
    return batch_curve(model, 1, longest, planned=False)


def expected_tokens(w: int, n: int, g: int, hit_rate: float, *, prompt_pool: bool = False) -> float:
    """Predicted tokens per step: 1 + sum over i = 1..N-1 of 1 - (1 - a^i)^c,
    with c = G if the pool holds the prompt's n-grams, else min(G, W)."""
    useful = g if prompt_pool else min(g, w)
    return 1 + sum(1 - (1 - hit_rate**i) ** useful for i in range(1, n))


def predicted_speedup(costs: dict[int, float], w: int, n: int, g: int, *, prompt_pool: bool = False) -> float:
    """Predicted tokens per second of Lookahead(W, N, G) over greedy's: E[tokens per step] / relative cost."""
    hit_rate = PROMPT_POOL_HIT_RATE if prompt_pool else HIT_RATE
    return expected_tokens(w, n, g, hit_rate, prompt_pool=prompt_pool) / relative_cost(costs, (w + g) * (n - 1))


def choose(
    costs: dict[int, float],
    window: int | None = None,
    ngram: int | None = None,
    guesses: int | None = None,
    *,
    prompt_pool: bool = False,
) -> tuple[int, int, int]:
    """The (W, N, G) with the best predicted speed-up; a value given is kept as it is.

    G = 0 is never chosen: a window whose n-grams nobody verifies costs and yields nothing. The search (16 x 7 x 16
    settings when none is given) runs once per costs and values given in a process, not in every `Lookahead` call.
    """
    return _choose(tuple(sorted(costs.items())), window, ngram, guesses, prompt_pool)


@functools.lru_cache(maxsize=256)
def _choose(
    costs: tuple[tuple[int, float], ...], window: int | None, ngram: int | None, guesses: int | None, prompt_pool: bool
) -> tuple[int, int, int]:
    """`choose`, for costs given as sorted (tokens, seconds) pairs, which can be a cache's key."""
    table = dict(costs)
    best: tuple[float, tuple[int, int, int]] | None = None
    for w in [window] if window is not None else range(1, MAX_WINDOW + 1):
        for n in [ngram] if ngram is not None else range(2, MAX_NGRAM + 1):
            for g in [guesses] if guesses is not None else range(1, MAX_GUESSES + 1):
                speed = predicted_speedup(table, w, n, g, prompt_pool=prompt_pool)
                if best is None or speed > best[0]:
                    best = (speed, (w, n, g))
    assert best is not None  # every range above is non-empty
    return best[1]


def lookahead_settings(
    model: CausalLM,
    window: int | None,
    ngram: int | None,
    guesses: int | None,
    *,
    prompt_pool: bool = False,
    rows: int = 1,
) -> tuple[int, int, int] | None:
    """(W, N, G): the values given, and for any left as None the best choice for this model and device, for a
    batch of `rows` rows (its forward costs t(rows, n) against batched greedy's t(rows, 1)).

    None when all three were left to the tuning and no setting is predicted to beat greedy here:
    the caller should decode greedily (`lookahead_plan` says why).
    """
    return lookahead_plan(model, window, ngram, guesses, prompt_pool=prompt_pool, rows=rows)[0]


def lookahead_plan(
    model: CausalLM,
    window: int | None,
    ngram: int | None,
    guesses: int | None,
    *,
    prompt_pool: bool = False,
    rows: int = 1,
) -> tuple[tuple[int, int, int] | None, Choice | None]:
    """`lookahead_settings` and the `Choice` that says what was chosen and why, for `Stats.choices`.

    **Returns:** the settings (None: decode greedily) and the choice: `"Lookahead: W=1, N=2, G=5 (at most):
    predicted 1.31x greedy ..."`, or, when no setting is predicted to beat greedy by more than the
    measurement's scatter (for a batch, plus `BOOKKEEPING`, as `batch_margin` adds it), `"Lookahead: decodes
    greedily: its best setting ... Lookahead(1, 2, 5) forces it"` (`Choice.greedy`). The choice is None when all
    three values were given: nothing was tuned.
    """
    if window is not None and ngram is not None and guesses is not None:
        return (window, ngram, guesses), None
    costs = batch_forward_costs(model, rows)
    w, n, g = choose(costs, window, ngram, guesses, prompt_pool=prompt_pool)
    speed = predicted_speedup(costs, w, n, g, prompt_pool=prompt_pool)
    size = (w + g) * (n - 1)
    noise = margin(model, size, rows=rows)
    # a batch's steps spend what the cost model leaves out (`BOOKKEEPING`), as the batch rule's margin weighs it
    # (`batch_margin`); one row's candidate rule weighs it per step (`step_overhead`)
    bookkeeping = 0.0 if rows == 1 else BOOKKEEPING
    kept_out = "" if rows == 1 else f" plus the steps' bookkeeping ({bookkeeping:.0%})"
    here = "on this host" if rows == 1 else f"for a batch of {rows} rows on this host"
    values = {"W": (w, window), "N": (n, ngram), "G": (g, guesses)}  # chosen, given
    setting = ", ".join(f"{k}={v}" + (" (given)" if given is not None else "") for k, (v, given) in values.items())
    if window is None and ngram is None and guesses is None and speed <= 1 + noise + bookkeeping:
        forced = f"Lookahead({w}, {n}, {g}{'' if prompt_pool else ', prompt_pool=False'})"
        reason = (
            f"its best setting W={w}, N={n}, G={g} is predicted at only {speed:.2f}x greedy, within the "
            f"measurement's scatter of {noise:.0%} of 1{kept_out}, because a forward over {size} tokens costs "
            f"{relative_cost(costs, size):.2f}x one token {here}; {forced} forces it"
        )
        return None, Choice("Lookahead", "decodes greedily", reason, greedy=True)
    greedy = "greedy on this host's forward costs" if rows == 1 else f"batched greedy on this host's t({rows}, n)"
    reason = f"predicted {speed:.2f}x {greedy}, beyond their {noise:.0%} scatter{kept_out}"
    if guesses is None:
        setting += " (at most)"
        reason += "; each step verifies only the candidates that pay"
    return (w, n, g), Choice("Lookahead", setting, reason)


def explain(model: CausalLM, draft: CausalLM | None = None) -> list[str]:
    """One line per tuned strategy: what it chose on this host and why (printed by `mtdecode bench`)."""
    costs = forward_costs(model)
    curve = ", ".join(f"{n}: {relative_cost(costs, n):.2f}x" for n in (2, 4, 8, 16))
    lines = [f"forward over n tokens against 1 token on this host: {curve}"]
    for pool in (False, True):
        choice = lookahead_plan(model, None, None, None, prompt_pool=pool)[1]
        lines.append(f"Lookahead(prompt_pool={pool}): {choice.setting}: {choice.reason}")
    copy = copy_costs(model, longest=11)
    cheapest = min(range(2, 12), key=copy.t)
    lines.append(
        f"PromptLookup: weighs each step's copied tokens against this curve and the row's rate so far; "
        f"verifying 10 costs {copy.t(11):.2f}x one token, and {cheapest - 1} cost the least, {copy.t(cheapest):.2f}x"
    )
    if draft is not None:
        c = draft_costs(model, draft)
        break_even = c.step(1) - c.step(0)
        lines.append(
            f"Speculative/MTAD: a draft forward costs {c.draft:.2f} of a target forward, one more verified token "
            f"{c.t(2) - c.t(1):.2f}, a step's bookkeeping {c.overhead:.2f}; a first guess pays only if the draft is "
            f"accepted more than {break_even:.0%} of the time (rows whose acceptance falls below decode greedily)"
        )
    return lines


def measure_depth_cost(target: CausalLM, head: EagleHead, width: int, rows: int = 1) -> float:
    """One more depth of the tree for a batch of `rows` rows (a head forward over `width` nodes per row after
    `CONTEXT` entries, the nodes' scores and the choice of children), the fastest of 5 runs, in units of a 1-token
    target forward of one row: timed beside t(rows, 1) of the target (`kept_beside_forward`; measured once per head
    architecture, width, number of rows and host, and kept on disk like the target's costs, `mtdecode.store`)."""

    def kept() -> dict[str, float]:
        key = {"head": store.module_key(head), "width": width}
        return kept_beside_forward(
            "eagle-depth", key, target, rows, lambda: {"depth": _time_depth(head, width, rows=rows)}
        )

    return read_once((target, head), ("eagle-depth", width, rows), kept)["depth"]


#: entries per row over which the head's reading of the target's features is timed (`measure_read_cost`)
READ_TOKENS = 16


def measure_read_cost(target: CausalLM, head: EagleHead, rows: int = 1) -> float:
    """The head reading the target's features for a batch of `rows` rows (a head forward over new entries after
    `CONTEXT` of them, as when a resting batch resumes), per entry: timed over `READ_TOKENS` entries per row (the
    fastest of 5 runs) beside t(rows, 1) of the target (`kept_beside_forward`; measured once per head architecture,
    number of rows and host, and kept on disk, `mtdecode.store`) and divided by `READ_TOKENS`, in units of a 1-token
    target forward of one row. A read over n entries per row is taken to cost n times this: the head's read grows in
    proportion to its entries, faster than the target's forward (`mtdecode.strategies.eagle.reading_cost`)."""

    def kept() -> dict[str, float]:
        key = {"head": store.module_key(head), "tokens": READ_TOKENS}
        return kept_beside_forward("eagle-read", key, target, rows, lambda: {"read": _time_read(head, rows)})

    return read_once((target, head), ("eagle-read", rows), kept)["read"] / READ_TOKENS


#: new tokens per row over which `measure_eagle_steps` times EAGLE's steps, after prompts of `STEP_PROMPT` tokens
STEP_TOKENS, STEP_PROMPT = 12, 64
#: how many times `measure_eagle_steps` makes each of its runs: the catch-up is one step of a run, so one run gives
#: one sample of it
STEP_RUNS = 3


class EagleStepCosts(NamedTuple):
    """What an EAGLE step spends beside its target forward, beyond a plain step, measured in a run
    (`measure_eagle_steps`), in units of a 1-token target forward of one row."""

    #: o: a drafting step's fixed work with a tree of one depth (the head reading the step's features, the first
    #: depth's scores, the tree's bookkeeping and verification, the rule), beyond its nodes
    step: float
    #: one more depth of the tree: a head forward over W nodes per row, their scores and the choice of children
    depth: float
    #: each verified node: the tree's masks and the verification grow with it
    node: float
    #: the head's catch-up per entry read, as `measure_read_cost` gives it (a read of n entries per row costing n
    #: times this), from the step in which the head first read the prompts
    read: float


def measure_eagle_steps(
    target: CausalLM,
    head: EagleHead,
    width: int,
    rows: int,
    tree: Callable[[int, int], DecodingStrategy],
    *,
    lookup: bool,
) -> EagleStepCosts:
    """What a drafting step of `Eagle` costs beside its target forward for a batch of `rows` rows, beyond a plain
    step, measured in the steps of a run rather than piece by piece: at 8 rows on the 2-core Intel host the head's
    read per entry and a depth timed alone (`measure_read_cost`, `measure_depth_cost`) came to 0.8 and 0.6 of what
    they cost between the target's forwards, and the step's own bookkeeping (the tree's masks, its verification, the
    copy and the rule) was not timed at all. `Eagle`'s batch rule weighs these (`DraftCosts.overhead` and `draft`).

    Four kinds of short run of `STEP_TOKENS` new tokens per row from random prompts of `STEP_PROMPT` tokens (a plain
    one, and trees of one depth and one node, two depths and one node, two depths and 2 W nodes: `tree(depth, nodes)`,
    the strategy with such a fixed tree, which `Eagle` makes of itself; `lookup`: whether it searches for a copy, as
    `Eagle`'s default does), each made `STEP_RUNS` times: each step's seconds beside the target's forward (timed by
    hooks on the model), the median over the runs' steps after the head's catch-up, and for the catch-up the median
    of the runs' first drafting steps (a single run gives one sample of it: at 8 rows on the 2-core Intel host, one
    run's came to 0.056 t(1, 1) per entry and two more to 0.119 and 0.090). A node's share is the 2 W-node step's over
    the 1-node one's, per extra node; a depth, two depths' step over one's; the step's overhead, the one-depth one-node
    step's over the plain one's, less a node; the catch-up per entry, the head's first drafting step (it reads the
    prompts) over its later ones, divided by the prompts' entries less one (a later step reads one or two).

    The parts are weighed as shares of t(rows, 1) timed right after the runs (`kept_beside_forward`). The runs' own
    forwards, after 64 to 76 entries, are no such measure: at 32 rows a 1-token forward after 70 entries took 0.69 of
    one after 256, 101 against 146 ms timed alternately. Measured once per head architecture, target architecture,
    width, number of rows, copy, number of runs and host, and kept on disk (`mtdecode.store`)."""

    def kept() -> dict[str, float]:
        key = {"head": store.module_key(head), "width": width, "lookup": lookup, "runs": STEP_RUNS, "read": "per entry"}
        return kept_beside_forward(
            "eagle-step", key, target, rows, lambda: _time_eagle_steps(target, width, rows, tree)
        )

    return EagleStepCosts(**read_once((target, head), ("eagle-step", width, rows, lookup), kept))


class _Plain:
    """Plain steps, as `Autoregressive` takes them (`mtdecode.plain`): what EAGLE's steps are timed against."""

    def decode(self, s: Session) -> Iterator[list[Step]]:
        return decode_plainly(s)


def _time_eagle_steps(
    target: CausalLM, width: int, rows: int, tree: Callable[[int, int], DecodingStrategy]
) -> dict[str, float]:
    generator = torch.Generator().manual_seed(0)
    length = min(STEP_PROMPT, target.max_length - STEP_TOKENS)
    prompts = torch.randint(0, target.vocab_size, (rows, length), generator=generator).tolist()

    def beside(strategy: DecodingStrategy) -> list[float]:
        """Each step's seconds outside the target's forward, from the second step on (the first is the prompts'
        forward; in the second, EAGLE's head first reads their features)."""
        started, spent, ends = [], [], {}
        pre = target.hf.register_forward_pre_hook(lambda *_: started.append(time.perf_counter()))
        post = target.hf.register_forward_hook(lambda *_: spent.append(time.perf_counter() - started[-1]))
        try:  # a step ends when its first row's tokens are committed, after its one target forward
            generate(target, prompts, strategy, max_new_tokens=STEP_TOKENS,
                     on_step=lambda _: ends.setdefault(len(spent), time.perf_counter()))  # fmt: skip
        finally:
            pre.remove(), post.remove()
        times = [ends[k] for k in sorted(ends)]
        return [times[k] - times[k - 1] - spent[k] for k in range(1, len(times))]

    def runs(strategy: DecodingStrategy) -> tuple[list[float], list[float]]:
        """The first step's seconds beside the forward in each of `STEP_RUNS` runs, and every later step's."""
        firsts, later = [], []
        for _ in range(STEP_RUNS):
            first, *rest = beside(strategy)
            firsts.append(first)
            later += rest
        return firsts, later

    generate(target, prompts, tree(2, 1), max_new_tokens=2)  # once untimed: first calls set things up
    plain = statistics.median(runs(_Plain())[1])
    firsts, later = runs(tree(1, 1))
    first, one = statistics.median(firsts), statistics.median(later)
    deeper = statistics.median(runs(tree(2, 1))[1])
    wide = statistics.median(runs(tree(2, 2 * width))[1])
    return eagle_step_parts(plain, first, one, deeper, wide, width=width, entries=length)


def eagle_step_parts(
    plain: float, first: float, one: float, deeper: float, wide: float, *, width: int, entries: int
) -> dict[str, float]:
    """The parts of `EagleStepCosts` from the medians of the timed runs' steps beside their forwards: `plain` steps,
    the `first` drafting step (the head reads the prompts' `entries`) and the later ones of a tree of one depth and
    one node (`one`), two depths and one node (`deeper`), two depths and 2 `width` nodes (`wide`). Each part is a
    difference of medians, so noise can make it negative; it is kept at 0 then."""
    node = max(0.0, (wide - deeper) / (2 * width - 1))
    return {"step": max(0.0, one - plain - node), "depth": max(0.0, deeper - one), "node": node,
            "read": max(0.0, first - one) / (entries - 1)}  # fmt: skip


def _runner_after_context(head: EagleHead, rows: int) -> HeadRunner:
    """A runner of `head` for `rows` rows whose cache holds `CONTEXT` committed entries per row (zeros): what the
    head's timings start from."""
    runner = HeadRunner(head, rows)
    hidden, dtype, device = head.embedding.shape[1], head.dtype, head.device
    ids, offsets, sees, pad = runner.after_held(torch.zeros(rows, CONTEXT, dtype=torch.long, device=device))
    runner.step(torch.zeros(rows, CONTEXT, hidden, dtype=dtype, device=device), ids, offsets, sees, pad=pad)
    runner.cache.commit()
    return runner


def _time_read(head: EagleHead, rows: int, repeats: int = 5) -> float:
    runner = _runner_after_context(head, rows)
    hidden, dtype, device = head.embedding.shape[1], head.dtype, head.device
    features = torch.zeros(rows, READ_TOKENS, hidden, dtype=dtype, device=device)
    best = float("inf")
    for _ in range(repeats):
        ids, offsets, sees, pad = runner.after_held(torch.zeros(rows, READ_TOKENS, dtype=torch.long, device=device))
        start = time.perf_counter()
        runner.step(features, ids, offsets, sees, pad=pad)
        best = min(best, time.perf_counter() - start)
        runner.cache.crop(runner.cache.lengths)  # the new entries go again
    return best


def _time_depth(head: EagleHead, width: int, repeats: int = 5, rows: int = 1) -> float:
    return depth_timings(head, width, repeats, rows)["depth"]


def depth_timings(head: EagleHead, width: int, repeats: int = 5, rows: int = 1) -> dict[str, float]:
    """Seconds, the fastest of `repeats` runs each, for one depth of the tree over `width` nodes per row of `rows`
    rows after `CONTEXT` entries (`"depth"`) and for its parts: the head's forward with its cache update
    (`"head forward"`), the nodes' scores (`"scores"`) and the choice of children (`"choice"`)."""
    runner = _runner_after_context(head, rows)
    hidden, dtype, device = head.embedding.shape[1], head.dtype, head.device
    features = torch.zeros(rows, width, hidden, dtype=dtype, device=device)
    tokens = torch.zeros(rows, width, dtype=torch.long, device=device)
    alone = masks.tree([-1] * width, device=device)  # width nodes side by side
    offsets = torch.zeros(width, dtype=torch.long, device=device)

    def forward() -> Float[Tensor, "rows width hidden"]:
        predicted = runner.step(features, tokens, offsets, alone)
        runner.cache.crop(runner.cache.lengths)  # the nodes' entries go again
        return predicted

    def choose(scores: Float[Tensor, "rows width head"]) -> None:
        torch.softmax(scores.double(), dim=-1).flatten(1).topk(width, dim=1)

    def fastest(run) -> float:
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            run()
            best = min(best, time.perf_counter() - start)
        return best

    with torch.no_grad():
        scores = head.logits(forward())
        return {
            "depth": fastest(lambda: choose(head.logits(forward()))),
            "head forward": fastest(forward),
            "scores": fastest(lambda: head.logits(features)),
            "choice": fastest(lambda: choose(scores)),
        }


def measure_beam_depth_cost(target: CausalLM, draft: CausalLM, width: int, rows: int = 1) -> float:
    """One more depth of MTAD's beams for a batch of `rows` rows (a draft forward over `width` beam tokens per row
    after `CONTEXT` entries, then their children scored and the best `width` chosen, as
    `mtdecode.strategies.mtad.beam_draft` does at temperature 0, with `mtdecode.beams`), the fastest of 5 runs, in
    units of a 1-token target forward of one row: timed beside t(rows, 1) of the target (`kept_beside_forward`;
    measured once per draft architecture, width, number of rows and host, and kept on disk, `mtdecode.store`). The
    scoring is not small beside the forward: it reads `width` x vocabulary probabilities per row in float64."""

    def kept() -> dict[str, float]:
        key = {"draft": store.module_key(draft.hf), "width": width}
        return kept_beside_forward(
            "beam-depth", key, target, rows, lambda: {"depth": _time_beam_depth(draft, width, rows)}
        )

    return read_once((target, draft), ("beam-depth", width, rows), kept)["depth"]


def _time_beam_depth(draft: CausalLM, width: int, rows: int, repeats: int = 5) -> float:
    generator = torch.Generator().manual_seed(0)
    context = torch.randint(0, draft.vocab_size, (rows, CONTEXT), generator=generator).to(draft.device)
    runner = Runner(draft, "tuning")
    runner.extend(context)
    runner.cache.commit()
    beams = torch.zeros(rows, width, dtype=torch.long, device=draft.device)
    log_q = torch.zeros(rows, width, 1, dtype=torch.float64, device=draft.device)
    side_by_side = masks.tree([-1] * width, device=draft.device)
    offsets = torch.zeros(width, dtype=torch.long, device=draft.device)
    best = float("inf")
    with torch.no_grad():
        for _ in range(repeats):
            start = time.perf_counter()
            logits = runner.forward(beams, offsets, side_by_side)  # (rows, W, vocab)
            _, scores = score_children(Sampler(), logits, log_q)
            scores.topk(min(width, scores.shape[1]), dim=1)  # `choose` at temperature 0
            best = min(best, time.perf_counter() - start)
            runner.cache.crop(runner.cache.lengths)  # the beams' entries go again
    return best


def record_reference() -> None:
    """Measure the reference costs (`mtdecode.store.REFERENCE`) that the course's notebooks read: the default model's
    forward costs, its draft's, a draft forward beside a target forward (`draft_forward_cost`), one more depth of its
    EAGLE head's tree at the default width, one more depth of MTAD's beams at its default width, the draft's
    acceptance (`draft_acceptance`) and Jacobi's (`jacobi_acceptance`). Run it on an idle host; it replaces what
    was there."""
    from mtdecode.zoo import DEFAULT_MODEL, DRAFT_MODEL, EAGLE_MODEL, load_model

    for path in store.REFERENCE.glob("*.json"):
        path.unlink()
    os.environ["MTDECODE_COSTS"] = "record-reference"
    _COSTS.clear()
    target, draft = load_model(DEFAULT_MODEL), load_model(DRAFT_MODEL)
    forward_costs(target), forward_costs(draft), draft_forward_cost(target, draft, 1)
    measure_depth_cost(target, load_model(EAGLE_MODEL), TREE_WIDTH)
    measure_beam_depth_cost(target, draft, BEAM_WIDTH)
    draft_acceptance(target, draft)
    jacobi_acceptance(target)
    for path in sorted(store.REFERENCE.glob("*.json")):
        print(path.name)


def main(argv: list[str] | None = None) -> None:
    """`python -m mtdecode.tuning [MODEL] [--measure-again]`: the measured forward costs and the settings
    `Lookahead()` picks; `--measure-again` forgets the kept measurements first."""
    import argparse

    from mtdecode.zoo import DEFAULT_MODEL, load_model

    parser = argparse.ArgumentParser(description=main.__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", default=DEFAULT_MODEL)
    parser.add_argument("--measure-again", action="store_true", help="forget every kept measurement first")
    parser.add_argument(
        "--record-reference", action="store_true",
        help="measure the course's reference costs on this (idle!) host into mtdecode/zoo/costs/, replacing them",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.record_reference:
        record_reference()
        return
    if args.measure_again:
        print(f"forgot {store.forget()} kept measurements in {store.costs_dir()}")
    model = load_model(args.model)
    costs = forward_costs(model)
    print("new tokens:  " + "  ".join(f"{n:>5}" for n in costs))
    print("vs 1 token:  " + "  ".join(f"{relative_cost(costs, n):5.2f}" for n in costs))
    for line in explain(model)[1:]:
        print(line)
    print(f"(kept in {store.costs_dir()})")


if __name__ == "__main__":
    main()
