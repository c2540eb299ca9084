"""Drafts that stop when unsure (`mtdecode.policy.rule`): the rule's arithmetic, greedy parity with
the rule on (float64), and a draft that cannot pay for itself is not used. The sampling law
with the rule on is in test_speculative_sampling.py."""

import functools
import warnings

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import mtdecode
from mtdecode.costs import BatchCosts, DraftCosts, curves
from mtdecode.policy import Adaptive
from mtdecode.policy.calibration import BINS
from mtdecode.policy.rule import rule_for
from mtdecode.strategies.speculative import Speculative
from mtdecode.testing import assert_greedy_parity, tiny_model
from mtdecode.testing.models import perturbed

VOCAB = 32


@functools.cache
def pair():
    target = tiny_model("llama", vocab_size=VOCAB, seed=3)
    return target, perturbed(target, 0.1, seed=1)


def linear(draft: float, slope: float, sizes: int = 8) -> DraftCosts:
    """c = `draft`, t(n) = 1 + slope (n - 1)."""
    return DraftCosts(draft=draft, target=[1 + slope * n for n in range(sizes)])


def test_the_rule_by_hand():
    costs = linear(0.1, 0.2)
    length = rule_for(costs, batch=2, device=torch.device("cpu"))
    # no history: acceptance a = 1/2; guess 1 costs c + t(2) - t(1) = 0.3 against a rate of 1: 0.5 > 0.3
    assert length.start().tolist() == [True, True]
    # guess 1 drawn with confidence 0.9 (row 0) and 0.05 (row 1); calibrated = confidence (prior only)
    more = length.more(torch.tensor([0.9, 0.05], dtype=torch.float64))
    # row 0: pi_1 = 0.9, E(1) = 1.9, T(1) = t(2) + c = 1.3; another guess: 0.9 * 0.5 * 1.3 = 0.585 > 1.9 * 0.3 = 0.57
    # row 1: pi_1 = 0.05, E(1) = 1.05: 0.05 * 0.5 * 1.3 = 0.0325 < 1.05 * 0.3
    assert more.tolist() == [True, False]


def test_a_chance_known_before_the_guess_replaces_the_rows_acceptance():
    """Copied tokens: the next one's chance is known before it is verified, and the rule weighs that instead of
    the row's acceptance a. Same numbers as the test above with a = 1/2, then with the next chance 0.3 and 0.9."""
    length = rule_for(linear(0.1, 0.2), batch=2, device=torch.device("cpu"))
    # guess 1: 0.25 < 0.3 (no first guess) in row 0, 0.35 > 0.3 in row 1
    assert length.start(upcoming=torch.tensor([0.25, 0.35], dtype=torch.float64)).tolist() == [False, True]
    # after a guess of confidence 0.9 in both rows (pi_1 = 0.9, E(1) = 1.9, T(1) = 1.3, added 0.3: need > 0.57):
    # next chance 0.3: 0.9 * 0.3 * 1.3 = 0.351, no; 0.9: 0.9 * 0.9 * 1.3 = 1.053, yes (a = 1/2 gave 0.585, yes)
    more = length.more(torch.tensor([0.9, 0.9], dtype=torch.float64), torch.tensor([0.3, 0.9], dtype=torch.float64))
    assert more.tolist() == [False, True]


def test_record_counts_the_guesses_each_row_tried():
    length = rule_for(linear(0.1, 0.2), batch=2, device=torch.device("cpu"))
    length.start()
    for confidence in (0.95, 0.55, 0.15):
        length.more(torch.tensor([confidence, confidence], dtype=torch.float64))
    # row 0 drafted 3 and kept 1 (guess 2 rejected, guess 3 never judged); row 1 drafted 2 and kept both
    length.record(drafted=torch.tensor([3, 2]), accepted=torch.tensor([1, 2]))
    tries, hits = torch.zeros(2, BINS), torch.zeros(2, BINS)
    tries[0, 9] = tries[0, 5] = hits[0, 9] = 1
    tries[1, 9] = tries[1, 5] = hits[1, 9] = hits[1, 5] = 1
    assert torch.equal(length.calibration.tries.float(), tries) and torch.equal(length.calibration.hits.float(), hits)
    # the prior of a bin is the confidence scaled by the row's accepted over expected guesses: row 0 kept 1 of guesses
    # of confidence 0.95 + 0.55, so (1 + 1) / (1.5 + 1) = 0.8; row 1 kept both, so (2 + 1) / (1.5 + 1) = 1.2.
    # Row 0's guesses of confidence 0.55 were rejected 1 time in 1: (0 + 2 * 0.55 * 0.8) / (1 + 2); row 1's were
    # accepted 1 time in 1: (1 + 2 * 0.55 * 1.2) / (1 + 2)
    calibrated = length.calibrated(torch.tensor([0.55, 0.55], dtype=torch.float64))
    assert calibrated.tolist() == pytest.approx([0.88 / 3, 2.32 / 3])


def test_trust_earned_at_a_place_reaches_no_deeper_than_the_chains_verified():
    """A scale above 1 (guesses held more often than their confidence said) raises a chain's guesses only at the
    places the row's verified chains reached; distrust, a scale below 1, lowers every place. Row 0 kept its one guess of
    confidence 0.5, so its scale is (1 + 1) / (0.5 + 1) = 4/3; row 1 lost it: (0 + 1) / (0.5 + 1) = 2/3. A guess of
    confidence 0.6 in a bin never tried is then 0.6 x 4/3 = 0.8 at place 0 in row 0 and stays 0.6 at place 1, and
    0.6 x 2/3 = 0.4 at both places in row 1. Without places (a tree's nodes) the scale reaches every guess."""
    length = rule_for(linear(0.1, 0.2), batch=2, device=torch.device("cpu"))
    length.start()
    length.more(torch.tensor([0.5, 0.5], dtype=torch.float64))
    length.record(drafted=torch.tensor([1, 1]), accepted=torch.tensor([1, 0]))
    confidence = torch.full((2, 2), 0.6, dtype=torch.float64)
    expect = functools.partial(torch.tensor, dtype=torch.float64)
    torch.testing.assert_close(length.calibrated(confidence, torch.arange(2)), expect([[0.8, 0.6], [0.4, 0.4]]))
    torch.testing.assert_close(length.calibrated(confidence), expect([[0.8, 0.8], [0.4, 0.4]]))
    # a chain of two, both kept in row 0: the scale, now (3 + 1) / (1.5 + 1) = 1.6, reaches place 1 too
    length.start()
    length.more(torch.tensor([0.5, 0.5], dtype=torch.float64))
    length.more(torch.tensor([0.5, 0.5], dtype=torch.float64))
    length.record(drafted=torch.tensor([2, 2]), accepted=torch.tensor([2, 0]))
    torch.testing.assert_close(length.calibrated(confidence, torch.arange(2))[0], expect([0.96, 0.96]))


def test_a_planned_step_maximises_tokens_less_the_rows_rate_times_cost():
    """`plan`: k maximises E(k) - r T(k) with T(k) = t(k + 1) (copied guesses cost nothing to make) and r the row's
    rate so far (1 before any step); no history, so a chance is its own calibration. The host's 2-token forward is
    dearer than its 3-token one."""
    costs = DraftCosts(draft=0.0, target=[1.0, 1.3, 1.0, 1.05, 1.6])
    length = rule_for(costs, batch=3, device=torch.device("cpu"))
    chances = torch.tensor([[0.2, 0.5, 0.4, 0.9], [0.9, 0.9, 0.9, 0.9], [0.2, 0.5, 0.4, 0.9]], dtype=torch.float64)
    # row 0: E = 1, 1.2, 1.3, 1.34, 1.376 less T = 1, 1.3, 1.0, 1.05, 1.6: 0, -0.1, 0.3, 0.29, -0.224 -> k = 2,
    #   although one guess alone would not pay (the one-at-a-time rule stops before it: 0.2 < t(2) - t(1))
    # row 1: E = 1, 1.9, 2.71, 3.439, 4.0951: E - T peaks at k = 4 (2.4951), where the step's own rate E / T
    #   peaks at k = 3 (3.275 against 2.559): the fourth guess still beats the row's rate of 1
    # row 2: the same chances as row 0, but only one copied token available -> k = 0
    k = length.plan(chances, available=torch.tensor([4, 4, 1]))
    assert k.tolist() == [2, 4, 0]
    assert not length.start(upcoming=torch.tensor([0.2, 0.2, 0.2], dtype=torch.float64)).any()
    # what `record` learns: row 0 verified 2 and kept 1, row 1 verified 4 and kept all, row 2 none
    length.plan(chances, available=torch.tensor([4, 4, 1]))
    length.record(drafted=torch.tensor([2, 4, 0]), accepted=torch.tensor([1, 4, 0]))
    assert length.calibration.tries.sum(1).tolist() == [2, 4, 0] and length.calibration.hits.sum(1).tolist() == [
        1,
        4,
        0,
    ]
    # the rates: (1 + 2) / (1 + t(3)), (1 + 5) / (1 + t(5)), (1 + 1) / (1 + t(1))
    assert (length.gained / length.spent).tolist() == pytest.approx([3 / 2.0, 6 / 2.6, 1.0])
    # a row whose rate is high plans shorter: with r = 3, row 1's E - 3T is 3.439 - 3.15 at k = 3, 4.0951 - 4.8 at 4
    fresh = rule_for(costs, batch=3, device=torch.device("cpu"))  # no calibration yet: chances as given
    fresh.gained[1], fresh.spent[1] = 3.0, 1.0
    assert fresh.plan(chances, available=torch.tensor([4, 4, 1]))[1] == 3


def test_a_steps_bookkeeping_is_paid_by_its_guesses():
    """`DraftCosts.overhead` o: a step with guesses costs T(k) = t(k + 1) + k c + o, a plain step t(1). A copy of
    chance 0.1 on a flat curve pays with o = 0 (E(1) - T(1) = 1.1 - 1 against 0) and not with o = 0.2 (1.1 - 1.2);
    a draft's first guess must beat c + t(2) - t(1) + o; the measured costs carry o for one row only."""
    chances = torch.tensor([[0.1]], dtype=torch.float64)
    for overhead, planned in ((0.0, 1), (0.2, 0)):
        costs = DraftCosts(draft=0.0, target=[1.0, 1.0], overhead=overhead)
        assert costs.step(0) == 1.0 and costs.step(1) == 1.0 + overhead
        length = rule_for(costs, batch=1, device=torch.device("cpu"))
        assert int(length.plan(chances, available=torch.tensor([1]))) == planned
    # a = 1/2 against c + t(2) - t(1) = 0.3 (see the rule by hand), and 0.3 + o
    assert rule_for(linear(0.1, 0.2), 1, torch.device("cpu")).start().item()
    dear = DraftCosts(draft=0.1, target=[1.0, 1.2], overhead=0.25)
    assert not rule_for(dear, 1, torch.device("cpu")).start().item()
    assert curves.step_overhead(1) == curves.BOOKKEEPING and curves.step_overhead(4) == 0
    with pytest.raises(ValueError, match="overhead"):
        DraftCosts(draft=0.0, target=[1.0, 1.0], overhead=-0.1)


def test_a_row_whose_guesses_lost_so_far_keeps_greedy_decodings_bar():
    """The one-row rule's r is never below 1, what plain steps make: a copy of chance 0.08 for one more token at
    0.1 of a step does not pay (1.08 - 1.1 < 1 - 1), even for a row whose rate so far is 1/2, for which
    E - r T would have verified it (1.08 - 0.55 > 1 - 0.5)."""
    length = rule_for(DraftCosts(draft=0.0, target=[1.0, 1.1]), batch=1, device=torch.device("cpu"))
    length.gained[0], length.spent[0] = 1.0, 2.0
    assert length.rate().tolist() == [1.0]
    assert int(length.plan(torch.tensor([[0.08]], dtype=torch.float64), available=torch.tensor([1]))) == 0


def test_a_row_that_plans_no_guess_tries_one_after_resting():
    """A guess of chance 0.3 does not pay for its place (1.3 tokens for 1.5), one always accepted would (2 for 1.5):
    the row tries one after `PATIENCE` idle steps."""
    length = rule_for(DraftCosts(draft=0.0, target=[1.0, 1.5, 2.0]), batch=1, device=torch.device("cpu"))
    planned = []
    for _ in range(6):
        k = length.plan(torch.tensor([[0.3, 0.3]], dtype=torch.float64), available=torch.tensor([2]))
        planned.append(int(k))
        length.record(drafted=k, accepted=torch.zeros_like(k))
    assert planned == [0, 0, 0, 0, 1, 0]


def test_what_the_rule_keeps_between_steps_is_renewed_by_every_verified_guess():
    """The rule keeps the rows' acceptance, its optimistic bound and the last plan's expected tokens while steps
    verify nothing (most steps at rest); a verified guess must renew them. Row 0's guesses are all rejected, row 1's
    all accepted: afterwards, a plan on the same chances equals one worked out afresh (on a copy), and the acceptance
    and its bound are the record's."""
    costs = DraftCosts(draft=0.0, target=[1.0, 1.02, 1.04, 1.06, 1.08])
    length = rule_for(costs, batch=2, device=torch.device("cpu"), acceptance=0.5)
    chances = torch.full((2, 4), 0.6, dtype=torch.float64)
    available = torch.tensor([4, 4])
    assert length.plan(chances, available).tolist() == [4, 4] and length.calibration.acceptance().tolist() == [0.5, 0.5]
    length.calibration.optimistic()
    for _ in range(3):
        k = length.plan(chances, available)
        length.record(drafted=k, accepted=torch.tensor([0, 1]) * k)
    kept = length.plan(chances, available)  # row 0's guesses of confidence 0.6 now hold about 9% of the time
    assert torch.equal(kept, length.plan(chances.clone(), available)) and kept.tolist() == [1, 4]
    hits, tries = length.calibration.hits.sum(1), length.calibration.tries.sum(1)
    acceptance = (hits + 2.0 * 0.5) / (tries + 2.0)  # PRIOR guesses at the prior
    assert length.calibration.acceptance().tolist() == pytest.approx(acceptance.tolist())
    bound = (acceptance + (acceptance * (1 - acceptance) / (tries + 2.0)).sqrt()).clamp(max=1)
    assert length.calibration.optimistic().tolist() == pytest.approx(bound.tolist())


@given(
    prompt=st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=10),
    max_new_tokens=st.integers(0, 30),
    draft_cost=st.floats(0.01, 1.0),
    slope=st.floats(0.0, 1.0),
    most=st.integers(1, 12),
)
def test_greedy_equals_autoregressive_with_the_rule_on(prompt, max_new_tokens, draft_cost, slope, most):
    target, draft = pair()
    strategy = Speculative(draft, max_draft_tokens=most, policy=Adaptive(costs=linear(draft_cost, slope)))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = assert_greedy_parity(target, prompt, strategy, max_new_tokens=max_new_tokens)
    assert all(step.drafted <= most for step in result.steps)
    # a run in which the rule held back every step with room for a guess (all but the last, when none drafted)
    # decoded greedily: its choice says so, and it warns once
    fell_back = [str(choice) for choice in result.stats.choices if choice.greedy]
    assert len(result.stats.choices) == (max_new_tokens > 0)  # a run with no budget never starts the strategy
    assert len(fell_back) == (not any(step.drafted for step in result.steps) and len(result.steps) >= 2)
    assert [str(w.message) for w in caught if w.category is mtdecode.GreedyFallbackWarning] == fell_back


def test_the_rule_drafts_long_when_cheap_and_sure_and_not_at_all_when_it_cannot_pay():
    target, _ = pair()
    same = Speculative(
        target, max_draft_tokens=12, policy=Adaptive(costs=linear(0.01, 0.0))
    )  # the target drafts for itself
    steps = mtdecode.generate(target, [1, 2, 3], same, max_new_tokens=80).steps
    # a tiny random model is unsure of everything (confidence ~ 0.1); every guess is accepted, the
    # calibration learns it, and the drafts grow to the maximum
    drafted = [step.drafted for step in steps]
    assert drafted[0] < 12 and max(drafted) == 12 and all(step.accepted == step.drafted for step in steps)
    # a draft forward half as dear as the target's, and a flat curve: a guess accepted half the time never pays, one
    # accepted always would (2 tokens for 1.5)
    half = Speculative(pair()[1], policy=Adaptive(costs=linear(0.5, 0.0), acceptance=0.5))
    result = mtdecode.generate(target, [1, 2, 3], half, max_new_tokens=40)
    drafted = [step.drafted for step in result.steps]
    # no step drafts but single-guess tries after 4 idle steps, then after 8, 16, ... while they are rejected
    tries = [i for i, d in enumerate(drafted) if d]
    assert set(drafted) <= {0, 1} and tries[0] == 4, drafted
    assert all(b - a > 4 for a, b in zip(tries, tries[1:], strict=False)) and len(tries) <= 4
    # as dear as the target's: not even a guess that is always accepted pays, so the row never tries one
    dear = Speculative(pair()[1], policy=Adaptive(costs=linear(1.0, 0.0), acceptance=0.5))
    assert not any(step.drafted for step in mtdecode.generate(target, [1, 2, 3], dear, max_new_tokens=40).steps)


def test_measured_costs_are_used_when_none_are_given(monkeypatch):
    """Speculative() measures the batch's costs on the host (`mtdecode.costs.curves.batch_draft_costs`) when `costs` is
    None."""
    seen = []

    def fake(target, draft, rows):
        seen.append((target, draft, rows))
        return BatchCosts({rows: linear(0.05, 0.1)})

    monkeypatch.setattr(curves, "batch_draft_costs", fake)
    target, draft = pair()
    result = mtdecode.generate(target, [4, 5], Speculative(draft), max_new_tokens=10)
    assert len(seen) == 1 and max(step.drafted for step in result.steps) >= 1


def test_mtads_measured_guess_costs_a_whole_depth_of_its_beams(tmp_path, monkeypatch):
    """MTAD() without `costs` prices a guess at one depth of its beams (`probes.measure_beam_depth_cost`: a draft
    forward over W beam tokens per row and their children's scoring), measured once per number of rows and kept on
    disk. With the target as its own draft, a depth as dear as 20 target forwards is never drafted; a free one is
    (the target's forwards priced alike whatever their size, so that the depth alone decides, whatever the host's
    load while it would have timed them)."""
    from mtdecode.costs import DraftCosts, curves, probes
    from mtdecode.strategies import MTAD

    monkeypatch.setenv("MTDECODE_COSTS_DIR", str(tmp_path))
    monkeypatch.delenv("MTDECODE_COSTS", raising=False)
    target, draft = (mtdecode.CausalLM(model) for model in pair())
    one, two = probes.measure_beam_depth_cost(target, draft, 2), probes.measure_beam_depth_cost(target, draft, 2, 2)
    assert one > 0 and two > 0 and probes.measure_beam_depth_cost(target, draft, 2, 2) == two
    assert len(list(tmp_path.glob("beam-depth-*.json"))) == 2
    asked = []

    def priced(cost):
        def measured(target, draft, width, rows=1):
            asked.append((width, rows))
            return cost

        return measured

    def flat(target, draft, rows, *, draft_cost):
        drafts_priced.append(draft_cost)
        return DraftCosts(draft_cost, [1.0] * 8)

    drafts_priced = []
    monkeypatch.setattr(curves, "batch_draft_costs", flat)
    for cost, drafts in ((20.0, False), (0.0, True)):
        monkeypatch.setattr(probes, "measure_beam_depth_cost", priced(cost))
        strategy = MTAD(target, beam_width=2, policy=Adaptive(acceptance=0.9))
        result = mtdecode.generate(target, [1, 2, 3], strategy, max_new_tokens=30)
        assert any(step.drafted for step in result.steps) == drafts, cost
    assert asked == [(2, 1), (2, 1)] and drafts_priced == [20.0, 0.0]  # the guess is priced at the measured depth


@pytest.mark.parametrize(
    "costs, message",
    [({"draft": -0.1, "target": [1, 2]}, "positive"), ({"draft": 0.1, "target": [1]}, "t\\(2\\)")],
)
def test_nonsense_costs_are_refused(costs, message):
    with pytest.raises(ValueError, match=message):
        DraftCosts(**costs)


def test_nonsense_maximum_is_refused():
    with pytest.raises(ValueError, match="max_draft_tokens"):
        Speculative(pair()[1], max_draft_tokens=0)


def test_mtad_blocks_follow_the_rule_and_batch_rows_equal_rows_alone():
    """MTAD with the rule on: a draft that is the target grows its blocks; each row of a batch decodes as it would
    alone (its own calibration, its own stops)."""
    from mtdecode.strategies import MTAD

    target, draft = pair()
    same = MTAD(target, beam_width=2, max_draft_tokens=8, policy=Adaptive(costs=linear(0.01, 0.0)))
    steps = mtdecode.generate(target, [1, 2, 3], same, max_new_tokens=60).steps
    assert max(step.drafted for step in steps) == 8 > steps[0].drafted
    strategy = MTAD(draft, beam_width=2, policy=Adaptive(costs=linear(0.1, 0.05)))
    prompts = [[1, 2, 3], [9, 8, 7, 6, 5], [4]]
    batch = mtdecode.generate(target, prompts, strategy, max_new_tokens=20, pad_token_id=0)
    for b, prompt in enumerate(prompts):
        alone = mtdecode.generate(target, prompt, strategy, max_new_tokens=20)
        assert batch.row(b) == alone.tokens[0].tolist()
        assert [s.drafted for s in batch.steps_of(b)] == [s.drafted for s in alone.steps]


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_speculative_batch_rows_with_the_rule_equal_rows_alone(temperature):
    """Each row keeps its own calibration and stops: a batch row drafts, draws and decodes as it would alone
    (row b of a batch with seed s is the prompt alone with seed s + b)."""
    target, draft = pair()
    strategy = Speculative(draft, policy=Adaptive(costs=linear(0.05, 0.05)))
    prompts = [[1, 2, 3], [9, 8, 7, 6, 5], [4], [4]]
    settings = dict(max_new_tokens=24, temperature=temperature)
    batch = mtdecode.generate(target, prompts, strategy, pad_token_id=0, seed=11, **settings)
    for b, prompt in enumerate(prompts):
        alone = mtdecode.generate(target, prompt, strategy, seed=11 + b, **settings)
        assert batch.row(b) == alone.tokens[0].tolist()
        assert [s.drafted for s in batch.steps_of(b)] == [s.drafted for s in alone.steps]
    assert len({s.drafted for s in batch.steps}) > 1  # the rule varied k


@given(
    prompt=st.lists(st.integers(0, 5), min_size=1, max_size=12),  # few distinct tokens: lookups match often
    max_new_tokens=st.integers(0, 30),
    curve=st.lists(st.floats(0.5, 3.0), min_size=11, max_size=11),
)
def test_prompt_lookup_with_the_rule_equals_greedy(prompt, max_new_tokens, curve):
    """Any forward-cost curve, dips included (the plan weighs every width at once)."""
    from mtdecode.strategies import PromptLookup

    target, _ = pair()
    strategy = PromptLookup(policy=Adaptive(costs=DraftCosts(draft=0.0, target=[1.0, *curve])))
    result = assert_greedy_parity(target, prompt, strategy, max_new_tokens=max_new_tokens)
    assert all(step.drafted <= 10 for step in result.steps)


def test_prompt_lookup_copies_less_where_copies_are_rejected():
    """Flat costs: the rule verifies every copied token, step for step as a fixed PromptLookup(3, 10); steep
    costs and rejected copies: it verifies fewer."""
    from mtdecode.strategies import PromptLookup

    target, _ = pair()
    prompt = [3, 1, 4, 1, 5, 9, 2, 6] * 3
    flat = PromptLookup(policy=Adaptive(costs=DraftCosts(draft=0.0, target=[1.0] * 12)))
    steep = PromptLookup(policy=Adaptive(costs=DraftCosts(draft=0.0, target=[1 + 0.4 * n for n in range(12)])))
    wide = mtdecode.generate(target, prompt, flat, max_new_tokens=30).steps
    narrow = mtdecode.generate(target, prompt, steep, max_new_tokens=30).steps
    fixed = mtdecode.generate(target, prompt, PromptLookup(3, 10), max_new_tokens=30).steps
    assert [s.drafted for s in wide] == [s.drafted for s in fixed] and max(s.drafted for s in wide) > 2
    assert sum(s.drafted for s in narrow) < sum(s.drafted for s in wide)


def test_a_copied_tokens_chance_after_a_run_is_the_rate_of_that_runs_length():
    """CopyRecord (prompt lookup's and EAGLE's) reads a copied token by the run of agreeing tokens before it: the
    matched tokens before the copy, then the copy's tokens that held. A token counts as tried only where the tokens
    before it in its copy were all accepted. Row 0's copy followed a 1-token match, row 1's a 4-token one; the prior
    after a run of L is L / (L + 2), worth two tokens; runs of 4 or more share a rate. A longer run's chance is never
    below a shorter one's within a copy (a copy that held so far holds on at least as often)."""
    from mtdecode.copying import lookup_matched
    from mtdecode.policy.records import CopyRecord

    assert lookup_matched([7, 1, 2, 3, 9, 8, 1, 2, 3], ngram=3, k=2) == ([9, 8], 3)  # 7 and 8 differ: 3 agree
    assert lookup_matched([5, 1, 2, 3, 9, 5, 1, 2, 3], ngram=3, k=2) == ([9, 5], 4)  # the 5s agree too
    assert lookup_matched([1, 2, 3], ngram=3, k=2) == ([], 0)
    record = CopyRecord(batch=2)
    assert record.chances(3, [1, 4]).flatten().tolist() == pytest.approx([1 / 3, 2 / 4, 3 / 5, 4 / 6, 5 / 7, 6 / 8])
    record.add(torch.tensor([2, 3]), torch.tensor([0, 3]), [1, 4])  # row 0 fails at once, row 1 holds 3 of 3
    assert record.tries.tolist() == [[1, 0, 0, 0], [0, 0, 0, 3]] and record.hits.tolist() == [[0] * 4, [0, 0, 0, 3]]
    assert record.chances(1, [1, 1])[0].tolist() == pytest.approx([(2 / 3) / 3])  # after a 1-token match: 2/9
    later = [(3 + 8 / 6) / 5, (3 + 10 / 7) / 5]  # runs of 4 and 5: the shared rate, 3 of 3, with their priors
    assert record.chances(2, [2, 4]).flatten().tolist() == pytest.approx([2 / 4, 3 / 5, *later])
    for _ in range(4):  # row 0's copies after a 1-token match fail 4 more times at their second token
        record.add(torch.tensor([3, 0]), torch.tensor([1, 0]), [1, 0])
    assert record.tries[0].tolist() == [5, 4, 0, 0] and record.hits[0].tolist() == [4, 0, 0, 0]
    # runs of 1: (4 + 2/3) / 7; runs of 2: (0 + 1) / 6 and of 3: the prior 3/5, both lifted to the first's
    assert record.chances(3, [1, 0])[0].tolist() == pytest.approx([(4 + 2 / 3) / 7] * 3)
    assert record.chances(1, [2, 0])[0].tolist() == pytest.approx([1 / 6])  # alone, a run of 2 is not lifted
    assert record.chances(0, [1, 1]).shape == (2, 0)


def test_a_copy_records_prior_can_be_rates_measured_by_run():
    """`CopyRecord(rates=...)`: the prior after a run of L is `rates[L - 1]`, runs longer than the table take its
    last, and the record weighs in as with L / (L + 2); a rate of 0 or 1, or an empty table, is refused."""
    from mtdecode.policy.records import CopyRecord

    record = CopyRecord(batch=2, rates=(0.2, 0.5, 0.7))
    assert record.chances(4, [1, 2]).flatten().tolist() == pytest.approx([0.2, 0.5, 0.7, 0.7, 0.5, 0.7, 0.7, 0.7])
    record.add(torch.tensor([2, 0]), torch.tensor([0, 0]), [1, 0])  # row 0's first copied token fails
    assert record.chances(1, [1, 1]).flatten().tolist() == pytest.approx([(0 + 2 * 0.2) / 3, 0.2])
    for rates in [(), (0.5, 1.0), (0.0,)]:
        with pytest.raises(ValueError, match="rates must be chances"):
            CopyRecord(batch=1, rates=rates)


def test_prompt_lookups_prior_is_the_suites_counts_with_falling_rates_pooled():
    """`SUITE_RATES` are the counts `benchmarks/copy_rates.py` printed (greedy's answers to the suite, 64 new
    tokens), rounded, with the runs whose rate fell below a shorter run's pooled with it (`monotone`)."""
    import importlib.util
    from pathlib import Path

    from mtdecode.policy.records import SUITE_RATES

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "copy_rates.py"
    spec = importlib.util.spec_from_file_location("copy_rates", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    hits, tries = [109, 150, 145, 159, 151, 158, 161, 2326], [472, 292, 294, 223, 212, 187, 174, 2520]
    assert [round(rate, 2) for rate in bench.monotone(hits, tries)] == list(SUITE_RATES)
    assert bench.monotone([1, 3, 1], [2, 4, 4]) == pytest.approx([0.5, 0.5, 0.5])  # 3/4 then 1/4 fall: pooled
