"""Step probes: the work a strategy's step does beside the target's forward, timed on this host (one more depth of
EAGLE's tree or of MTAD's beams, the head's reading of features, and EAGLE's steps timed in whole runs), each kept
as a share of a target forward timed beside it (`curves.kept_beside_forward`)."""

import statistics
import time
from collections.abc import Callable
from functools import partial
from typing import NamedTuple

import torch

from mtdecode import beams, masks, store
from mtdecode.costs import curves, timing
from mtdecode.generate import generate
from mtdecode.model import CausalLM, Runner
from mtdecode.plain import Autoregressive
from mtdecode.sampling import Sampler
from mtdecode.strategy import DecodingStrategy
from mtdecode.tensor_types import Float, Tensor
from mtdecode.zoo.eagle import EagleHead, HeadRunner


def measure_depth_cost(target: CausalLM, head: EagleHead, width: int, rows: int = 1) -> float:
    """One more depth of the tree for a batch of `rows` rows (a head forward over `width` nodes per row after
    `CONTEXT` entries, the nodes' scores and the choice of children), the fastest of 5 runs, in units of a 1-token
    target forward of one row: timed beside t(rows, 1) of the target (`kept_beside_forward`; measured once per head
    architecture, width, number of rows and host, and kept on disk like the target's costs, `mtdecode.store`)."""

    def kept() -> dict[str, float]:
        key = {"head": store.module_key(head), "width": width}
        return curves.kept_beside_forward(
            "eagle-depth", key, target, rows, lambda: {"depth": _time_depth(head, width, rows=rows)}
        )

    return timing.read_once((target, head), ("eagle-depth", width, rows), kept)["depth"]


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
        return curves.kept_beside_forward("eagle-read", key, target, rows, lambda: {"read": _time_read(head, rows)})

    return timing.read_once((target, head), ("eagle-read", rows), kept)["read"] / READ_TOKENS


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
    step, measured in the steps of a run rather than piece by piece: timed alone (`measure_read_cost`,
    `measure_depth_cost`), the head's work costs less than it does between the target's forwards, and the step's own
    bookkeeping (the tree's masks, its verification, the copy and the rule) is not timed at all
    (`docs/strategies/eagle.md`). `Eagle`'s batch rule weighs these (`DraftCosts.overhead` and `draft`).

    Four kinds of short run of `STEP_TOKENS` new tokens per row from random prompts of `STEP_PROMPT` tokens (a plain
    one, and trees of one depth and one node, two depths and one node, two depths and 2 W nodes: `tree(depth,
    nodes)`, the strategy with such a fixed tree, which `Eagle` makes of itself; `lookup`: whether it searches for a
    copy, as `Eagle`'s default does), each made `STEP_RUNS` times: each step's seconds beside the target's forward
    (timed by hooks on the model), the median over the runs' steps after the head's catch-up, and for the catch-up
    the median of the runs' first drafting steps (a single run gives one sample of it, and samples scatter widely).
    A node's share is the 2 W-node step's over the 1-node one's, per extra node; a depth, two depths' step over
    one's; the step's overhead, the one-depth one-node step's over the plain one's, less a node; the catch-up per
    entry, the head's first drafting step (it reads the prompts) over its later ones, divided by the prompts'
    entries less one (a later step reads one or two).

    The parts are weighed as shares of t(rows, 1) timed right after the runs (`kept_beside_forward`). The runs' own
    forwards, after 64 to 76 entries, are no such measure (a forward after a shorter context is cheaper). Measured
    once per head architecture, target architecture,
    width, number of rows, copy, number of runs and host, and kept on disk (`mtdecode.store`)."""

    def kept() -> dict[str, float]:
        key = {"head": store.module_key(head), "width": width, "lookup": lookup, "runs": STEP_RUNS, "read": "per entry"}
        return curves.kept_beside_forward(
            "eagle-step", key, target, rows, lambda: _time_eagle_steps(target, width, rows, tree)
        )

    return EagleStepCosts(**timing.read_once((target, head), ("eagle-step", width, rows, lookup), kept))


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
    plain = statistics.median(runs(Autoregressive())[1])
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
    ids, offsets, sees, pad = runner.after_held(torch.zeros(rows, timing.CONTEXT, dtype=torch.long, device=device))
    runner.step(torch.zeros(rows, timing.CONTEXT, hidden, dtype=dtype, device=device), ids, offsets, sees, pad=pad)
    runner.cache.commit()
    return runner


def _time_read(head: EagleHead, rows: int, repeats: int = 5) -> float:
    runner = _runner_after_context(head, rows)
    hidden, dtype, device = head.embedding.shape[1], head.dtype, head.device
    features = torch.zeros(rows, READ_TOKENS, hidden, dtype=dtype, device=device)
    ids, offsets, sees, pad = runner.after_held(torch.zeros(rows, READ_TOKENS, dtype=torch.long, device=device))
    read = partial(runner.step, features, ids, offsets, sees, pad=pad)
    return timing.fastest(read, repeats, then=lambda: runner.cache.crop(runner.cache.lengths))  # the entries go again


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

    fastest = partial(timing.fastest, repeats=repeats)

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
    `mtdecode.beams.draft_beams` does at temperature 0), the fastest of 5 runs, in
    units of a 1-token target forward of one row: timed beside t(rows, 1) of the target (`kept_beside_forward`;
    measured once per draft architecture, width, number of rows and host, and kept on disk, `mtdecode.store`). The
    scoring is not small beside the forward: it reads `width` x vocabulary probabilities per row in float64."""

    def kept() -> dict[str, float]:
        key = {"draft": store.module_key(draft.hf), "width": width}
        return curves.kept_beside_forward(
            "beam-depth", key, target, rows, lambda: {"depth": _time_beam_depth(draft, width, rows)}
        )

    return timing.read_once((target, draft), ("beam-depth", width, rows), kept)["depth"]


def _time_beam_depth(draft: CausalLM, width: int, rows: int, repeats: int = 5) -> float:
    generator = torch.Generator().manual_seed(0)
    context = torch.randint(0, draft.vocab_size, (rows, timing.CONTEXT), generator=generator).to(draft.device)
    runner = Runner(draft, "tuning")
    runner.extend(context)
    runner.cache.commit()
    tokens = torch.zeros(rows, width, dtype=torch.long, device=draft.device)
    log_q = torch.zeros(rows, width, 1, dtype=torch.float64, device=draft.device)
    side_by_side = masks.tree([-1] * width, device=draft.device)
    offsets = torch.zeros(width, dtype=torch.long, device=draft.device)

    def depth() -> None:
        logits = runner.forward(tokens, offsets, side_by_side)  # (rows, W, vocab)
        _, scores = beams.score_children(Sampler(), logits, log_q)
        scores.topk(min(width, scores.shape[1]), dim=1)  # `choose` at temperature 0

    with torch.no_grad():
        return timing.fastest(depth, repeats, then=lambda: runner.cache.crop(runner.cache.lengths))  # entries go
