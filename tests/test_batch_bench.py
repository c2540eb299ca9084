"""`benchmarks/batch_throughput.py`'s judgement of the goal, on figures made by hand (no race is run).

- Where a run priced by t(B, n) predicts the goal and its clock does not show it, the benchmark names a measurement:
  t(B, n) as measured when the pairs' forwards alone ran below the ratio t(B, n) prices them at, with their interval;
  the host's scatter when that interval reaches the price, or when the runner fed greedy's very forwards (the same
  work, priced alike); nothing from fewer than two pairs.
- A run at or above the goal names no limit.
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
