"""The drafting policy's parts, each alone (`mtdecode.policy`).

- `Fixed(k)` is the paper's setting: a strategy given `policy=Fixed(k)` makes the same steps as one given its
  paper's k, and the plan answers every fixed point without state (never rests, drafts k, verifies all found).
- `rule_for` picks the row rule for one row or one row's costs and the batch rule for a batch's costs.
- `Calibration` learns each row's record alone; `PooledCalibration` pools the rows and scales each by its own.
- `Record` keeps what it worked out until a verified guess changes the record.
"""

import pytest
import torch

import mtdecode
from mtdecode.costs import BatchCosts, DraftCosts, on_line
from mtdecode.policy import Adaptive, Fixed, fixed_or
from mtdecode.policy.batch import BatchRule
from mtdecode.policy.calibration import Calibration, PooledCalibration
from mtdecode.policy.records import PlaceRecord
from mtdecode.policy.rule import RowRule, rule_for
from mtdecode.strategies import MTAD, Jacobi, PromptLookup, Speculative
from mtdecode.testing import tiny_model
from mtdecode.testing.models import perturbed

CPU = torch.device("cpu")
COSTS = DraftCosts(draft=0.1, target=[1.0, 1.1, 1.2, 1.3])


@pytest.mark.parametrize(
    "given, fixed",
    [
        (lambda d: Speculative(d, num_draft_tokens=3), lambda d: Speculative(d, policy=Fixed(3))),
        (lambda d: MTAD(d, num_draft_tokens=2, beam_width=2), lambda d: MTAD(d, beam_width=2, policy=Fixed(2))),
        (lambda d: PromptLookup(num_draft_tokens=4), lambda d: PromptLookup(policy=Fixed(4))),
        (lambda d: Jacobi(block=3), lambda d: Jacobi(policy=Fixed(3))),
    ],
)
def test_the_papers_k_and_a_fixed_policy_make_the_same_steps(given, fixed):
    target = tiny_model("llama", vocab_size=16, seed=3)
    draft = perturbed(target, 0.1, seed=1)
    runs = [
        mtdecode.generate(target, [[1, 2, 3, 1, 2], [4, 5]], make(draft), max_new_tokens=16, seed=2, pad_token_id=0)
        for make in (given, fixed)
    ]
    steps = [[(s.tokens, s.drafted, s.accepted) for s in run.steps] for run in runs]
    assert steps[0] == steps[1]
    assert any(s.drafted for s in runs[1].steps)  # the fixed policy drafted


def test_a_fixed_plan_keeps_nothing_and_answers_every_fixed_point():
    plan = Fixed(3)
    rows = torch.tensor([True, False, True])
    assert plan.most == 3 and not plan.rests(rows, [5, 5, 5])
    assert torch.equal(plan.first(rows, [1, 1, 1]), rows)
    assert torch.equal(plan.more(rows, lambda: pytest.fail("a fixed plan weighs no confidence")), rows)
    assert plan.verify([[1, 2], []], [2, 0], rows) == [[1, 2], []]
    assert torch.equal(plan.size(torch.rand(3, 5), torch.tensor([5, 2, 0])), torch.tensor([3, 2, 0]))
    assert fixed_or(4, Adaptive()) == Fixed(4) and fixed_or(None, Adaptive()) == Adaptive()
    for nonsense in (0, -1, True):  # (a float is refused by the type hint before the check)
        with pytest.raises(ValueError, match="k must be an integer >= 1"):
            Fixed(nonsense)


def test_the_batch_rule_is_chosen_for_a_batch_given_a_batchs_costs():
    batch_costs = BatchCosts({1: COSTS, 4: COSTS})
    assert isinstance(rule_for(batch_costs, 4, CPU), BatchRule)
    assert isinstance(rule_for(batch_costs, 1, CPU), RowRule)  # one row: the rules are one
    assert isinstance(rule_for(COSTS, 4, CPU), RowRule)  # one row's costs: each row weighed alone
    assert rule_for(batch_costs, 4, CPU).calibration_of is PooledCalibration


def test_a_rows_calibration_is_its_own_and_a_pooled_one_scales_each_row_by_its_own():
    """Row 0's four guesses at confidence 0.95 all held, row 1's all failed. Alone, each row's chance at 0.95 follows
    its own record; pooled, the record is shared (half held), and each row is scaled by how its own guesses fared
    against the pool's: row 0 up, row 1 down, both from the pool's."""
    confidence = torch.full((2, 4), 0.95, dtype=torch.float64)
    tried = torch.ones(2, 4, dtype=torch.bool)
    hit = torch.tensor([[True] * 4, [False] * 4])
    alone, pooled = Calibration(2, CPU), PooledCalibration(2, CPU)
    for record in (alone, pooled):
        record.calibrate(confidence, tried, hit)
    at = torch.tensor([[0.95], [0.95]], dtype=torch.float64)
    own = alone.calibrated(at)[:, 0]
    shared = pooled.calibrated(at)[:, 0]
    assert own[0] > 0.9 and own[1] < 0.3
    assert own[1] < shared[1] < shared[0] and shared[0] <= own[0]
    assert alone.acceptance().tolist() == pytest.approx([(4 + 1) / 6, 1 / 6])  # PRIOR 2 guesses at 1/2
    assert pooled.acceptance().tolist() == pytest.approx([(4 + 1) / 10] * 2)


def test_a_record_keeps_what_it_worked_out_until_a_verified_guess_changes_it():
    record = PlaceRecord(batch=1, places=3, first=0.5)
    first = record.chances(3)
    assert record.chances(3) is first  # kept
    record.add(torch.tensor([0]), torch.tensor([0]))  # a step without guesses: nothing changes
    assert record.chances(3) is first
    record.add(torch.tensor([2]), torch.tensor([2]))  # two guesses verified, both held
    again = record.chances(3)
    assert again is not first and again[0, 0] > first[0, 0]


def test_a_cost_curve_is_read_on_its_broken_line_and_measured_only_where_it_is_read():
    """`on_line`: a known point as it is (asking for it alone: a measurement elsewhere may not exist, as the
    reference costs hold one number of rows), linear between two, the nearest segment continued past either end."""
    curve = {1: 1.0, 2: 1.5, 4: 2.5, 8: 6.5}
    asked: list[int] = []

    def value(k: int) -> float:
        asked.append(k)
        return curve[k]

    def read(x: int) -> tuple[float, list[int]]:
        asked.clear()
        return on_line(x, sorted(curve), value), list(asked)

    for k, cost in curve.items():
        assert read(k) == (cost, [k])
    assert read(3) == (2.0, [2, 4]) and read(6) == (4.5, [4, 8])
    assert read(10) == (8.5, [4, 8])  # past the last: its segment's slope of 1 per token
    assert read(0) == (0.5, [1, 2])  # before the first: the first segment's
    assert DraftCosts(draft=0.1, target=[1.0, 1.5, 2.5]).t(5) == 4.5  # past t(3): t(3) - t(2) per token
