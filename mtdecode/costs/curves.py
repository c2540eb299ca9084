"""The cost curves a policy weighs, from the host's timings: t(B, n), a batch's forward over n new tokens per row of
B rows, in units of t(1, 1); a draft forward; a step's bookkeeping and the margins a gain must clear. They come as
the records of `mtdecode.costs` (`DraftCosts`, `BatchCosts`).
"""

import os
from collections.abc import Callable

from mtdecode import store
from mtdecode.costs import BatchCosts, DraftCosts, on_line, timing
from mtdecode.model import CausalLM

#: what a batch's step spends besides its forwards (verification, cache roll-back, the rule, Python), as a fraction
#: of the step: `benchmarks/step_overhead.py` measured 2 to 5% of a 1-token forward per step; a batch's guesses must
#: be predicted to end it sooner by more than this and the costs' scatter (`batch_margin`); one row's step with
#: guesses costs this much more than a plain step (`step_overhead`)
BOOKKEEPING = 0.05


#: what `kept_beside_forward` weighs a kept timing against: a part of its keys, so timings kept before are taken again
AGAINST = "t(rows, 1) timed after"


def kept_beside_forward(
    kind: str, key: dict, target: CausalLM, rows: int, measure: Callable[[], dict[str, float]]
) -> dict[str, float]:
    """The seconds `measure()` times (by part) beside a forward of `target`, in units of the kept t(1, 1).

    Measured once per `key`, target architecture, number of rows and host, and kept on disk (`mtdecode.store`) with
    t(`rows`, 1) of the target timed right after them, as the kept curve times it (`forward_costs`: the fastest of 5,
    after `CONTEXT` entries); each part is returned as its share of that forward times the kept t(rows, 1). A shared
    host's speed moves from hour to hour: seconds timed in one hour over a forward timed in another would price the
    work by the two hours' speeds, not by what it costs beside a forward.
    """

    def timed() -> dict[str, float]:
        seconds = measure()
        return {**seconds, "forward": timing._time_forward(target, rows)}  # t(rows, 1) at the same moment

    key = {**key, "target": store.module_key(target.hf), "rows": rows, "against": AGAINST, "host": store.host_key()}
    value = store.kept(kind, key, timed)
    unit = value["forward"] / batch_relative(target, rows, 1)  # the kept t(1, 1), in that moment's seconds
    return {part: seconds / unit for part, seconds in value.items() if part != "forward"}


def margin(model: CausalLM, tokens: int, *, rows: int = 1) -> float:
    """How much a predicted speed-up must exceed 1 to be a gain: the uncertainty of t(1) plus that of t(tokens) (at
    the nearest measured size at or above it), for `rows` rows: those of its own measurement where `rows` is one of
    `ROWS`, else the larger of the two measurements that `batch_seconds` interpolates between (past the largest
    number of rows measured, that measurement's). For one row each uncertainty is `scatter`'s at that size (the
    median's distance above the fastest, which lookahead's one-row choice has always weighed); for a batch, two
    standard errors of the measured t(rows, tokens) / t(rows, 1) (`uncertainty`)."""
    if rows in timing.ROWS:
        measured = [rows]
    else:
        measured = [r for r in timing.ROWS if r >= rows][:1] or [timing.ROWS[-1]]
        measured += [r for r in timing.ROWS if r < rows][-1:]
    total = 0.0
    for r in measured:
        spread = timing.scatter(model) if r == 1 else timing.uncertainty(model, rows=r)
        size = min([n for n in spread if n >= tokens], default=max(spread))
        # one row: the repeats' scatter at 1 token and at `size`; a batch: two standard errors of t(r, size) / t(r, 1)
        total = max(total, spread[1] + spread[size] if r == 1 else 2 * spread[size])
    return total


def batch_seconds(model: CausalLM, rows: int, tokens: int) -> float:
    """t(rows, tokens): seconds of a forward over `tokens` new tokens in each of `rows` rows, measured at the
    neighbouring numbers of rows in `ROWS` and interpolated linearly between them (continued past the largest);
    between measured sizes, and past the largest measured for that many rows, as `relative_cost` does."""

    def measured(r: int) -> float:
        costs = timing.forward_costs(model, rows=r)
        return relative_cost(costs, tokens) * costs[1]

    return between_rows(rows, measured)


def between_rows(rows: int, measured: Callable[[int], float]) -> float:
    """`measured(rows)` where `rows` is one of `ROWS`; else on the line through the neighbouring numbers of rows in
    `ROWS` (`mtdecode.costs.on_line`), measured there only."""
    return on_line(rows, timing.ROWS, measured)


def batch_relative(model: CausalLM, rows: int, tokens: int) -> float:
    """t(rows, tokens) / t(1, 1): a batch's forward in units of a 1-token forward of one row (for one row, exactly
    `relative_cost`)."""
    costs = timing.forward_costs(model)
    if rows == 1:
        return relative_cost(costs, tokens)
    return batch_seconds(model, rows, tokens) / costs[1]


def batch_forward_costs(model: CausalLM, rows: int) -> dict[int, float]:
    """`forward_costs` for `rows` rows at every size of `SIZES` (`batch_seconds`): what `choose` weighs for a batch."""
    if rows == 1:
        return timing.forward_costs(model)
    return {n: batch_seconds(model, rows, n) for n in timing.SIZES}


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
            seconds = lambda: {"draft": timing._time_forward(draft, r)}  # noqa: E731
            return kept_beside_forward("draft-forward", key, target, r, seconds)

        return timing.read_once((target, draft), ("draft-forward", r), kept)["draft"]

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
    """cost(tokens) / cost(1), on the line through the measured sizes (`mtdecode.costs.on_line`)."""
    return on_line(tokens, sorted(costs), costs.__getitem__) / costs[1]


def draft_costs(target: CausalLM, draft: CausalLM, *, longest: int = 32) -> DraftCosts:
    """One row's costs that `mtdecode.policy.rule` weighs, measured on this host: a draft forward and
    target forwards over 1..`longest` tokens, in units of a 1-token target forward (`batch_draft_costs` for 1 row)."""
    return batch_draft_costs(target, draft, 1, longest=longest).at(1)


def copy_costs(target: CausalLM, *, longest: int = 32) -> DraftCosts:
    """The same for guesses that cost nothing to make (prompt lookup copies them from the text), with the curve as
    measured: `Rule.plan` weighs every width at once, so a wider forward that measured cheaper than a
    narrower one is a real choice there (on some hosts 2 tokens cost more than 4)."""
    return batch_draft_costs(target, None, 1, longest=longest).at(1)


def measured_curve(model: CausalLM, longest: int) -> list[float]:
    """t(1..longest): a forward over n tokens against one, as measured (interpolated between measured sizes)."""
    return batch_curve(model, 1, longest, planned=False)


def lookahead_costs(model: CausalLM, window: int, ngram: int, guesses: int, *, rows: int = 1) -> BatchCosts:
    """What a lookahead step of `rows` rows costs with 0, 1, ..., `guesses` candidates verified, in units of a
    1-token forward of one row (as `DraftCosts.target`, indexed by candidates: `step(g)` is the forward over x0, the
    window's (W + g)(N - 1) - 1 other cells and g candidates of N - 1 tokens, in every row), as measured on this
    host."""
    steps = [batch_relative(model, rows, (window + g) * (ngram - 1)) for g in range(guesses + 1)]
    costs = DraftCosts(draft=0.0, target=steps, overhead=step_overhead(rows))
    return BatchCosts({rows: costs}, margin=batch_margin(model, rows))
