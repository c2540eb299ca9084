"""Lookahead's W, N and G for the model and device at hand.

A lookahead step feeds (W + G)(N - 1) tokens: the window's N - 1 rows of W (x0 included) and G candidates of N - 1.
Whether that pays depends on how the forward's cost grows with its tokens: on a large GPU it hardly grows up to a
few hundred tokens, which is why the paper's defaults are W = 7, N = 5, G = 7 (56 tokens); on a small CPU it grows
much sooner (`docs/benchmark.md`). `choose` picks the (W, N, G) with the best predicted tokens per second:

    predicted speed-up = (1 + E[accepted]) / (cost((W + G)(N - 1)) / cost(1))

E[accepted] comes from a deliberately simple model: each useful candidate matches the next i tokens with
probability a^i, independently, so P(accepted >= i) = 1 - (1 - a^i)^c for i = 1..N-1, with c = min(G, W) useful
candidates (the window adds only W n-grams a step), or c = G when the pool is seeded from the prompt. The hit rates
are fitted by `python benchmarks/lookahead_grid.py` on the default model. A predicted gain counts only if it exceeds
the measurement's own uncertainty (`curves.margin`): below it, `Lookahead()` decodes greedily, and `lookahead_plan`
words why.
"""

import functools

from mtdecode.costs import curves
from mtdecode.model import CausalLM
from mtdecode.session import Choice

#: chance that a candidate's next token matches, fitted on chat prompts (see the module docstring)
HIT_RATE = 0.06


#: the same with the prompt's n-grams in the pool, fitted on code-editing prompts
PROMPT_POOL_HIT_RATE = 0.25


#: the search space of `choose`
MAX_WINDOW, MAX_NGRAM, MAX_GUESSES = 16, 8, 16


def expected_tokens(w: int, n: int, g: int, hit_rate: float, *, prompt_pool: bool = False) -> float:
    """Predicted tokens per step: 1 + sum over i = 1..N-1 of 1 - (1 - a^i)^c,
    with c = G if the pool holds the prompt's n-grams, else min(G, W)."""
    useful = g if prompt_pool else min(g, w)
    return 1 + sum(1 - (1 - hit_rate**i) ** useful for i in range(1, n))


def predicted_speedup(costs: dict[int, float], w: int, n: int, g: int, *, prompt_pool: bool = False) -> float:
    """Predicted tokens per second of Lookahead(W, N, G) over greedy's: E[tokens per step] / relative cost."""
    hit_rate = PROMPT_POOL_HIT_RATE if prompt_pool else HIT_RATE
    return expected_tokens(w, n, g, hit_rate, prompt_pool=prompt_pool) / curves.relative_cost(costs, (w + g) * (n - 1))


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


def lookahead_plan(
    model: CausalLM,
    window: int | None,
    ngram: int | None,
    guesses: int | None,
    *,
    prompt_pool: bool = False,
    rows: int = 1,
) -> tuple[tuple[int, int, int] | None, Choice | None]:
    """(W, N, G): the values given, and for any left as None the best choice for this model and device, for a batch
    of `rows` rows (its forward costs t(rows, n) against batched greedy's t(rows, 1)); with the `Choice` that says
    what was chosen and why, for `Stats.choices`. None when all three were left to the search and no setting is
    predicted to beat greedy here: the caller should decode greedily.

    **Returns:** the settings (None: decode greedily) and the choice: `"Lookahead: W=1, N=2, G=5 (at most):
    predicted 1.31x greedy ..."`, or, when no setting is predicted to beat greedy by more than the
    measurement's scatter (for a batch, plus `BOOKKEEPING`, as `batch_margin` adds it), `"Lookahead: decodes
    greedily: its best setting ... Lookahead(1, 2, 5) forces it"` (`Choice.greedy`). The choice is None when all
    three values were given: nothing was tuned.
    """
    if window is not None and ngram is not None and guesses is not None:
        return (window, ngram, guesses), None
    costs = curves.batch_forward_costs(model, rows)
    w, n, g = choose(costs, window, ngram, guesses, prompt_pool=prompt_pool)
    speed = predicted_speedup(costs, w, n, g, prompt_pool=prompt_pool)
    size = (w + g) * (n - 1)
    noise = curves.margin(model, size, rows=rows)
    # a batch's steps spend what the cost model leaves out (`BOOKKEEPING`), as the batch rule's margin weighs it
    # (`batch_margin`); one row's candidate rule weighs it per step (`step_overhead`)
    bookkeeping = 0.0 if rows == 1 else curves.BOOKKEEPING
    kept_out = "" if rows == 1 else f" plus the steps' bookkeeping ({bookkeeping:.0%})"
    here = "on this host" if rows == 1 else f"for a batch of {rows} rows on this host"
    values = {"W": (w, window), "N": (n, ngram), "G": (g, guesses)}  # chosen, given
    setting = ", ".join(f"{k}={v}" + (" (given)" if given is not None else "") for k, (v, given) in values.items())
    if window is None and ngram is None and guesses is None and speed <= 1 + noise + bookkeeping:
        forced = f"Lookahead({w}, {n}, {g}{'' if prompt_pool else ', prompt_pool=False'})"
        reason = (
            f"its best setting W={w}, N={n}, G={g} is predicted at only {speed:.2f}x greedy, within the "
            f"measurement's scatter of {noise:.0%} of 1{kept_out}, because a forward over {size} tokens costs "
            f"{curves.relative_cost(costs, size):.2f}x one token {here}; {forced} forces it"
        )
        return None, Choice("Lookahead", "decodes greedily", reason, greedy=True)
    greedy = "greedy on this host's forward costs" if rows == 1 else f"batched greedy on this host's t({rows}, n)"
    reason = f"predicted {speed:.2f}x {greedy}, beyond their {noise:.0%} scatter{kept_out}"
    if guesses is None:
        setting += " (at most)"
        reason += "; each step verifies only the candidates that pay"
    return (w, n, g), Choice("Lookahead", setting, reason)
