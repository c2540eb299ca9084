"""`benchmarks/batch_throughput.py`'s judgement of the goal and the floor, on figures made by hand (no race is run).

- Where a run priced by t(B, n) predicts the goal and its clock does not show it, the benchmark names a measurement:
  t(B, n) as measured when the pairs' forwards alone ran below the ratio t(B, n) prices them at, with their interval;
  the host's scatter when that interval reaches the price, or when the runner fed greedy's very forwards (the same
  work, priced alike); nothing from fewer than two pairs.
- A run at or above the goal names no limit.
- A few pairs' interval is Student's t, not the normal's.
- Each cell judged with its forwards timed at their price (greedy's forwards in the pair, scaled by t(B, n)) is free of
  the host's scatter in them, counts the runner's tokens, and names what limits a cell below the floor: the steps'
  cost beside the forwards, t(B, n) against the acceptance per row, or t(B, n) as measured where the runner's forwards
  took more than their price over its pairs.
"""

import importlib.util
import math
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "batch_throughput.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("batch_throughput", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def pairs(forward_ratios: list[float], whole: float) -> list[tuple]:
    """`paired_seconds` of pairs whose greedy forwards took `forward_ratios` times the runner's (1.6 s), the whole
    runs `whole` times (0.05 s beside the forwards in the runner's runs)."""
    return [(1.65, 1.6, 18, 1.65 * whole, 1.6 * r) for r in forward_ratios]


def figure(paired_seconds: list[tuple], ratios: list[float], modelled: float, predicted: float) -> dict:
    return {
        "batch": 4, "prompts": "code", "runner": "prompt_lookup", "paired_ratios": ratios,
        "paired_seconds": paired_seconds, "vs_greedy": 1.2, "modelled": modelled, "predicted": predicted,
        "fastest_ratio": 1.21, "greedy_forwards": False, "ms_beside_forwards": 2.3, "tokens_per_forward": 1.82,
        "prompt_share": None, "choices": [],
    }  # fmt: skip


class Exact:
    exact = True


def test_forwards_below_their_price_name_t_b_n(bench):
    below = pairs([1.19, 1.21, 1.20, 1.22, 1.20, 1.21], whole=1.2)
    named = bench.forwards_against_price(below, 1.25, 4)
    assert named is not None and named.startswith("t(4, n) as measured")
    assert "ran 1.20x greedy's" in named and "prices them at 1.25x" in named
    line = bench.goal([figure(below, [1.19, 1.21, 1.20, 1.22, 1.20, 1.21], 1.25, 1.24)], {"prompt_lookup": Exact()})
    assert len(line) == 1 and "cannot tell" in line[0] and "t(4, n) as measured" in line[0]
    assert "host's scatter" not in line[0]


def test_forwards_at_their_price_leave_the_hosts_scatter(bench):
    at_price = pairs([1.15, 1.35, 1.20, 1.30, 1.18, 1.32], whole=1.2)  # their interval holds 1.25
    assert bench.forwards_against_price(at_price, 1.25, 4) is None
    assert bench.forwards_against_price(pairs([1.1], whole=1.2), 1.25, 4) is None  # one pair: no interval
    assert bench.forwards_against_price(at_price, None, 4) is None  # no forwards recorded
    same_work = pairs([0.94, 0.95, 0.96], whole=0.95)  # greedy's very forwards, priced at 1.00x: only the scatter
    assert bench.forwards_against_price(same_work, 1.0, 16) is not None
    assert bench.forwards_against_price(None, 1.0, 16) is None  # what `main` passes for such a runner
    ratios = [1.19, 1.21, 1.20, 1.22, 1.20, 1.21]
    line = bench.goal([figure(at_price, ratios, 1.25, 1.24)], {"prompt_lookup": Exact()})
    assert "the host's scatter" in line[0] and "as measured" not in line[0]


def test_a_run_at_or_above_the_goal_names_no_limit(bench):
    ratios = [1.24, 1.26, 1.25, 1.25, 1.24, 1.26]
    line = bench.goal([figure(pairs(ratios, whole=1.25), ratios, 1.25, 1.25)], {"prompt_lookup": Exact()})
    assert line[0].endswith("at or above (1.2x)")


def cell(runner: str, ratios: list[float]) -> dict:
    return {"batch": 8, "prompts": "mixed", "runner": runner, "paired_ratios": ratios}


def test_the_hosts_scatter_says_how_often_a_cell_as_fast_as_greedy_lands_below_the_floor(bench):
    # transformers' pairs at exp(+-a), a = -ln(0.97) / sqrt(2): their spread is -ln(0.97), so a pair of a runner as
    # fast as greedy lands below 0.97x with chance Phi(-1) = 0.1587, and a median of 3 with 3p^2(1 - p) + p^3 = 0.0675
    a = -math.log(0.97) / math.sqrt(2)
    same_work = [cell("transformers", [math.exp(a), math.exp(-a)])]
    ours = [cell("jacobi", [0.95, 0.96, 1.02]), cell("eagle", [0.99, 1.00, 1.01]), cell("mtad", [0.90, 0.99, 0.96])]
    lines = bench.host_scatter(same_work + ours + [cell("greedy", [])])
    assert "2 pairs spread 0.030" in lines[0]
    assert "median of 3 pairs with chance 0.07: about 0 of these 3 cells; below by their median: 2" in lines[1]
    # two pairs per cell: the median is below when both are (p^2 = 0.025), and may be when one is (1 - (1-p)^2 = 0.29)
    two = bench.host_scatter(same_work + [cell("jacobi", [0.95, 1.02]), cell("eagle", [0.99, 1.01])])
    assert "median of 2 pairs with chance 0.03 to 0.29: about 0 to 1 of these 2 cells" in two[1]
    assert two[1].endswith("below by their median: 0")
    assert bench.host_scatter(ours) == []  # no transformers pairs: no scatter to tell


def test_cells_of_different_rounds_each_count_at_their_own_chance(bench):
    # with the goal's cell raced longer (`--goal-rounds`), cells hold different numbers of pairs: at the spread above a
    # cell of 1 pair lands below with chance p = 0.1587, one of 3 with 0.0675, so five of each: 0.79 + 0.34 = 1.1 cells
    a = -math.log(0.97) / math.sqrt(2)
    same_work = [cell("transformers", [math.exp(a), math.exp(-a)])]
    ours = [cell("jacobi", [1.0])] * 5 + [cell("eagle", [1.0, 1.0, 1.0])] * 5
    lines = bench.host_scatter(same_work + ours)
    assert "median of 1/3 pairs with chance 0.16 to 0.07: about 1 of these 10 cells" in lines[1]


def test_the_goals_cell_takes_its_own_rounds(bench):
    assert bench.cell_rounds(bench.GOAL_BATCH, bench.GOAL_PROMPTS, 5, 24) == 24
    assert bench.cell_rounds(bench.GOAL_BATCH, "mixed", 5, 24) == 5
    assert bench.cell_rounds(8, bench.GOAL_PROMPTS, 5, 24) == 5
    assert bench.cell_rounds(bench.GOAL_BATCH, bench.GOAL_PROMPTS, 5, None) == 5


def test_students_t_widens_a_few_pairs_interval(bench):
    # Student's t at 97.5% from its tables: 2 pairs' interval is 12.7 standard errors wide on each side, not 1.96
    for dof, table in ((1, 12.706), (2, 4.303), (9, 2.262), (10, 2.228), (14, 2.145), (30, 2.042), (120, 1.980)):
        assert bench.t_975(dof) == pytest.approx(table, abs=0.001), dof
    a = math.log(1.05)  # three pairs at 1/1.05, 1 and 1.05: their logarithms' standard deviation is a
    mean, low, high = bench.interval([-a, 0.0, a])
    assert mean == pytest.approx(1.0) and math.log(high) == pytest.approx(4.303 * a / math.sqrt(3), rel=1e-3)


def priced_figure(
    noise: list[float], *, beside: float = 0.05, dearer: float = 1.0, modelled: float = 1.25, tokens: int = 128
) -> dict:
    """A cell of pairs whose forwards scatter with the host (`noise`: the runner's forwards' time over their price, in
    turn above and below it), priced by t(B, n) at 0.8 of greedy's forwards (the runner's priced at 0.8 s, greedy's at
    1.0 s), `dearer` times that in every pair; greedy spends 0.05 s beside its forwards and the runner `beside`; the
    runner makes `tokens` tokens, greedy 128."""
    times = []
    for i, n in enumerate(noise):
        fg = 1.6 * (1.1 if i % 2 else 0.9)  # greedy's forwards: the host's speed in this pair
        fx = fg * 0.8 * n * dearer
        times.append((fx + beside, fx, 18, fg + 0.05, fg, 0.8, 1.0, tokens, 128))
    ratios = [(tokens / sx) / (128 / sg) for sx, _, _, sg, *_ in times]
    return {
        "batch": 2, "prompts": "mixed", "runner": "jacobi", "paired_ratios": ratios, "paired_seconds": times,
        "modelled": modelled, "ms_beside_forwards": 1000 * beside / 18, "tokens_per_forward": 1.3,
    }  # fmt: skip


def test_a_cell_with_its_forwards_timed_at_their_price_is_judged_without_the_hosts_scatter(bench):
    scattered = priced_figure([1.3, 0.8, 1.25])  # its whole runs: 0.96x to 1.49x of greedy's, no verdict
    _, low, high = bench.interval([math.log(r) for r in scattered["paired_ratios"]])
    assert low < bench.FLOOR < high
    ratio, low, high = bench.priced_pairs(scattered["paired_seconds"])  # forwards at 0.8 of greedy's partner's
    assert low >= bench.FLOOR and 1.2 < ratio < 1.25
    fewer = priced_figure([1.3, 0.8, 1.25], tokens=64)  # half greedy's tokens in those seconds: half its speed
    assert bench.priced_pairs(fewer["paired_seconds"])[0] == pytest.approx(ratio / 2)
    lines = bench.at_their_price([scattered, priced_figure([1.1, 0.9, 1.0], beside=0.6)])
    assert len(lines) == 2 and "pairs: t(B, n) prices them within the pairs' reach" in lines[0]
    assert lines[0].endswith("at or above 0.97x in 1 of 2 cells")
    # the second cell spends 0.6 s beside its forwards against greedy's 0.05: below, and its forwards alone reach 1.25x
    assert "below (0.97x), limited by the steps' cost beside the forwards" in lines[1]
    unpaid = priced_figure([1.1, 0.9, 1.0], beside=0.6, modelled=0.9)  # forwards alone below the floor too
    assert "t(2, n) against the acceptance per row" in bench.at_their_price([unpaid])[1]


def test_forwards_dearer_than_their_price_name_t_b_n_in_every_verdict_below(bench):
    dear = priced_figure([1.02, 0.98, 1.0, 1.01], dearer=1.25, beside=0.4)
    lines = bench.at_their_price([dear])
    assert "took 1.25" in lines[0] and "t(B, n) misprices them" in lines[0]
    assert "limited by t(2, n) as measured (it misprices this runner's forwards)" in lines[1]
    assert bench.at_their_price([{**dear, "paired_seconds": dear["paired_seconds"][:1]}]) == []  # one pair: no verdict
