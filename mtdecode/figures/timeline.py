"""The draft/verify timeline: every forward of a run, one lane per model, in units of forward cost."""

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from transformers import PreTrainedModel

from mtdecode.costs import curves, probes, timing
from mtdecode.figures.draw import FONT, LANES, ON_FILL
from mtdecode.generate import generate
from mtdecode.model import CausalLM
from mtdecode.strategies.eagle import Eagle
from mtdecode.strategy import DecodingStrategy
from mtdecode.zoo.eagle import shipped_head


@dataclass(frozen=True)
class Forward:
    """One forward pass: the model that ran it (`lane`: "target", "draft", "head"), the tokens it fed per row,
    and its cost in units of a 1-token target forward."""

    lane: str
    tokens: int
    cost: float


@dataclass(frozen=True)
class TimedStep:
    """The forwards of one step, in the order they ran, and what the step's verification did: `drafted` guesses
    verified, `accepted` of them kept, `tokens` committed."""

    forwards: list[Forward]
    drafted: int
    accepted: int
    tokens: int


def measured_costs(
    target: CausalLM | PreTrainedModel,
    draft: CausalLM | PreTrainedModel | None = None,
    head_cost: float | None = None,
) -> dict[str, Callable[[int], float]]:
    """What a forward over n tokens costs, per lane, in units of a 1-token target forward, from the costs that
    `mtdecode.costs` keeps on disk (measured once on this host, or the reference costs in use):

    - "target": the target's cost curve, `curves.relative_cost`;
    - "draft": the draft's own curve, over the target's 1-token cost;
    - "head": `head_cost` for every head forward (EAGLE's cost of one more depth, `measure_depth_cost`).
    """
    kept = timing.forward_costs(CausalLM.wrap(target))
    costs = {"target": lambda n: curves.relative_cost(kept, n)}
    if draft is not None:
        own = timing.forward_costs(CausalLM.wrap(draft))
        costs["draft"] = lambda n: curves.relative_cost(own, n) * own[1] / kept[1]
    if head_cost is not None:
        costs["head"] = lambda n: head_cost
    return costs


def record_forwards(
    model: CausalLM | PreTrainedModel,
    prompt: Sequence[int],
    strategy: DecodingStrategy,
    *,
    max_new_tokens: int,
    costs: Mapping[str, Callable[[int], float]] | None = None,
    **options,
) -> list[TimedStep]:
    """Run `strategy` on one prompt and record every forward pass of each step: its model, its tokens, its cost.

    The target is watched, and the strategy's `draft` (Speculative, MTAD) or EAGLE head if it has one. A forward
    counts when it runs on a KV cache, so a model's probe without one (`CausalLM.forward_features` makes one the
    first time) is left out. The costs come from what is kept on disk (`measured_costs`), read before the run,
    so that nothing measured during the run is counted as one of its forwards.

    **Arguments:**

    - `model`, `prompt`, `max_new_tokens`, `options`: as for `mtdecode.generate` (one prompt).
    - `strategy`: any strategy; e.g. `Autoregressive()`, `Speculative(draft)`, `Eagle()`.
    - `costs`: per lane ("target", "draft", "head"), the cost of a forward over n tokens in units of a 1-token
      target forward; None: `measured_costs` (for EAGLE, its policy's `depth_cost` or the measured one).

    **Returns:**

    One `TimedStep` per step, in order.
    """
    target = CausalLM.wrap(model)
    watched = {"target": target.hf}
    draft = getattr(strategy, "draft", None)
    if draft is not None:
        watched["draft"] = CausalLM.wrap(draft).hf
    head_cost = None
    if isinstance(strategy, Eagle):
        head = strategy.head if strategy.head is not None else shipped_head(target)
        watched["head"] = head.layer  # the head's one decoder layer runs once per head forward
        if costs is None:
            head_cost = getattr(strategy.policy, "depth_cost", None)  # a fixed tree's policy prices no depth
            head_cost = probes.measure_depth_cost(target, head, strategy.width) if head_cost is None else head_cost
    costs = costs if costs is not None else measured_costs(target, draft, head_cost)
    missing = set(watched) - set(costs)
    if missing:
        raise ValueError(f"no cost given for the lanes {sorted(missing)}: `costs` must have one per model watched")
    seen: list[Forward] = []
    records: list[TimedStep] = []

    def close(step) -> None:
        records.append(TimedStep(list(seen), step.drafted, step.accepted, len(step.tokens)))
        seen.clear()

    with contextlib.ExitStack() as hooks:
        for lane, module in watched.items():
            hooks.enter_context(counting(module, lane, costs[lane], seen))
        generate(target, [list(prompt)], strategy, max_new_tokens=max_new_tokens, on_step=close, **options)
    return records


def timeline(
    runs: Mapping[str, Sequence[TimedStep]],
    *,
    unit: str = "cost, in 1-token target forwards",
    title: str | None = None,
) -> Figure:
    """Draw each run's forward passes one after another on a time axis, one lane per model.

    Time is in units of forward cost, not seconds measured now: each block is as wide as its forward's cost. A
    target forward that verified guesses is labelled accepted/drafted (where its block is wide enough for the
    text); the first forward of each lane (the prefill, the prompt read at once) is hatched. The right end of
    each run says how many tokens it made, and a dotted line marks where the first run ends.

    **Arguments:**

    - `runs`: for each run's name, its steps (`record_forwards`), e.g. {"greedy": ..., "speculative": ...}.
    - `unit`: the time axis' label.
    - `title`: a title (default: none).

    **Returns:**

    The matplotlib `Figure`. Each block carries the gid "<run>/<lane>", each accepted/drafted label "verdict".

    **Raises:**

    `ValueError` if a run is empty or a forward has a negative cost.
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    for name, steps in runs.items():
        if not steps:
            raise ValueError(f"run {name!r} has no steps")
        for step in steps:
            if any(f.cost < 0 for f in step.forwards):
                raise ValueError(f"run {name!r} has a forward of negative cost")
    lanes = [(name, lane) for name, steps in runs.items() for lane in lanes_of(steps)]
    totals = {name: sum(f.cost for step in steps for f in step.forwards) for name, steps in runs.items()}
    longest = max(totals.values())
    fig, ax = plt.subplots(figsize=(min(13.0, max(8.0, 0.42 * longest + 3.5)), 0.6 * len(lanes) + 1.6))
    y = {key: i for i, key in enumerate(lanes)}
    verdicts = []  # (x, y, width, text) of each verification's label, placed once the scale is known
    for name, steps in runs.items():
        clock, started = 0.0, set()
        for step in steps:
            targets = [f for f in step.forwards if f.lane == "target"]
            for forward in step.forwards:
                fill, border = LANES.get(forward.lane, ("#bbbbbb", "#666666"))
                first = forward.lane not in started
                started.add(forward.lane)
                ax.add_patch(Rectangle((clock, y[name, forward.lane] - 0.33), forward.cost, 0.66, facecolor=fill,
                                       edgecolor=border, linewidth=0.6, hatch="//" if first else None,
                                       gid=f"{name}/{forward.lane}"))  # fmt: skip
                if step.drafted and targets and forward is targets[-1]:
                    verdicts.append((clock, y[name, "target"], forward.cost, f"{step.accepted}/{step.drafted}"))
                clock += forward.cost
        made = sum(step.tokens for step in steps)
        ax.text(clock + 0.15, y[name, "target"], f"{made} tokens at {clock:.1f}", va="center", fontsize=FONT + 1)
    first = next(iter(runs))  # the first run's end, across every lane: the one to beat
    ax.axvline(totals[first], color=plt.rcParams["axes.edgecolor"], linestyle=":", linewidth=1.2, zorder=0.5)
    for i in range(1, len(lanes)):  # a line between runs
        if lanes[i][0] != lanes[i - 1][0]:
            ax.axhline(i - 0.5, color="#999999", linewidth=0.8)
    ax.set_yticks(range(len(lanes)), [f"{name}: {lane}" for name, lane in lanes])
    ax.set_ylim(len(lanes) - 0.5, -0.5)
    ax.set_xlim(0, longest * 1.02 + 3.6)
    ax.set_xlabel(f"time ({unit})\naccepted/drafted on each verification; the prefill hatched", fontsize=FONT + 1)
    ax.tick_params(labelsize=FONT + 1)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    if title:
        ax.set_title(title, fontsize=FONT + 1)
    fig.tight_layout()
    label_verdicts(ax, verdicts)
    return fig


def label_verdicts(ax: Axes, verdicts: list[tuple[float, int, float, str]]) -> None:
    """Write accepted/drafted in each verification's block: across it where it fits, else up it where the block is
    at least a line wide, else not at all (a block narrower than a line of text)."""
    left, right = ax.get_xlim()
    inches = ax.get_position().width * ax.figure.get_figwidth() / (right - left)  # inches per unit of time
    line = FONT / 72  # a line of text, in inches
    for x, y, width, text in verdicts:
        across = 0.62 * line * len(text) <= 0.92 * width * inches
        if across or 1.2 * line <= width * inches:
            ax.text(x + width / 2, y, text, ha="center", va="center", fontsize=FONT, color=ON_FILL, gid="verdict",
                    rotation=0 if across else 90)  # fmt: skip


def lanes_of(steps: Sequence[TimedStep]) -> list[str]:
    """The lanes of a run in the order they first ran, the target's last (drafting comes before verifying)."""
    order = list(dict.fromkeys(f.lane for step in steps for f in step.forwards))
    return [lane for lane in order if lane != "target"] + (["target"] if "target" in order else [])


@contextlib.contextmanager
def counting(module, lane: str, cost: Callable[[int], float], seen: list[Forward]) -> Iterator[None]:
    """Append a `Forward` to `seen` for every call of `module` on a KV cache while the block runs."""

    def hook(called, args, kwargs) -> None:
        if called is not module or all(kwargs.get(k) is None for k in ("past_key_values", "cache")):
            return  # a copy of the module, or a call without a cache (a probe, not a step's forward)
        fed = next(x for x in (kwargs.get("input_ids"), kwargs.get("hidden_states"), *args) if x is not None)
        seen.append(Forward(lane, int(fed.shape[1]), float(cost(int(fed.shape[1])))))

    handle = module.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        yield
    finally:
        handle.remove()
