"""Every strategy against batched greedy and transformers' batched `generate`, at batch 1 to 32.

For each batch size B and each prompt set (`mixed`: the benchmark suite's tasks in turn; `code`: its
code-editing prompts), one interleaved race on the default model over max(B, 4) prompts (`--least-prompts`),
decoded B rows at a time, so that a small batch's figures do not rest on one prompt's acceptance and batches 1, 2
and 4 decode the same prompts: batched greedy
(`Autoregressive`), transformers' `generate(do_sample=False)` on the same left-padded prompts, and
every strategy in the registry with its defaults (the draft model where one is needed). Who goes
first rotates from round to round, so a busy moment hits every runner alike. Rows stop at the
end-of-turn token; tokens/s counts every row's tokens up to and including it.

With `--paired`, every runner's run in a round is paired with a run of batched greedy right beside it
(greedy first in even rounds, second in odd ones), and each runner also gets the median over the rounds
of its pair's ratio, with the lowest and highest: a busy stretch of the host then moves both runs of a
pair alike, where the summed tokens/s compare runs up to a round apart.

Every run of a runner does the same work (temperature 0, the rules' costs kept on disk, every record started
afresh): the same tokens from the same forwards, which the script checks. Whatever else the host does can then only
add time to a run, so the fastest of a runner's runs is the closest to its cost on a quiet host, as `timeit`
reasons. The column "fastest" divides a runner's fastest tokens/s by greedy's fastest over as many greedy runs (the
greedy runs of its pairs with `--paired`, else one per round); the floor below is checked on it, beside the median.

For each batch it prints the measured forward costs t(B, n) / t(B, 1) that the rules weigh
(`mtdecode.costs.curves.batch_seconds`), then per strategy: tokens/s, the ratio to batched greedy, the
modelled ratio (the last run's target and draft forwards priced by the measured t(B, n), against
greedy's priced alike: a figure without the host's scatter, which leaves out EAGLE's head and every
step's bookkeeping), the milliseconds per target forward that the last run spent outside the forwards ("beside":
that bookkeeping, and EAGLE's head), tokens per row forward, rows identical to batched greedy's, what the
strategy chose (`result.stats.choices`), and, where a strategy lands below 0.97x, the measurement that limits it:
the forwards' time in the run where the forwards priced by t(B, n) and the time measured beside them together
predict 0.97x or more against greedy's alike ("predicted", in the JSON): t(B, n) as measured where the pairs show the
forwards alone costing more beside greedy's than t(B, n) prices them (never where the strategy fed greedy's very
forwards: those t(B, n) prices alike), else the host's scatter (or forwards under a tree or lookahead mask dearer
than t(B, n) says); else the cost beside the forwards where the forwards alone reach 0.97x, else t(B, n) against the
rows' acceptance.

A cell's median of a few pairs still moves by several points on a shared host. So with `--paired` the run first says
how far (`host_scatter`): transformers' pairs, the same work as greedy's in every cell, give the host's scatter in this
run, hence the chance that a cell's median of a runner exactly as fast as greedy lands below the floor, and how many of
the strategies' cells would by that alone, beside how many did. It then ends by pooling, per strategy, the pairs of
every cell where its runs fed greedy's very forwards (its rule decoded greedily there; for transformers' `generate`,
every cell): the geometric mean of those ratios, with a 95% interval, is what its steps cost beyond greedy's with the
scatter averaged out, and says whether that reaches the floor. Where that
interval straddles the floor, the pairs are split in two: the forwards alone (the same work in both runs of a pair,
so their ratio shows the host's scatter), and each run with its forwards timed as its greedy partner's same forwards
were, which leaves what its steps spend beside them; when the first holds 1, the second, free of the forwards'
scatter, decides. Then every cell of every runner, where it drafted too, is judged that way (`at_their_price`): in each
pair its forwards are timed as greedy's forwards in the pair were, scaled by what t(B, n) prices its forwards at
against greedy's, and its time beside them is added as measured; that leaves the host's scatter out of the forwards,
and stands on t(B, n), so it first says, per runner, whether its forwards alone took their price over all its pairs,
and names what limits each cell not at or above the floor. Last, every exact strategy raced at 4 rows of the code
prompts is judged against 1.2x batched greedy on its pairs' interval, with the measurement that limits each one below
it (`goal`), beside the share of greedy's run that the prompts' forward takes, which no strategy shortens: what 1.2x
then asks of the steps after it. Every 95% interval here is Student's t over the logarithms of the ratios. The goal's
cell can race more rounds than the others (`--goal-rounds`, `cell_rounds`), so that one run judges all three figures.

    python benchmarks/batch_throughput.py [--rounds 2] [--goal-rounds 24] [--new-tokens 32] [--batches 1 2 4 8 16 32]
                                          [--sets mixed code] [--strategies eagle ...] [--paired]
                                          [--least-prompts 4] [--json build/batch.json]
"""

import argparse
import contextlib
import json
import math
import statistics
import time
from pathlib import Path

import torch
from tqdm import tqdm

import mtdecode
from mtdecode import model as adapter
from mtdecode.bench import hold_freed_memory, load_suite
from mtdecode.costs import curves, probes
from mtdecode.generate import Stats
from mtdecode.strategies import MTAD, REGISTRY, Autoregressive, needs_draft

#: the ratio to batched greedy that every strategy's default must reach (the issue on batch goodput)
FLOOR = 0.97
#: the ratio of batched greedy to transformers' batched greedy that must be kept
TRANSFORMERS_FLOOR = 0.95
#: the best exact strategy's ratio to batched greedy that must be reached at this batch on these prompts
GOAL, GOAL_BATCH, GOAL_PROMPTS = 1.2, 4, "code"


def prompt_set(tokenizer, name: str, count: int) -> list[list[int]]:
    """`count` prompts of the suite, tokenized with the chat template: `mixed` takes every task in turn, `code` the
    code-editing task; both repeat their prompts when `count` exceeds them."""
    tasks = load_suite()["tasks"]
    if name == "code":
        messages = tasks["code"]["prompts"]
    else:
        per_task = [task["prompts"] for task in tasks.values()]
        messages = [m for group in zip(*per_task, strict=False) for m in group]  # chat, code, summary, math, ...
    chosen = [messages[i % len(messages)] for i in range(count)]
    return [tokenizer.apply_chat_template(m, add_generation_prompt=True)["input_ids"] for m in chosen]


def up_to_eos(row: list[int], eos: int) -> list[int]:
    return row[: row.index(eos) + 1] if eos in row else row


def ours(model, groups, new_tokens, eos, strategy):
    """mtdecode, one batched call per group of prompts: each row's tokens and the calls' stats together."""
    rows, stats = [], []
    for prompts in groups:
        result = mtdecode.generate(
            model, prompts, strategy, max_new_tokens=new_tokens, eos_token_id=eos, pad_token_id=eos, seed=0
        )
        rows += [result.row(b) for b in range(len(prompts))]
        stats.append(result.stats)
    return rows, together(stats)


def together(calls: list) -> Stats:
    """The `Stats` of several `generate` calls as one: counts summed, each call's choices kept."""
    places = max(len(s.drafted_per_position) for s in calls)

    def per_place(name: str) -> tuple[int, ...]:
        return tuple(sum(getattr(s, name)[i] for s in calls if i < len(getattr(s, name))) for i in range(places))

    return Stats(
        new_tokens=sum(s.new_tokens for s in calls), target_forwards=sum(s.target_forwards for s in calls),
        draft_forwards=sum(s.draft_forwards for s in calls), seconds=sum(s.seconds for s in calls),
        row_forwards=sum(s.row_forwards for s in calls), drafted_per_position=per_place("drafted_per_position"),
        accepted_per_position=per_place("accepted_per_position"),
        accepted_lengths=tuple(n for s in calls for n in s.accepted_lengths),
        log_ratios=tuple(r for s in calls for r in s.log_ratios), choices=tuple(c for s in calls for c in s.choices),
    )  # fmt: skip


@contextlib.contextmanager
def forwards_fed(models: dict):
    """Record (name, rows, new tokens per row, seconds) of every forward of the named `CausalLM`s (`models`: name ->
    model) while the block runs, in a list it yields."""
    fed, run = [], adapter.CausalLM._run
    names = {id(m): name for name, m in models.items()}

    def recorded(self, input_ids, *args, **kwargs):
        if id(self) not in names:
            return run(self, input_ids, *args, **kwargs)
        start = time.perf_counter()
        out = run(self, input_ids, *args, **kwargs)
        fed.append((names[id(self)], *input_ids.shape, time.perf_counter() - start))
        return out

    adapter.CausalLM._run = recorded
    try:
        yield fed
    finally:
        adapter.CausalLM._run = run


def modelled_seconds(fed: list, models: dict) -> float:
    """What the recorded forwards cost by the forward costs measured on this host (`curves.batch_seconds`): a figure
    without the host's scatter, and without anything besides the forwards (EAGLE's head, the steps' bookkeeping)."""
    return sum(curves.batch_seconds(models[name], rows, tokens) for name, rows, tokens, _ in fed)


def beside_forwards(seconds: float, fed: list) -> float:
    """Milliseconds per target forward that a run spent outside the recorded forwards: each step's bookkeeping
    (verification, cache roll-back, the rules, Python), and EAGLE's head."""
    steps = sum(name == "target" for name, *_ in fed)
    return 1000 * (seconds - sum(spent for *_, spent in fed)) / max(steps, 1)


def predicted_seconds(modelled: float, seconds: float, fed: list) -> float:
    """The run's time with its forwards priced by the measured t(B, n) (`modelled`, from `modelled_seconds`) and the
    time it spent beside them as measured: what the host's scatter does to the forwards, the bulk of a run, is left
    out."""
    return modelled + seconds - sum(spent for *_, spent in fed)


def theirs(model, groups, new_tokens, eos):
    """transformers' generate on each group of left-padded prompts: each row's tokens up to EOS."""
    rows = []
    for prompts in groups:
        width = max(map(len, prompts))
        ids = torch.tensor([[eos] * (width - len(p)) + p for p in prompts])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
        out = model.hf.generate(
            ids, attention_mask=mask, do_sample=False, max_new_tokens=new_tokens, eos_token_id=eos, pad_token_id=eos,
            top_k=None, top_p=None, temperature=None,
        )  # fmt: skip
        rows += [up_to_eos(row, eos) for row in out[:, width:].tolist()]
    return rows, None


def race(runners: dict, rounds: int, label: str, paired: bool = False, models: dict | None = None) -> dict:
    """Run every runner `rounds` times, rotating who goes first; sum seconds and tokens, keep the last stats and, for
    the named `models`, the modelled seconds of the last run's forwards (`modelled_seconds`), and every run's tokens/s
    and work (its tokens and forward shapes, for `fastest_ratio`). With `paired`, each other runner's run is paired
    with a greedy run beside it, and its pairs' ratios and greedy speeds are kept."""
    totals = {name: {"seconds": 0.0, "tokens": 0, "rows": None, "stats": None, "pairs": [], "modelled": None,
                     "beside": None, "predicted": None, "speeds": [], "beside_greedy": [], "work": set(),
                     "timed": None, "pair_times": [], "prompt_shares": []}
              for name in runners}  # fmt: skip
    names = list(runners)

    def run(name: str) -> float:
        with forwards_fed(models or {}) as fed:
            start = time.perf_counter()
            rows, stats = runners[name]()
            seconds = time.perf_counter() - start
        speed = sum(map(len, rows)) / seconds
        totals[name]["seconds"] += seconds
        totals[name]["tokens"] += sum(map(len, rows))
        totals[name]["rows"], totals[name]["stats"] = rows, stats
        totals[name]["modelled"] = modelled_seconds(fed, models) if fed else None
        totals[name]["beside"] = beside_forwards(seconds, fed) if fed else None
        totals[name]["predicted"] = predicted_seconds(totals[name]["modelled"], seconds, fed) if fed else None
        totals[name]["speeds"].append(speed)
        # the run's seconds, its forwards' seconds, and its target forwards
        totals[name]["timed"] = (seconds, sum(spent for *_, spent in fed), sum(who == "target" for who, *_ in fed))
        if name == "greedy":  # its only forwards over more than one token per row are the prompts'
            prompts = sum(spent for who, _, tokens, spent in fed if who == "target" and tokens > 1)
            totals[name]["prompt_shares"].append(prompts / seconds)
        # the run's work: its tokens and its forwards' shapes (transformers' generate records no forward here)
        totals[name]["work"].add((tuple(map(tuple, rows)), tuple((who, b, n) for who, b, n, _ in fed)))
        return speed

    for r in tqdm(range(rounds), desc=label, unit="round", leave=False):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            if not paired:
                run(name)
            elif name != "greedy":  # greedy runs in every pair
                order = ("greedy", name) if r % 2 == 0 else (name, "greedy")
                speed = {who: run(who) for who in order}
                totals[name]["pairs"].append(speed[name] / speed["greedy"])
                totals[name]["beside_greedy"].append(speed["greedy"])
                # the runner's seconds, forwards' seconds and target forwards, greedy's seconds and forwards' seconds,
                # what t(B, n) prices the runner's forwards and greedy's at (`modelled_seconds`), and their tokens
                timed = (*totals[name]["timed"], *totals["greedy"]["timed"][:2])
                priced = (totals[name]["modelled"], totals["greedy"]["modelled"])
                tokens = (sum(map(len, totals[name]["rows"])), sum(map(len, totals["greedy"]["rows"])))
                totals[name]["pair_times"].append((*timed, *priced, *tokens))
    return totals


def fastest_ratio(totals: dict, name: str) -> float:
    """The runner's fastest tokens/s over greedy's fastest, from as many greedy runs: those of its pairs (`--paired`),
    else greedy's own runs, one per round."""
    greedy = totals[name]["beside_greedy"] or totals["greedy"]["speeds"]
    return max(totals[name]["speeds"]) / max(greedy)


def greedy_forwards(totals: dict, name: str) -> bool:
    """Whether every run of the runner fed exactly the target forwards of batched greedy's runs, and nothing else:
    its rule decoded greedily throughout (transformers' `generate` records no forward here, so it never counts)."""
    shapes = {forwards for _, forwards in totals[name]["work"]}
    return len(shapes) == 1 and bool(next(iter(shapes))) and shapes == {f for _, f in totals["greedy"]["work"]}


def pooled(figures: list[dict]) -> list[str]:
    """Per runner, the paired ratios pooled over the cells where it fed greedy's very forwards (`greedy_forwards`;
    transformers' `generate`: every cell, the same work): their geometric mean and its 95% interval (`interval`, each
    pair taken as an independent draw of the host's scatter), with what that says of the floor (for transformers, of
    batched greedy's `TRANSFORMERS_FLOOR` against it).

    Where that cannot tell, the pairs are split (`split_pairs`): the runs' forwards alone, the same work in both runs
    of a pair, whose ratio can only show the host's scatter; and the runner's run with its forwards taken to cost what
    greedy's same forwards cost in the pair, which leaves only what its steps spend beside them (the rule, its
    bookkeeping, EAGLE's features), measured without the forwards' scatter. When the forwards' interval holds 1 (no
    sign that the same forwards cost more in the runner's runs) the second interval decides."""
    logs: dict[str, tuple[list[float], set, list]] = {}
    for figure in figures:
        if figure["paired_ratios"] and (figure["runner"] == "transformers" or figure["greedy_forwards"]):
            values, cells, times = logs.setdefault(figure["runner"], ([], set(), []))
            values += [math.log(r) for r in figure["paired_ratios"]]
            cells.add((figure["batch"], figure["prompts"]))
            times += figure.get("paired_seconds", [])
    lines = []
    for runner, (values, cells, times) in logs.items():
        if len(values) < 2:
            continue
        mean, low, high = interval(values)
        if runner == "transformers":  # greedy / transformers = 1 / this ratio
            low, high = 1 / high, 1 / low
            floor = TRANSFORMERS_FLOOR
            what = f"batched greedy {1 / mean:.3f}x of it, 95%: {low:.3f}-{high:.3f}"
        else:
            floor, what = FLOOR, f"95%: {low:.3f}-{high:.3f}"
        verdict = against(low, high, floor)
        lines.append(f"  {runner:14} {mean:.3f}x ({what}) over {len(values)} pairs in {len(cells)} cells: {verdict}")
        if runner != "transformers" and verdict.startswith("cannot tell") and len(times) >= 2:
            lines += split_pairs(times)
    return lines


def host_scatter(figures: list[dict]) -> list[str]:
    """Whether this run's cells can judge the floor one by one. transformers' `generate` does batched greedy's work in
    every cell, so the spread of its pairs' ratios (the standard deviation of their logarithms) is the host's scatter
    in this run. For a runner exactly as fast as greedy, each pair then lands below `FLOOR` with chance p (normal, over
    the logarithms), and a cell's median of n pairs lands there when at least half of them do: for odd n exactly when
    (n + 1) / 2 or more do, for even n at most when n / 2 or more do and at least when n / 2 + 1 do (binomial). Against
    that, how many of the strategies' cells fell below by their median: about as many as the chance times the cells
    is what the scatter alone gives a strategy as fast as greedy."""
    logs = [math.log(r) for f in figures if f["runner"] == "transformers" for r in f["paired_ratios"]]
    ours = [f for f in figures if f["runner"] not in ("greedy", "transformers") and f["paired_ratios"]]
    if len(logs) < 2 or not ours:
        return []
    spread = statistics.stdev(logs)
    p = statistics.NormalDist(0, spread).cdf(math.log(FLOOR)) if spread > 0 else 0.0

    def at_least(k: int, n: int) -> float:  # P(k or more of n pairs below the floor)
        return sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k, n + 1))

    def chances(n: int) -> tuple[float, float]:  # a median of n pairs below the floor: at least, at most
        return (at_least(n // 2 + 1, n), at_least(n // 2, n)) if n % 2 == 0 else (at_least((n + 1) // 2, n),) * 2

    rounds = sorted({len(f["paired_ratios"]) for f in ours})
    low = sum(statistics.median(f["paired_ratios"]) < FLOOR for f in ours)
    chance = " to ".join(dict.fromkeys(f"{c:.2f}" for n in rounds for c in chances(n)))
    counts = [sum(chances(len(f["paired_ratios"]))[side] for f in ours) for side in (0, 1)]  # each cell at its n
    expected = " to ".join(dict.fromkeys(f"{c:.0f}" for c in counts))
    return [
        f"  transformers beside greedy, the same work: {len(logs)} pairs spread {spread:.3f} (standard deviation of "
        f"the log ratio; range {math.exp(min(logs)):.2f}-{math.exp(max(logs)):.2f}x)",
        f"  a runner as fast as greedy lands below {FLOOR}x in a cell's median of {'/'.join(map(str, rounds))} pairs "
        f"with chance {chance}: about {expected} of these {len(ours)} cells; below by their median: {low}",
    ]


def at_their_price(figures: list[dict]) -> list[str]:
    """Every cell of every runner judged against the floor with its forwards timed at their price, the host's scatter
    in them left out. In each pair, the runner's forwards are timed as its greedy partner's forwards were, scaled by
    what t(B, n) prices the runner's forwards at against greedy's (`paired_seconds`' last two figures), and what the
    runner spent beside its forwards is added as measured (`priced_pairs`); for a runner that fed greedy's very
    forwards this is `split_pairs`' second figure. That stands on t(B, n) pricing the runner's forwards right, so
    first, per runner, its forwards alone against that price, pooled over every pair of every cell (`interval`): where
    the interval holds 1, t(B, n) prices them within what the pairs can tell; where it does not, t(B, n) as measured
    limits every verdict below it. Then the cells not at or above the floor, each with what limits it (`limiting`):
    the steps' cost beside the forwards where its forwards alone, priced by t(B, n), reach the floor (`modelled`),
    else t(B, n) against the acceptance per row."""
    cells: dict[str, list[dict]] = {}
    for figure in figures:
        if figure["runner"] not in ("greedy", "transformers") and len(figure["paired_seconds"]) >= 2:
            cells.setdefault(figure["runner"], []).append(figure)
    lines = []
    for runner, figures_of in cells.items():
        times = [t for f in figures_of for t in f["paired_seconds"]]
        mean, low, high = interval([math.log(fx / (fg * mx / mg)) for _, fx, _, _, fg, mx, mg, *_ in times])
        judged = [(f, priced_pairs(f["paired_seconds"])) for f in figures_of]
        short = [(f, p) for f, p in judged if not against(p[1], p[2], FLOOR).startswith("at or above")]
        price = "t(B, n) prices them within the pairs' reach" if low <= 1 <= high else "t(B, n) misprices them"
        lines.append(
            f"  {runner:14} its forwards took {mean:.3f}x their price (95%: {low:.3f}-{high:.3f}) over {len(times)} "
            f"pairs: {price}; at or above {FLOOR}x in {len(judged) - len(short)} of {len(judged)} cells"
        )
        for f, (ratio, lo, hi) in short:
            measurement = limiting(FLOOR, f["modelled"], None)
            if measurement == "beside":
                why = (f"the steps' cost beside the forwards ({f['ms_beside_forwards']:.1f} ms per target forward; "
                       f"its forwards alone model {f['modelled']:.3f}x)")  # fmt: skip
            else:
                why = (f"t({f['batch']}, n) against the acceptance per row (its forwards alone model "
                       f"{f['modelled']:.3f}x at {f['tokens_per_forward']:.2f} tokens per row forward)")  # fmt: skip
            if not low <= 1 <= high:
                why = f"t({f['batch']}, n) as measured (it misprices this runner's forwards); {why}"
            lines.append(
                f"  {'':14} {f['batch']:>2} rows, {f['prompts']:5}: {ratio:.3f}x (95%: {lo:.3f}-{hi:.3f}): "
                f"{against(lo, hi, FLOOR)}, limited by {why}"
            )
    return lines


def priced_pairs(times: list) -> tuple[float, float, float]:
    """A cell's pairs (`paired_seconds`: the runner's seconds, forwards' seconds and target forwards; greedy's seconds
    and forwards' seconds; the runner's and greedy's forwards priced by t(B, n); the runner's and greedy's tokens) with
    the runner's forwards timed at their price, greedy's forwards' seconds in the pair times the price's ratio, and
    the runner's seconds beside its own forwards added: its tokens per second over greedy's, pooled by `interval`."""
    speeds = [(tx / (fg * mx / mg + sx - fx), tg / sg) for sx, fx, _, sg, fg, mx, mg, tx, tg in times]
    return interval([math.log(x / g) for x, g in speeds])


def split_pairs(times: list) -> list[str]:
    """The two parts of a runner's pairs that fed greedy's very forwards (`paired_seconds`: its run's seconds, its
    forwards' seconds and its target forwards, then greedy's seconds and forwards' seconds; the prices and tokens
    after them are `priced_pairs`'): the forwards' ratio (greedy's forwards' seconds over the runner's), and the
    run's ratio with its forwards timed as greedy's were (greedy's seconds over greedy's forwards' seconds plus what
    the runner spent beside its own), each pooled by `interval`, with the verdict the second gives where the first
    holds 1."""
    forwards = forwards_ratio(times)
    beside = interval([math.log(sg / (fg + sx - fx)) for sx, fx, _, sg, fg, *_ in times])
    extra = statistics.fmean(1000 * ((sx - fx) - (sg - fg)) / steps for sx, fx, steps, sg, fg, *_ in times)
    same = forwards[1] <= 1 <= forwards[2]
    verdict = against(beside[1], beside[2], FLOOR) if same else "not split: its forwards' time differs from greedy's"
    return [
        f"  {'':14} its forwards alone (greedy's shapes): {forwards[0]:.3f}x (95%: {forwards[1]:.3f}-{forwards[2]:.3f})"
        f"{', the same work within the scatter' if same else ''}",
        f"  {'':14} with them timed as greedy's, {extra:+.2f} ms a step beside them: {beside[0]:.3f}x "
        f"(95%: {beside[1]:.3f}-{beside[2]:.3f}): {verdict}",
    ]


def forwards_ratio(times: list) -> tuple[float, float, float]:
    """Greedy's forwards' seconds over the runner's in each pair (`paired_seconds`), pooled by `interval`."""
    return interval([math.log(fg / fx) for _, fx, _, _, fg, *_ in times])


def interval(logs: list[float]) -> tuple[float, float, float]:
    """The geometric mean of ratios given by their logarithms, and its 95% interval (Student's t over the logarithms:
    a cell's few pairs leave their own spread uncertain, which the normal's 1.96 would leave out)."""
    n = len(logs)
    mean, half = statistics.fmean(logs), t_975(n - 1) * statistics.stdev(logs) / math.sqrt(n)
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)


#: Student's t at 97.5% for 1 to 9 degrees of freedom (from its tables); `t_975` expands the rest
T_975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262)


def t_975(dof: int) -> float:
    """Student's t at 97.5% with `dof` degrees of freedom: the table `T_975` up to 9, beyond it the Cornish-Fisher
    expansion around the normal's 1.96 (Abramowitz and Stegun's for many degrees of freedom, three terms: within
    0.001 of the tables from 10 on)."""
    if dof <= len(T_975):
        return T_975[dof - 1]
    z = 1.959964
    terms = (z**3 + z) / 4, (5 * z**5 + 16 * z**3 + 3 * z) / 96, (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384
    return z + sum(term / dof ** (i + 1) for i, term in enumerate(terms))


def against(low: float, high: float, floor: float) -> str:
    """What a 95% interval says of a floor (or a goal)."""
    verdict = "at or above" if low >= floor else "below" if high < floor else "cannot tell"
    return f"{verdict} ({floor}x)"


def after_prompts(ratio: float, share: float) -> str:
    """The ratio to greedy's steps after the prompts' forward that makes a whole run `ratio` times greedy's, that
    forward being `share` of greedy's run and taking as long in both: (1 - share) / (1 / ratio - share)."""
    left = 1 / ratio - share
    return f"{(1 - share) / left:.2f}x" if left > 0 else "more than any speed"


def goal(figures: list[dict], made: dict) -> list[str]:
    """The issue's goal at `GOAL_BATCH` rows of the `GOAL_PROMPTS` prompts: each exact strategy raced there, best first,
    with its ratio to batched greedy (the geometric mean of its pairs and their 95% interval, `interval`, where the run
    paired; else its summed tokens/s), what that says of `GOAL`, and for each that is not at or above it, the
    measurement that limits it: where its rule decoded greedily, what the rule weighed (its choice); where its
    forwards alone, priced by t(B, n), model less than the goal, t(B, n) against the acceptance per row (its tokens
    per row forward); else what its steps spend beside the forwards, or the host's scatter where those too predict
    the goal (`limiting`). First, the share of greedy's run that the prompts' forward takes and what the goal then
    asks of the steps after it, and for each strategy below the goal, what its steps after that forward ran at
    (`after_prompts`)."""
    here = [f for f in figures if (f["batch"], f["prompts"]) == (GOAL_BATCH, GOAL_PROMPTS)]
    exact = [f for f in here if f["runner"] in made and getattr(type(made[f["runner"]]), "exact", True)]

    def spread(f: dict) -> tuple[float, float | None, float | None]:
        pairs = f["paired_ratios"]
        return interval([math.log(r) for r in pairs]) if len(pairs) > 1 else (f["vs_greedy"], None, None)

    greedy = next((f for f in here if f["runner"] == "greedy"), None)
    share = None if greedy is None else greedy["prompt_share"]
    lines = []
    if share is not None and exact:  # a forward that no strategy shortens bounds every ratio
        lines.append(f"  the prompts' forward, about alike in every run, is {share:.0%} of batched greedy's run here: "
                     f"{GOAL}x asks {after_prompts(GOAL, share)} of the steps after it")  # fmt: skip
    for f in sorted(exact, key=lambda f: spread(f)[0], reverse=True):
        mean, low, high = spread(f)
        if low is None:
            verdict = f"{'at or above' if mean >= GOAL else 'below'} ({GOAL}x)"
            shown = f"{mean:.2f}x"
        else:
            verdict = against(low, high, GOAL)
            shown = f"{mean:.2f}x (95%: {low:.2f}-{high:.2f}, {len(f['paired_ratios'])} pairs)"
        t = f"t({GOAL_BATCH}, n)"
        measurement = limiting(GOAL, f["modelled"], f["predicted"])
        if verdict.startswith("at or above"):
            why = ""
        elif f["greedy_forwards"]:
            why = "; decoded greedily: " + "; ".join(c.split(": ", 2)[-1] for c in f["choices"])  # the rule's reason
        elif measurement == "acceptance":
            why = (f"; {t} against the acceptance per row: its forwards alone, priced by {t}, model "
                   f"{f['modelled']:.2f}x at {f['tokens_per_forward']:.2f} tokens per row forward")  # fmt: skip
        elif measurement == "beside":
            why = f"; the steps' cost beside the forwards ({f['ms_beside_forwards']:.1f} ms per target forward)"
        elif priced := forwards_against_price(f["paired_seconds"], f["modelled"], GOAL_BATCH):
            why = f"; {priced}"
        else:
            why = f"; the host's scatter: priced by {t}, its forwards and the time beside predict {f['predicted']:.2f}x"
        if why and share is not None:  # what its steps after the prompts' forward ran at, that forward taken as alike
            why += f"; its steps after the prompts' forward at about {after_prompts(mean, share)}"
        lines.append(f"  {f['runner']:14} {shown}, {f['fastest_ratio']:.2f}x fastest: {verdict}{why}")
    return lines


def strategies(draft, only: list[str] | None = None) -> dict:
    """Every strategy of the registry (or those named in `only`) with its defaults (batched greedy is the
    baseline)."""
    made = {}
    for name, cls in REGISTRY.items():
        if name != "autoregressive" and (only is None or name in only):
            made[name] = cls(draft=draft) if needs_draft(cls) else cls()
    return made


def cost_line(model, batch: int) -> str:
    """t(B, n) / t(B, 1) for a few n, t(B, 1) / t(1, 1), and the batch rule's margin (`curves.batch_margin`: kept
    with t(B, n), it grows with how uncertain their measurement is, and a large one keeps the batch from guessing)."""
    one = curves.batch_seconds(model, batch, 1)
    curve = ", ".join(f"{n}: {curves.batch_seconds(model, batch, n) / one:.2f}" for n in (2, 4, 8, 16, 32))
    unit = curves.batch_seconds(model, 1, 1)
    margin = curves.batch_margin(model, batch)
    return f"t({batch}, n) / t({batch}, 1): {curve}; t({batch}, 1) = {one / unit:.2f} t(1, 1); margin {margin:.3f}"


def beam_depth_line(model, draft, width: int, batch: int) -> str:
    """MTAD's guess cost at this batch (`probes.measure_beam_depth_cost`: a draft forward over W beam tokens per row
    and their children's scoring) beside a draft forward over W tokens alone, both in units of t(1, 1)."""
    depth = probes.measure_beam_depth_cost(model, draft, width, batch)
    forward = curves.batch_seconds(draft, batch, width) / curves.batch_seconds(model, 1, 1)
    return f"MTAD's depth of {width} beams: {depth:.2f} t(1, 1), of which the draft's forward alone {forward:.2f}"


def forwards_against_price(pairs: list | None, modelled: float | None, batch: int) -> str | None:
    """Where a run priced by t(B, n) predicts a bar that its clock misses: its pairs' forwards alone (`paired_seconds`:
    greedy's forwards' seconds over the runner's, pooled by `interval`) against the ratio t(B, n) prices them at
    (`modelled`). If the whole interval lies below that price, the forwards cost more beside greedy's in the run than
    t(B, n) says (it is the fastest of repeated forwards over one shape, and a run's wider forwards sit further above
    their fastest than greedy's 1-token ones), and t(B, n) as measured is the measurement named; None where the pairs
    cannot tell (or there are fewer than two, or None: a runner that fed greedy's very forwards, whose forwards t(B, n)
    prices at exactly greedy's, so that only the host's scatter can part them), which leaves the host's scatter."""
    if modelled is None or pairs is None or len(pairs) < 2:
        return None
    mean, low, high = forwards_ratio(pairs)
    if high >= modelled:
        return None
    return (
        f"t({batch}, n) as measured: in its pairs its forwards ran {mean:.2f}x greedy's (95%: {low:.2f}-{high:.2f}), "
        f"where t({batch}, n) prices them at {modelled:.2f}x"
    )


def limiting(bar: float, modelled: float | None, predicted: float | None) -> str:
    """Which measurement keeps a run below `bar` (the floor or the goal): "scatter" where its forwards priced by
    t(B, n) and the time its steps spent beside them predict the bar (`predicted`), so only the forwards' time in the
    run fell short; "beside" where its forwards alone model the bar (`modelled`), so the steps' cost beside them
    did; else "acceptance": t(B, n) against the tokens the rows accepted per forward."""
    if predicted is not None and predicted >= bar:
        return "scatter"
    if modelled is not None and modelled >= bar:
        return "beside"
    return "acceptance"


def limit(
    strategy,
    stats,
    model,
    draft,
    batch: int,
    modelled: float | None,
    beside: tuple[float, float],
    predicted: float | None = None,
    pairs: list | None = None,
) -> str:
    """The measurement that keeps a strategy below the floor. Where its forwards priced by t(B, n) together with
    the time its steps spent beside them reach the floor against greedy's alike (`predicted`), its forwards' time in
    this run: t(B, n) where its pairs (`paired_seconds`; None where it fed greedy's very forwards) show its forwards
    costing more beside greedy's than t(B, n) prices them (`forwards_against_price`), else the host's scatter, or a
    forward under its masks dearer than the causal ones t(B, n) was measured with; else, where its forwards alone
    reach the floor (`modelled`), what the steps spend beside them (`beside`: this run's and greedy's milliseconds
    per target forward); else what one more verified token (and a draft forward, for MTAD a depth of its beams)
    costs at this batch, against the acceptance the rows showed (`limiting`)."""
    measurement = limiting(FLOOR, modelled, predicted)
    if measurement == "scatter" and (priced := forwards_against_price(pairs, modelled, batch)):
        return priced
    if measurement == "scatter":
        return (
            f"its forwards' time in this run, not their number or shapes: priced by t({batch}, n), they and the time "
            f"its steps spent beside them ({beside[0]:.1f} ms per target forward, greedy's {beside[1]:.1f}) predict "
            f"{predicted:.2f}x (the host's scatter, or forwards under its masks dearer than t({batch}, n) says)"
        )
    if measurement == "beside":
        return (
            f"limited by the steps' cost beside the forwards: their forwards alone model {modelled:.2f}x, and the run "
            f"spent {beside[0]:.1f} ms per target forward outside them against greedy's {beside[1]:.1f} ms"
        )
    one = curves.batch_seconds(model, batch, 1)
    added = curves.batch_seconds(model, batch, 2) / one - 1
    unit = curves.batch_seconds(model, 1, 1)
    if isinstance(strategy, MTAD):
        added += probes.measure_beam_depth_cost(model, draft, strategy.beam_width, batch) * unit / one
    elif needs_draft(type(strategy)):
        added += curves.draft_forward_cost(model, draft, batch) * unit / one
    return (
        f"limited by t({batch}, n): a first guess costs {added:.2f} of a batched greedy step, and the rows accepted "
        f"{stats.mean_accepted:.2f} guesses per forward"
    )


def cell_rounds(batch: int, prompts: str, rounds: int, goal_rounds: int | None) -> int:
    """How many rounds the cell of `batch` rows of the `prompts` set races: `goal_rounds` at the goal's cell
    (`GOAL_BATCH` rows of the `GOAL_PROMPTS` prompts) where given, else `rounds`. On a 2-core host a runner's pairs
    scatter by about 0.07 to 0.10 (the log ratio's standard deviation), so an interval within 0.05 of 1.2x takes about
    24 pairs, where the other cells' floor is judged over every cell's pairs together (`at_their_price`)."""
    return goal_rounds if goal_rounds is not None and (batch, prompts) == (GOAL_BATCH, GOAL_PROMPTS) else rounds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    goal_cell = f"{GOAL_BATCH} rows of {GOAL_PROMPTS}"
    parser.add_argument("--goal-rounds", type=int, help=f"rounds at the goal's cell, {goal_cell} (default: --rounds)")
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32])
    parser.add_argument("--sets", nargs="+", choices=["mixed", "code"], default=["mixed", "code"])
    choices = [name for name in REGISTRY if name != "autoregressive"]
    parser.add_argument("--strategies", nargs="+", choices=choices, help="race only these (default: every one)")
    parser.add_argument("--paired", action="store_true", help="pair every run with a greedy run beside it")
    parser.add_argument("--least-prompts", type=int, default=4, help="a run decodes max(B, this) prompts, B at a time")
    parser.add_argument("--json", type=Path, help="write every figure here")
    args = parser.parse_args()
    if args.rounds < 1 or (args.goal_rounds is not None and args.goal_rounds < 1):
        parser.error("--rounds and --goal-rounds take 1 or more")
    if args.goal_rounds is not None and (GOAL_BATCH not in args.batches or GOAL_PROMPTS not in args.sets):
        parser.error(f"--goal-rounds races the goal's cell, {goal_cell}, which --batches and --sets leave out")

    held = hold_freed_memory()  # no run pays for the pages that the one before it gave back
    model, tokenizer = mtdecode.load_model(), mtdecode.load_tokenizer()
    draft = mtdecode.load_model(mtdecode.DRAFT_MODEL)
    eos = tokenizer.eos_token_id
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {args.new_tokens} new tokens per row")
    print(f"freed memory {'held for the next run' if held else 'left to the allocator (not glibc)'}")
    made = strategies(draft, args.strategies)
    print("measuring t(B, n) where it is not kept yet ...", flush=True)
    for batch in args.batches:  # measured before any race (and kept on disk), so no race pays for it
        curves.batch_draft_costs(model, draft, batch), curves.batch_draft_costs(model, None, batch)
        if "mtad" in made:
            probes.measure_beam_depth_cost(model, draft, made["mtad"].beam_width, batch)
    figures = []
    for batch in args.batches:
        for set_name in args.sets:
            prompts = prompt_set(tokenizer, set_name, max(batch, args.least_prompts))
            prompts = [prompts[i : i + batch] for i in range(0, len(prompts), batch)]  # the calls of a run
            for strategy in made.values():  # warm-up: lookahead's plan, EAGLE's depth cost at this batch
                ours(model, prompts[:1], 2, eos, strategy)
            runners = {"greedy": lambda p=prompts: ours(model, p, args.new_tokens, eos, Autoregressive())}
            runners["transformers"] = lambda p=prompts: theirs(model, p, args.new_tokens, eos)
            for name, strategy in made.items():
                runners[name] = lambda p=prompts, s=strategy: ours(model, p, args.new_tokens, eos, s)
            models = {"target": model, "draft": draft}
            rounds = cell_rounds(batch, set_name, args.rounds, args.goal_rounds)
            t = race(runners, rounds, f"batch {batch}, {set_name}", args.paired, models)
            base = t["greedy"]["tokens"] / t["greedy"]["seconds"]
            base_modelled = sum(map(len, t["greedy"]["rows"])) / t["greedy"]["modelled"]
            base_predicted = sum(map(len, t["greedy"]["rows"])) / t["greedy"]["predicted"]
            print(f"\n== batch {batch}, {set_name} prompts: {cost_line(model, batch)}")
            if "mtad" in made:
                print(f"   {beam_depth_line(model, draft, made['mtad'].beam_width, batch)}")
            paired = f" {'paired (lowest-highest)':>24}" if args.paired else ""
            print(
                f"  {'':14} {'tok/s':>7} {'vs greedy':>9}{paired} {'fastest':>7} {'modelled':>8} {'beside':>6} "
                f"{'tok/fwd':>7} {'same':>6}  chosen"
            )
            for name, v in t.items():
                speed = v["tokens"] / v["seconds"]
                tokens = sum(map(len, v["rows"]))
                modelled = None if v["modelled"] is None else tokens / v["modelled"] / base_modelled
                shown = "" if modelled is None else f"{modelled:.2f}x"
                predicted = None if v["predicted"] is None else tokens / v["predicted"] / base_predicted
                beside = "" if v["beside"] is None else f"{v['beside']:.1f}"
                same = sum(a == b for a, b in zip(v["rows"], t["greedy"]["rows"], strict=True))
                stats = v["stats"]
                per_forward = "" if stats is None else f"{stats.tokens_per_forward:7.2f}"
                chosen = "" if stats is None else "; ".join(dict.fromkeys(f"{c.setting}" for c in stats.choices))
                pairs = v["pairs"]
                ratio = f"{statistics.median(pairs):.2f}x ({min(pairs):.2f}-{max(pairs):.2f})" if pairs else ""
                paired = f" {ratio:>24}" if args.paired else ""
                fastest = fastest_ratio(t, name)
                line = (f"  {name:14} {speed:7.1f} {speed / base:8.2f}x{paired} {fastest:6.2f}x {shown:>8} {beside:>6} "
                        f"{per_forward:>7} {same:>3}/{len(v['rows']):<2}")  # fmt: skip
                print(f"{line}  {chosen}")
                if len(v["work"]) > 1:
                    print(f"  {'':14} its runs did different work (tokens or forwards): the fastest run is no estimate")
                if name in made and fastest < FLOOR:
                    spent = (v["beside"], t["greedy"]["beside"])
                    shapes = None if greedy_forwards(t, name) else v["pair_times"]  # greedy's very forwards: scatter
                    why = limit(made[name], stats, model, draft, batch, modelled, spent, predicted, shapes)
                    print(f"  {'':14} below {FLOOR}x: {why}")
                figures.append({
                    "batch": batch, "prompts": set_name, "rows": len(v["rows"]), "runner": name,
                    "tokens_per_second": speed,
                    "vs_greedy": speed / base, "identical_rows": same, "paired_ratios": pairs,
                    "paired_seconds": v["pair_times"], "modelled": modelled,
                    "predicted": predicted,
                    "fastest_ratio": fastest, "same_work_every_run": len(v["work"]) == 1,
                    "at_price": priced_pairs(v["pair_times"]) if len(pairs) > 1 and name in made else None,
                    "greedy_forwards": name in made and greedy_forwards(t, name),
                    "ms_beside_forwards": v["beside"],
                    "tokens_per_forward": None if stats is None else stats.tokens_per_forward,
                    "prompt_share": statistics.median(v["prompt_shares"]) if v["prompt_shares"] else None,
                    "choices": [f"{c.strategy}: {c.setting}: {c.reason}" for c in (stats.choices if stats else ())],
                })  # fmt: skip
    if args.paired and (lines := host_scatter(figures)):
        print("\n== the host's scatter in this run, and what it does to a cell's median:")
        print("\n".join(lines))
    if args.paired:
        print("\n== pooled pairs where a runner fed greedy's very forwards, against batched greedy:")
        print("\n".join(pooled(figures)))
        print("\n== every cell, its forwards timed at their price (greedy's forwards in its pair, scaled by t(B, n)):")
        print("\n".join(at_their_price(figures)))
    if lines := goal(figures, made):
        print(f"\n== the best exact strategy raced at {GOAL_BATCH} rows of the {GOAL_PROMPTS} prompts, against greedy:")
        print("\n".join(lines))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(figures, indent=1))
        print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
