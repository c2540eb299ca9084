"""The batch rule: a batch's guesses sized by its goodput (`mtdecode.policy.rule`, `BatchCosts`).

- `BatchCosts` interpolates between the numbers of rows it was given, and refuses nonsense.
- The rule by hand: the width with which the batch would end soonest, so that the row that sets its end
  decides; a first guess for every row or for none.
- At batch 1 the batch rule is the row rule: the same steps, draw for draw.
- Exactness: with the batch rule every row of a greedy batch still equals greedy decoding of its prompt alone,
  for every strategy with a rule (hypothesis draws the batches and the costs).
- The rows of a batch draft together: in every step every row in play verifies the same width (or its copy's
  length, where shorter).
- Steep batch costs stop the guessing: a batch whose guesses cannot pay decodes at greedy cost after at most
  two tries, where flat costs draft in most steps; rows rejoin when the chances rise again.
- The costs: t(B, n) is kept per number of rows, and other numbers of rows are interpolated; a measurement taken
  in a busy moment is taken again and the fastest over them kept; the EAGLE head's
  reading of features is measured once per number of rows and kept.
- EAGLE's first tree is a try: the head reads the prompts only if a try pays for that read; a tree that no row
  verifies starts a rest at once. The rows share their calibration, each scaled by its own record; a try after
  which the batch drafts nothing did not pay.

Rows stay independent in law under the batch rule: `tests/test_batch.py` runs its chi-square test on it.
"""

import functools
import json
import statistics
import time
import warnings

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import mtdecode
from mtdecode.costs import BatchCosts, DraftCosts, curves, priors, probes, timing
from mtdecode.policy import Adaptive
from mtdecode.policy.batch import BatchRule
from mtdecode.policy.rule import Rule, rule_for
from mtdecode.strategies import MTAD, Eagle, Jacobi, Lookahead, PromptLookup, Speculative
from mtdecode.testing import greedy_tokens, tiny_model
from mtdecode.testing.models import perturbed
from mtdecode.zoo.eagle import EagleHead

VOCAB = 16
CPU = torch.device("cpu")


@functools.cache
def pair():
    target = tiny_model("llama", vocab_size=VOCAB, seed=3)
    return target, perturbed(target, 0.1, seed=1)


@functools.cache
def head() -> EagleHead:
    model = pair()[0]
    torch.manual_seed(2)
    weights = model.get_input_embeddings().weight, model.get_output_embeddings().weight
    return EagleHead(model.config, *weights, torch.arange(VOCAB)).to(model.dtype).eval()


#: four prompts of different lengths, for the EAGLE batch tests
RAGGED = [[1, 2, 3], [9, 8, 7, 6, 5], [4], [2, 2, 2, 2]]


def count_calls(monkeypatch, module, name: str, calls: dict, key: str, note=None) -> None:
    """Wrap `module.name` so that every call adds 1 to `calls[key]`, or appends `note(*args)` to it when given."""
    function = getattr(module, name)

    def call(*args, **kwargs):
        if note is None:
            calls[key] += 1
        else:
            calls[key].append(note(*args))
        return function(*args, **kwargs)

    monkeypatch.setattr(module, name, call)


def head_alone(slope: float) -> Eagle:
    """EAGLE with the head's tree alone (no copy), on 4 rows' costs t_4(n) = 1 + `slope` (n - 1), a depth and the
    head's read per entry at 0.05."""
    return Eagle(head(), depth=3, width=3, lookup=0, policy=Adaptive(costs=together(4, 0.0, slope), depth_cost=0.05,
                                                                    read_cost=0.05))  # fmt: skip


def linear(draft: float, slope: float, sizes: int = 24) -> DraftCosts:
    """c = `draft`, t(n) = 1 + slope (n - 1)."""
    return DraftCosts(draft=draft, target=[1 + slope * n for n in range(sizes)])


def together(rows: int, draft: float, slope: float) -> BatchCosts:
    return BatchCosts({rows: linear(draft, slope)})


RULED = {  # every strategy with a rule, given batch costs
    "speculative": lambda costs: Speculative(pair()[1], policy=Adaptive(costs=costs)),
    "prompt_lookup": lambda costs: PromptLookup(policy=Adaptive(costs=costs)),
    "mtad": lambda costs: MTAD(pair()[1], beam_width=2, policy=Adaptive(costs=costs)),
    "eagle": lambda costs: Eagle(
        head(), depth=3, width=3, policy=Adaptive(costs=costs, depth_cost=0.05, read_cost=0.05)
    ),
    "jacobi": lambda costs: Jacobi(policy=Adaptive(costs=costs)),
}


def test_batch_costs_interpolate_between_rows_and_refuse_nonsense():
    costs = BatchCosts({1: linear(0.1, 0.1, 4), 4: linear(0.4, 0.7, 4)})
    assert costs.at(1) == linear(0.1, 0.1, 4)
    two = costs.at(2)  # a third of the way from 1 row to 4
    assert two.draft == pytest.approx(0.2) and two.t(3) == pytest.approx(1.2 + (2.4 - 1.2) / 3)
    assert costs.at(7).t(2) == pytest.approx(1.1 + 0.6 * 2)  # past 4 rows the slope goes on
    for nonsense in ({}, {0: linear(0.1, 0.1)}, {True: linear(0.1, 0.1)}):
        with pytest.raises(ValueError, match="by_rows"):
            BatchCosts(nonsense)
    with pytest.raises(ValueError, match="for 3 rows"):
        BatchCosts({4: linear(0.1, 0.1)}).at(3)


def test_the_batch_rule_by_hand():
    """Two rows, copies whose chances are known, t_2(n) = 1 + 0.5 (n - 1). Row 0's copy holds with 0.9 per token
    (2 tokens), row 1's with 0.2 (1 token): E_0 = 1, 1.9, 2.71 and E_1 = 1, 1.2, 1.2 for widths w = 0, 1, 2.
    The batch ends after T(w) max_b m_b / E_b(w), m_b the tokens left in row b:

    - m = (10, 10): 10, 1.5 x 10 / 1.2 = 12.5, 2 x 10 / 1.2 = 16.7: no width pays, because row 1 sets the
      batch's end and its guess seldom holds;
    - m = (10, 2): 10, 1.5 x 10 / 1.9 = 7.9, 2 x 10 / 2.71 = 7.4: width 2 (row 1 verifies its one token), for row 0
      now sets the end.

    Weighed alone, each row at its own rate of 1 token per t(1): row 0 verifies both (2.71 - 2 > 1.9 - 1.5 > 0),
    row 1 none (1.2 - 1.5 < 0)."""
    chances = torch.tensor([[0.9, 0.9], [0.2, 0.2]], dtype=torch.float64)
    available = torch.tensor([2, 1])
    for left, planned in (([10, 10], [0, 0]), ([10, 2], [2, 1])):
        length = rule_for(together(2, 0.0, 0.5), batch=2, device=CPU, remaining=lambda left=left: torch.tensor(left))
        length.calibrated = lambda chances, place=None: chances  # the chances as given, no calibration
        assert length.plan(chances, available).tolist() == planned
    alone = rule_for(linear(0.0, 0.5), batch=2, device=CPU)  # each row weighed alone
    alone.calibrated = lambda chances, place=None: chances
    assert alone.plan(chances, available).tolist() == [2, 0]
    # a chain: a first guess for every row or for none. With a = 1/2 (no history) each row expects 1.5 tokens for a
    # step of cost 1 + c + t(2) - t(1) against 1 token for 1: 1.8 / 1.5 > 1 does not pay, 1.4 / 1.5 < 1 does
    length = rule_for(together(2, 0.3, 0.5), batch=2, device=CPU)
    assert length.start(possible=torch.tensor([True, True])).tolist() == [False, False]
    cheap = rule_for(together(2, 0.1, 0.3), batch=2, device=CPU)
    assert cheap.start(possible=torch.tensor([True, True])).tolist() == [True, True]


@pytest.mark.parametrize("name", RULED)
def test_at_batch_one_the_batch_rule_is_the_row_rule(name):
    target = pair()[0]
    runs = []
    for costs in (linear(0.1, 0.2), BatchCosts({1: linear(0.1, 0.2)})):
        result = mtdecode.generate(target, [1, 2, 3, 1, 2], RULED[name](costs), max_new_tokens=24, seed=5,
                                   temperature=1.0)  # fmt: skip
        runs.append([(s.tokens, s.drafted, s.accepted) for s in result.steps])
    assert runs[0] == runs[1]


@st.composite
def batches(draw):
    size = draw(st.sampled_from([2, 3, 5]))
    prompts = [draw(st.lists(st.integers(0, 5), min_size=1, max_size=8)) for _ in range(size)]
    return prompts, draw(st.integers(1, 16)), draw(st.sampled_from([0.0, 0.1, 0.4, 2.0]))


@pytest.mark.parametrize("name", [*RULED, "lookahead"])
@settings(max_examples=8)
@given(batch=batches())
def test_with_the_batch_rule_every_greedy_row_equals_its_prompt_alone(name, batch):
    """Exactness: the batch rule chooses only how much each row verifies, never what is accepted (MTAD, which is
    not greedy decoding, must still end every row in the budget with its own tokens)."""
    prompts, budget, slope = batch
    target = pair()[0]
    strategy = Lookahead() if name == "lookahead" else RULED[name](together(len(prompts), 0.05, slope))
    result = mtdecode.generate(target, prompts, strategy, max_new_tokens=budget, pad_token_id=0)
    for b, prompt in enumerate(prompts):
        row = result.row(b)
        assert [t for step in result.steps_of(b) for t in step.tokens] == row
        if name == "mtad":
            assert len(row) == budget
        else:
            assert row == greedy_tokens(target, prompt, budget)


@pytest.mark.parametrize("name", ["speculative", "mtad"])
def test_the_rows_of_a_batch_draft_together(name):
    """A draft forward runs for every row, and the verifying forward is as wide as the widest row: so under the
    batch rule every row in play drafts as many guesses as the others in every step (no EOS, budgets far)."""
    target = pair()[0]
    prompts = [[1, 2, 3], [9, 8, 7, 6, 5], [4], [2, 2, 2, 2]]
    result = mtdecode.generate(target, prompts, RULED[name](together(4, 0.05, 0.1)), max_new_tokens=40)
    rounds = min(len(result.steps_of(b)) for b in range(len(prompts))) - 2  # the last steps meet the budget
    drafted = [[result.steps_of(b)[t].drafted for b in range(len(prompts))] for t in range(rounds)]
    assert all(len(set(step)) == 1 for step in drafted), drafted
    assert len({step[0] for step in drafted}) > 1  # and the rule varied the width


def test_a_batch_whose_guesses_do_not_pay_decodes_at_greedy_cost():
    """- t_4(2) = 4 t_4(1): not even a guess that is always accepted pays, so the batch never drafts, and says so.
    - t_4(2) = 1.5 t_4(1) and a draft that is an unrelated model, taken to be accepted half the time before any
      guess is verified: the batch tries one guess per row once or twice, learns from every row at once that its
      guesses do not pay, and decodes at greedy cost from then on. With the draft's measured acceptance as the prior
      (`priors.draft_acceptance`, 0.08), it never tries.
    - Flat costs and a good draft: the batch drafts in most steps."""
    target, good = pair()
    bad = tiny_model("llama", vocab_size=VOCAB, seed=9)
    prompts = [[1, 2, 3], [9, 8, 7, 6, 5], [4], [2, 2, 2, 2]]
    steep = mtdecode.generate(
        target, prompts, Speculative(good, policy=Adaptive(costs=together(4, 0.05, 3.0))), max_new_tokens=40
    )
    assert not any(s.drafted for s in steep.steps) and steep.stats.choices[0].greedy
    strategy = Speculative(bad, policy=Adaptive(costs=together(4, 0.05, 0.5), acceptance=0.5))
    dear = mtdecode.generate(target, prompts, strategy, max_new_tokens=40)
    tries = [s.drafted for s in dear.steps_of(0) if s.drafted > 0]
    assert 1 <= len(tries) <= 2 and set(tries) == {1}
    measured = mtdecode.generate(
        target, prompts, Speculative(bad, policy=Adaptive(costs=together(4, 0.05, 0.5))), max_new_tokens=40
    )
    assert not any(s.drafted for s in measured.steps)
    flat = mtdecode.generate(
        target, prompts, Speculative(good, policy=Adaptive(costs=together(4, 0.0, 0.01))), max_new_tokens=40
    )
    assert sum(s.drafted > 0 for s in flat.steps_of(0)) > len(flat.steps_of(0)) / 2


def test_rows_rejoin_when_their_chances_rise():
    """A batch that verified nothing while its copies' chances were low verifies again once they are high."""
    length = rule_for(together(2, 0.0, 0.5), batch=2, device=CPU)
    length.calibrated = lambda chances, place=None: chances
    available = torch.tensor([3, 3])
    low = torch.full((2, 3), 0.05, dtype=torch.float64)
    for _ in range(3):
        assert length.plan(low, available).tolist() == [0, 0]
        length.record(torch.tensor([0, 0]), torch.tensor([0, 0]))
    high = torch.full((2, 3), 0.95, dtype=torch.float64)
    assert length.plan(high, available).tolist() == [3, 3]


def test_with_the_batch_rule_a_rows_own_record_scales_the_pooled_chance():
    """Two rows share the pooled calibration; row 0's six guesses at confidence 0.5 were all accepted, row 1's all
    rejected. The pool says 0.5 for a new guess at 0.5 ((6 + 2 x 0.5) / (12 + 2)); each row's own record scales it:
    row 0 accepted (6 + 2 x 1) / (3 + 2) = 1.6 times what the pool expects, row 1 (0 + 2) / 5 = 0.4 times: 0.8
    and 0.2. Before any guess both rows get the confidence itself."""
    length = rule_for(together(2, 0.0, 0.5), 2, CPU)
    half = torch.full((2,), 0.5, dtype=torch.float64)
    assert length.calibrated(half).tolist() == [0.5, 0.5]
    hit = torch.tensor([[True] * 6, [False] * 6])
    length.calibrate(torch.full((2, 6), 0.5, dtype=torch.float64), torch.ones(2, 6, dtype=torch.bool), hit)
    assert length.calibrated(half).tolist() == pytest.approx([0.8, 0.2])


def test_with_the_batch_rule_the_slow_rows_own_acceptance_decides_the_first_guess():
    """Two rows, a draft of cost 0.2 and a flat t(n): row 0's ten guesses were all accepted, row 1's ten all
    rejected. The pooled rate, (10 + 2 x 0.5) / (20 + 2) = 0.5, would pay for a first guess in both rows (a step
    costing 1.2 ends the batch 1.2 / 1.5 = 0.8 as late); row 1's own rate with the pool's as prior,
    (0 + 2 x 0.5) / (10 + 2) = 0.083, does not (1.2 / 1.083 = 1.11), and row 1 sets the batch's end: no row
    drafts. With the pooled rate for every row (the rule before it weighed each row's own), both would draft."""
    length = rule_for(together(2, 0.2, 0.0), 2, CPU, remaining=lambda: torch.tensor([20, 20]))
    for _ in range(10):
        length.start()
        length.more(torch.tensor([0.5, 0.5], dtype=torch.float64))
        length.record(torch.tensor([1, 1]), torch.tensor([1, 0]))
    assert float(length.calibration.acceptance()[0]) == pytest.approx(0.5)
    assert length.calibration.own_acceptance().tolist() == pytest.approx([11 / 12, 1 / 12])
    assert length.start().tolist() == [False, False]
    length.calibration.own_acceptance = length.calibration.acceptance  # the pooled rate for every row
    length.calibration.known.clear()
    assert length.start().tolist() == [True, True]


def test_a_try_after_which_the_batch_drafts_nothing_did_not_pay():
    """The batch rule's patience: a try whose guesses paid on average keeps it at 4 steps if the batch drafts on
    after it, and doubles it if the very next step drafts nothing (the rows' average paid, not the rows that set
    the batch's end)."""
    low = torch.tensor([[1.0, 1.01], [1.0, 1.01]], dtype=torch.float64)  # E(0), E(1): a guess that cannot pay
    high = torch.tensor([[1.0, 1.9], [1.0, 1.9]], dtype=torch.float64)
    available, yes = torch.tensor([1, 1]), torch.tensor([1, 1])
    for after, patience in ((low, 8), (high, 4)):
        length = rule_for(together(2, 0.0, 0.1), 2, CPU, wait_first=True)  # rested its patience: due to try
        assert length.plan_expected(low, available).tolist() == [1, 1] and length.probing.all()  # the try
        length.record(yes, yes)  # both guesses held: it paid
        assert length.batch_patience == 4
        length.record(length.plan_expected(after, available), torch.tensor([0, 0]))
        assert length.batch_patience == patience


@pytest.mark.parametrize("name", ["speculative", "mtad", "jacobi"])
def test_a_resting_batch_rests_on_without_weighing_and_chooses_as_if_it_had(name, monkeypatch):
    """Speculative, MTAD and Jacobi ask `BatchRule.idle` before weighing a step: a batch that chose to rest and has
    learned nothing since takes a plain step without the rule's weighing (`start`, `plan`) until its next try or
    until a row ends. Four ragged prompts whose rows end at different steps (row 1 at its EOS after 4 tokens, row 0
    after 35), a dear guess (t_4(2) = 1.5 t_4(1)) and an even prior: the batch tries one guess a row, then rests.
    Every row step, every choice and every token are those of the rule weighing every step (`idle` answering no):
    40 weighings then, 6 for Speculative and MTAD here and 5 for Jacobi."""
    target, draft = pair()
    eos = greedy_tokens(target, RAGGED[1], 9)[-1]  # row 1 ends early, the others may too
    costs = together(4, 0.05, 0.5)
    made = {
        "speculative": lambda: Speculative(
            tiny_model("llama", vocab_size=VOCAB, seed=9), policy=Adaptive(costs=costs, acceptance=0.5)
        ),
        "mtad": lambda: MTAD(
            tiny_model("llama", vocab_size=VOCAB, seed=9), beam_width=2, policy=Adaptive(costs=costs, acceptance=0.5)
        ),
        "jacobi": lambda: Jacobi(policy=Adaptive(costs=costs, acceptance=0.5)),
    }[name]

    def run() -> tuple:
        weighed = {"start": 0, "plan": 0}
        with monkeypatch.context() as m:
            count_calls(m, Rule, "start", weighed, "start")
            count_calls(m, Rule, "plan", weighed, "plan")
            result = mtdecode.generate(target, RAGGED, made(), max_new_tokens=40, eos_token_id=eos, pad_token_id=0)
        return result, weighed["start"] + weighed["plan"]

    resting, weighed_resting = run()
    monkeypatch.setattr(BatchRule, "idle", lambda self, *args, **kwargs: False)
    weighing, weighed_always = run()
    assert resting.steps == weighing.steps and resting.stats.choices == weighing.stats.choices
    assert torch.equal(resting.tokens, weighing.tokens)
    assert any(step.drafted for step in resting.steps)  # it tried
    assert len({len(resting.row(b)) for b in range(4)}) > 1  # rows ended at different steps
    assert weighed_resting < weighed_always / 4  # it rested on without weighing (not at every step a try could be due)


def test_a_batch_that_ends_with_a_row_without_guesses_stays_without_weighing_them():
    """`BatchRule.stays`: where a row in play with nothing to verify has as many tokens left as any row, no
    width ends the batch sooner (`width` is 0), whatever E and whatever the other rows verify; the rule then
    plans without E. Checked on 3,000 random steps (seeded): 2 to 6 rows, tokens left 1 to 12 (rows ended, 0, out of
    play), 0 to 5 guesses per row, E(0..5) rising from 1 per row, a curve rising from 1 (one in four with a dip below
    t(1), which `stays` must see) and a margin of 0 to 0.2. It must not claim a step that a width would speed
    up, and it must claim most steps that have a resting row with the most tokens left."""
    generator = torch.Generator().manual_seed(0)
    claimed = resting_slowest = 0
    for _ in range(3000):
        rows = int(torch.randint(2, 7, (1,), generator=generator))
        left = torch.randint(0, 13, (rows,), generator=generator)
        available = torch.randint(0, 6, (rows,), generator=generator) * (torch.rand(rows, generator=generator) < 0.7)
        steps = 1 + torch.rand(5, generator=generator).cumsum(0)
        if torch.rand(1, generator=generator) < 0.25:  # a measured curve may dip below t(1)
            steps[int(torch.randint(0, 5, (1,), generator=generator))] = 0.8
        margin = float(torch.rand(1, generator=generator)) * 0.2
        costs = BatchCosts({rows: DraftCosts(0.0, [1.0, *steps.tolist()])}, margin=margin)
        length = rule_for(costs, rows, CPU, remaining=lambda left=left: left)
        gains = torch.rand(rows, 5, generator=generator, dtype=torch.float64)
        expected = torch.cat([torch.ones(rows, 1, dtype=torch.float64), 1 + gains.cumsum(1)], dim=1)  # E(0..5)
        play = left > 0
        length.playing = play
        stays = length.stays(available)
        if stays:
            claimed += 1
            assert length.width(expected, available) == 0, (left, available, expected)
        resting = play & (available == 0)
        resting_slowest += bool(resting.any()) and int(left[resting].max()) == int(left[play].max())
    assert claimed > resting_slowest / 2 > 100


def test_prompt_lookups_batch_that_stays_plans_as_if_it_weighed_every_step(monkeypatch):
    """Prompt lookup over four ragged prompts at t_4(n) = 1 + 0.2 (n - 1): the steps where `stays` spares the
    copies' chances (`CopyRecord.chances`) give every step, every choice and every token of a run that weighs them
    at every step, and they spare more than a quarter of the weighings."""
    target = pair()[0]
    strategy = PromptLookup(policy=Adaptive(costs=together(4, 0.0, 0.2)))

    def run() -> tuple:
        weighed = {"chances": 0}
        with monkeypatch.context() as m:
            count_calls(m, mtdecode.policy.records.CopyRecord, "chances", weighed, "chances")
            result = mtdecode.generate(target, RAGGED, strategy, max_new_tokens=40, pad_token_id=0)
        return result, weighed["chances"]

    staying, weighed_staying = run()
    monkeypatch.setattr(BatchRule, "stays", lambda self, available: False)
    weighing, weighed_always = run()
    assert staying.steps == weighing.steps and staying.stats.choices == weighing.stats.choices
    assert torch.equal(staying.tokens, weighing.tokens)
    assert any(step.drafted for step in staying.steps)  # it verified copies
    assert weighed_staying < weighed_always * 3 / 4


def test_a_resting_batch_weighs_again_when_its_rows_change():
    """`BatchRule.idle(rows=...)`: a batch that rested in a step with the given rows rests on while the rows that
    may draft are those; a row that ended (or has no room for a guess) makes it weigh the step afresh."""
    length = rule_for(together(3, 0.0, 0.5), 3, CPU)
    rows = torch.tensor([True, True, True])
    length.rest(rows)
    assert length.idle(rows=rows) and length.idle()
    assert not length.idle(rows=torch.tensor([True, False, True]))
    length.rest(torch.tensor([True, False, True]))
    assert length.idle(rows=torch.tensor([True, False, True])) and length.declined == 5


def test_a_measurement_is_read_once_per_model_where_it_is_and_per_place_of_the_kept_ones(tmp_path, monkeypatch):
    """`timing.read_once`: the kept measurements (a draft's acceptance, Jacobi's, the costs of EAGLE's and MTAD's
    drafting work) are read from disk once per model object; again where the model moved to another dtype, where the
    kept measurements are elsewhere (`MTDECODE_COSTS_DIR`), or for a new model object."""
    monkeypatch.setenv("MTDECODE_COSTS_DIR", str(tmp_path / "one"))
    monkeypatch.delenv("MTDECODE_COSTS", raising=False)
    target = mtdecode.CausalLM(tiny_model("llama", vocab_size=VOCAB, seed=3, layers=1, hidden=16))
    draft = mtdecode.CausalLM(tiny_model("llama", vocab_size=VOCAB, seed=9, layers=1, hidden=16))
    paired = priors.draft_acceptance(target, draft)  # a pair's answer first, then one model's beside it
    measured = priors.jacobi_acceptance(target)
    reads = {"kept": 0}
    count_calls(monkeypatch, mtdecode.store, "kept", reads, "kept")
    assert priors.jacobi_acceptance(target) == measured and priors.draft_acceptance(target, draft) == paired
    assert reads["kept"] == 0
    assert priors.jacobi_acceptance(mtdecode.CausalLM(target.hf)) == measured and reads["kept"] == 1  # from disk
    monkeypatch.setenv("MTDECODE_COSTS_DIR", str(tmp_path / "two"))
    assert priors.jacobi_acceptance(target) == measured and reads["kept"] == 2  # measured again there
    target.hf.float()  # the tiny models are float64
    priors.jacobi_acceptance(target)
    assert reads["kept"] == 3
    assert (tmp_path / "two").exists() and len(list((tmp_path / "two").glob("jacobi-acceptance-*.json"))) == 2


def test_batch_costs_are_kept_per_number_of_rows_and_interpolated(monkeypatch):
    """t(B, n) between measured numbers of rows is interpolated linearly, continued past the largest; one row's
    costs relative to t(1, 1) are `relative_cost`'s, exactly."""
    seconds = {rows: {n: rows * (1 + 0.1 * (n - 1)) for n in timing.SIZES} for rows in timing.ROWS}
    monkeypatch.setattr(timing, "forward_costs", lambda model, rows=1, **_: seconds[rows])
    model = mtdecode.CausalLM(pair()[0])
    assert curves.batch_seconds(model, 3, 4) == pytest.approx(3 * 1.3)
    assert curves.batch_seconds(model, 48, 2) == pytest.approx(48 * 1.1)
    assert curves.batch_relative(model, 1, 5) == curves.relative_cost(seconds[1], 5)
    assert curves.batch_curve(model, 8, 3) == pytest.approx([8.0, 8.8, 9.6])
    assert timing.measured_sizes(32) == [n for n in timing.SIZES if n <= 32]


def test_one_measurement_per_number_of_rows(tmp_path, monkeypatch):
    """The batch's costs are measured once per number of rows and kept beside one row's (whose key is unchanged)."""
    monkeypatch.setenv("MTDECODE_COSTS_DIR", str(tmp_path))
    monkeypatch.delenv("MTDECODE_COSTS", raising=False)
    model = mtdecode.CausalLM(tiny_model("llama", vocab_size=VOCAB, seed=4, layers=1, hidden=16))
    one, two = timing.forward_costs(model), timing.forward_costs(model, rows=2)
    assert sorted(one) == list(timing.SIZES) and sorted(two) == timing.measured_sizes(2)
    kept = sorted(path.read_text().count('"rows": 2') for path in tmp_path.glob("forward-*.json"))
    assert kept == [0, 1]


def repeats(fastest: float, spread: float) -> list[float]:
    """Five repeats' seconds whose fastest is `fastest` and whose median lies `spread` above it."""
    return [fastest, fastest * (1 + 2 * spread), fastest * (1 + spread), fastest * (1 + spread), fastest * 1.5]


def test_costs_measured_in_a_busy_moment_are_measured_again_and_the_fastest_over_them_kept(tmp_path, monkeypatch):
    """A measurement whose mean scatter exceeds `QUIET` is taken again, up to `QUIET_TRIES` measurements in all; the
    costs are the fastest over every measurement's repeats and the scatter the quietest measurement's; a quiet first
    one is kept at once; what is kept on disk is what was chosen."""

    def calls(*made):  # fake `_measure` results: each (fastest of 1 token, of 2 tokens, scatter)
        made = iter([{1: repeats(one, spread), 2: repeats(two, spread)} for one, two, spread in made])
        taken = []
        return (lambda: taken.append(1) or next(made)), taken

    busy, taken = calls((2.0, 2.2, 0.2), (1.9, 2.3, 0.04), (1.0, 1.0, 0.01))
    timed = timing.quietest(busy)
    assert len(taken) == 2 and timed.costs == {1: 1.9, 2: 2.2}  # t(1) from the second, t(2) from the first
    assert timed.scatter == pytest.approx({1: 0.04, 2: 0.04})  # the second's
    always_busy, taken = calls((2.0, 2.0, 0.3), (2.0, 2.0, 0.1), (2.0, 2.0, 0.2), (1.0, 1.0, 0.0))
    assert timing.quietest(always_busy).scatter == pytest.approx({1: 0.1, 2: 0.1}) and len(taken) == timing.QUIET_TRIES
    quiet, taken = calls((1.0, 1.1, 0.01), (0.5, 0.5, 0.0))
    assert timing.quietest(quiet).costs == {1: 1.0, 2: 1.1} and len(taken) == 1

    monkeypatch.setenv("MTDECODE_COSTS_DIR", str(tmp_path))
    monkeypatch.delenv("MTDECODE_COSTS", raising=False)
    busy, taken = calls((2.0, 2.1, 0.5), (2.0, 2.1, 0.02))
    monkeypatch.setattr(timing, "_measure", lambda *_: busy())
    model = mtdecode.CausalLM(tiny_model("llama", vocab_size=VOCAB, seed=5, layers=1, hidden=16))
    assert timing.forward_costs(model) == {1: 2.0, 2: 2.1} and timing.scatter(model)[1] == pytest.approx(0.02)
    timing._COSTS.clear()  # read back from disk
    assert timing.forward_costs(model) == {1: 2.0, 2: 2.1} and len(taken) == 2


def test_a_batch_keeps_each_size_as_the_median_of_its_repeats_ratios_to_one_token(monkeypatch):
    """`timing._measure` on a clock whose repeats take known times gives every repeat's seconds, in order.
    `timing.summarise` keeps one row's costs as the fastest repeats; a batch's as the fastest 1-token forward times
    the median of each repeat's own t(n) / t(1), with that median's standard error (relative to it): a repeat that
    was fast for one size and slow for the other does not set their ratio."""
    seconds = [1.0, 1.4, 1.2, 1.1, 1.6]  # the five repeats of the one size timed
    clock = iter(t for took in seconds for t in (0.0, took))  # each repeat reads the clock before and after
    monkeypatch.setattr(timing.time, "perf_counter", lambda: next(clock))
    model = mtdecode.CausalLM(tiny_model("llama", vocab_size=VOCAB, seed=6, layers=1, hidden=16))
    assert timing._measure(model, context=8, repeats=5, rows=2, sizes=[2]) == {2: seconds}

    one = [1.0, 1.5, 1.2, 1.1, 1.3]  # t(1) of five repeats; t(2) 1.1 of it in four, 1.3 in the first
    two = [1.3, 1.65, 1.32, 1.21, 1.43]
    plain, batch = timing.summarise({1: one, 2: two}), timing.summarise({1: one, 2: two}, ratios=True)
    assert plain.costs == {1: 1.0, 2: 1.21} and plain.scatter == pytest.approx({1: 0.2, 2: 1.32 / 1.21 - 1})
    assert batch.costs == pytest.approx({1: 1.0, 2: 1.1}) and batch.scatter == plain.scatter
    error = 1.2533 * statistics.stdev([1.3, 1.1, 1.1, 1.1, 1.1]) / 5**0.5 / 1.1  # the median's standard error
    assert batch.uncertainty == pytest.approx({1: 0.0, 2: error})


def test_a_batch_margin_weighs_the_ratios_standard_error_not_the_scatter(tmp_path, monkeypatch):
    """A batch's margin (`curves.batch_margin`) adds two standard errors of the measured t(B, 2) / t(B, 1), not the
    repeats' scatter. Costs of several rows kept before their uncertainty was (their key names no parts) are measured
    again; one row's keep their key, and state no uncertainty."""
    monkeypatch.setenv("MTDECODE_COSTS_DIR", str(tmp_path))
    monkeypatch.delenv("MTDECODE_COSTS", raising=False)
    monkeypatch.delenv("MTDECODE_BATCH_MARGIN", raising=False)
    taken = []
    one = [1.0, 1.02, 1.045, 1.05, 1.06]  # a scatter of 4.5 %, below `QUIET`: measured once
    ratios = [1.1 * 1.02, 1.1, 1.1, 1.1, 1.1]  # t(2) / t(1) in each repeat; 1.1 for every larger size
    times = {n: [t * (ratios[i] if n == 2 else 1.1) for i, t in enumerate(one)] for n in timing.SIZES}
    times[1] = one
    monkeypatch.setattr(timing, "_measure", lambda *_: taken.append(1) or times)
    model = mtdecode.CausalLM(tiny_model("llama", vocab_size=VOCAB, seed=7, layers=1, hidden=16))
    old = {"model": mtdecode.store.module_key(model.hf), "host": mtdecode.store.host_key(), "context": timing.CONTEXT}
    old.update(repeats=5, rows=4)  # the key an older version kept
    mtdecode.store.kept("forward", old, lambda: {"costs": {"1": 1.0, "2": 1.0}, "scatter": {"1": 0.5, "2": 0.5}})
    error = 1.2533 * statistics.stdev(ratios) / 5**0.5 / 1.1  # relative to the median ratio
    assert curves.batch_margin(model, 4) == pytest.approx(curves.BOOKKEEPING + 2 * error) and len(taken) == 1
    assert timing.forward_costs(model, rows=4)[2] == pytest.approx(1.1)
    assert timing.scatter(model)[1] == pytest.approx(0.045)  # one row: the fastest, measured as ever
    with pytest.raises(ValueError, match="no uncertainty"):
        timing.uncertainty(model, rows=1)


def test_the_margin_of_a_measured_batch_size_reads_its_own_measurement(monkeypatch):
    """The batch rule's margin (`curves.batch_margin`): `BOOKKEEPING` plus two standard errors of t(B, 2) / t(B, 1) from
    the B-row measurement alone where B is one of `ROWS` (`batch_seconds` reads only it there), and the larger of the
    two it interpolates between elsewhere; one row has none."""
    monkeypatch.delenv("MTDECODE_BATCH_MARGIN", raising=False)
    spread = {1: 0.01, 2: 0.07, 4: 0.003, 8: 0.02, 16: 0.05, 32: 0.04}  # a busy 2-row measurement
    monkeypatch.setattr(timing, "uncertainty", lambda _model, rows: dict.fromkeys(timing.SIZES, spread[rows]))
    model = mtdecode.CausalLM(tiny_model("llama", vocab_size=VOCAB, seed=4, layers=1, hidden=16))
    margin = {rows: curves.batch_margin(model, rows) for rows in (1, 3, 4, 5, 32, 40)}
    own = {rows: curves.BOOKKEEPING + 2 * spread[rows] for rows in (2, 4, 8, 32)}
    assert margin[1] == 0.0
    assert margin[4] == pytest.approx(own[4]) and margin[32] == pytest.approx(own[32])  # not 2 rows' nor 16's
    assert margin[3] == pytest.approx(own[2]) and margin[5] == pytest.approx(own[8])  # the larger neighbour's
    assert margin[40] == pytest.approx(own[32])  # past the largest: that measurement's


def test_a_resting_batch_leaves_the_head_idle_and_catches_it_up(monkeypatch):
    """EAGLE under the batch rule: where no node can pay (t_4(2) = 4 t_4(1)), the batch's first tree is a try that
    cannot pay, so the head never reads the prompts nor grows a tree: every step is a plain step. Where nodes pay now
    and then, a batch that rested reads the target's features of every step it missed in one head forward, and
    drafts again; every row equals greedy decoding of its prompt alone either way."""
    from mtdecode.strategies import eagle

    calls = {"grow": 0, "read": [], "rest": 0}
    count_calls(monkeypatch, eagle, "grow_tree", calls, "grow")
    widest = lambda s, head, features, root: max(map(len, features))  # noqa: E731  entries read, the widest row's
    count_calls(monkeypatch, eagle, "read_features", calls, "read", widest)
    count_calls(monkeypatch, eagle, "rest_step", calls, "rest")
    target, prompts = pair()[0], RAGGED
    steep = head_alone(slope=3.0)
    result = mtdecode.generate(target, prompts, steep, max_new_tokens=30)
    # no tree, no read: every step a rest, the first one over the prompts
    assert calls["grow"] == 0 and calls["read"] == [] and calls["rest"] == len(result.steps_of(0))
    assert [result.row(b) for b in range(4)] == [greedy_tokens(target, p, 30) for p in prompts]
    calls.update(grow=0, read=[], rest=0)
    some = head_alone(slope=0.05)
    result = mtdecode.generate(target, prompts, some, max_new_tokens=60)
    assert calls["rest"] > 0 and max(calls["read"][1:]) > 1, calls  # caught up on several steps at once
    assert [result.row(b) for b in range(4)] == [greedy_tokens(target, p, 60) for p in prompts]


def test_a_resting_heads_backlog_keeps_each_rows_features_in_order_until_read():
    """`mtdecode.zoo.eagle.Backlog`: the features of the steps a resting head missed, row by row, joined in the order
    of the steps once the head reads them (a wrong order or a lost piece leaves the output exact, only the head's
    guesses worse, so the parity tests would not see it); the sizes it reports are what the rule weighs the reading
    by."""
    from mtdecode.zoo.eagle import Backlog

    unread = Backlog(2)
    assert not unread.waiting and unread.sizes == [0, 0]
    prompts = [torch.full((3, 2), 1.0), torch.full((1, 2), 2.0)]  # the first step: each row's prompt
    unread.add(prompts)
    unread.add([torch.full((1, 2), 3.0), torch.full((1, 2), 4.0)])  # a rest: one token per row
    assert unread.waiting and unread.sizes == [4, 2]
    rows = unread.take()
    assert [row[:, 0].tolist() for row in rows] == [[1.0, 1.0, 1.0, 3.0], [2.0, 4.0]]
    assert not unread.waiting and unread.sizes == [0, 0]
    unread.add([torch.full((2, 2), 5.0), torch.full((1, 2), 6.0)])  # a tree no row verified: one piece alone
    assert [row[:, 0].tolist() for row in unread.take()] == [[5.0, 5.0], [6.0]]


def test_a_tree_that_no_row_verifies_starts_the_rest_at_once(monkeypatch):
    """EAGLE under the batch rule: after a step whose tree no row verified, the head does not read that step's
    features; it reads them with the next ones, if and when the batch drafts again. So a read never comes between
    such a step and a rest; and such steps occur (the test is not vacuous)."""
    from mtdecode.strategies import eagle

    events = []
    count_calls(monkeypatch, eagle, "read_features", {"e": events}, "e", lambda *_: "read")
    count_calls(monkeypatch, eagle, "rest_step", {"e": events}, "e", lambda *_: "rest")
    size = eagle.tree_size

    def noted(*args, **kwargs):
        n, worth = size(*args, **kwargs)
        events.append("tree" if bool(n.any()) else "none")
        return n, worth

    monkeypatch.setattr(eagle, "tree_size", noted)
    target, prompts = pair()[0], RAGGED
    some = head_alone(slope=0.05)
    result = mtdecode.generate(target, prompts, some, max_new_tokens=60)
    after_none = [events[i + 1 : i + 3] for i, event in enumerate(events) if event == "none"]
    assert ["rest"] in [later[:1] for later in after_none], events  # a tree verified by no row, then a rest
    assert ["read", "rest"] not in after_none, events
    assert [result.row(b) for b in range(4)] == [greedy_tokens(target, p, 60) for p in prompts]


def test_a_batch_that_waits_first_tries_only_if_the_try_pays_for_its_catch_up():
    """The rule by hand: with `wait_first`, the first step is a try, weighed with the draft's catch-up (`reading`)
    and its other work (`extra`); without it, the first step drafts whatever it costs."""
    costs = together(4, 0.0, 0.1)  # one more token per row: 0.1 of a step
    waiting = rule_for(costs, 4, CPU, wait_first=True)
    assert not waiting.idle(reading=0.0) and not waiting.idle(reading=0.1, extra=0.1)
    assert waiting.idle(reading=5.0) and waiting.idle(reading=0.0, extra=5.0)
    assert not rule_for(costs, 4, CPU).idle(reading=5.0)  # not waiting: the first step drafts
    assert not rule_for(together(1, 0.0, 0.1), 1, CPU, wait_first=True).idle(reading=5.0)  # the row rule: no rest


def test_a_waiting_batch_begins_to_draft_only_with_a_try():
    """The rule by hand: with `wait_first`, `start` lets no row draft a chain before the batch has drafted once, even
    where a first guess would pay at the prior (a draft of cost 0.2, t(2) = t(1), an even prior: a step costing 1.2
    ends the batch 1.2 / 1.5 = 0.8 as late). The first drafting step is a one-guess try, made only when it pays for
    the draft's catch-up (`unread`, 40 tokens per row: reading them costs 0.2 x (t(40) - 1) = 0.76 of a step here;
    with one more guess's 0.2, more than a try hopes to win, 0.85 at the prior's optimistic acceptance). Once the
    batch has drafted, `start` weighs the chain as without `wait_first`, which drafts at once whatever the
    catch-up costs."""
    costs = BatchCosts({2: DraftCosts(0.2, [1.0, 1.0] + [1.0 + 0.1 * n for n in range(1, 39)])})  # t(40) = 4.8

    def left() -> torch.Tensor:
        return torch.tensor([200, 200])

    assert rule_for(costs, 2, CPU, remaining=left).start(unread=40).tolist() == [True, True]
    waiting = rule_for(costs, 2, CPU, remaining=left, wait_first=True)
    assert waiting.start(unread=40).tolist() == [False, False]  # the read is dearer than any try could win back
    waiting.record(torch.tensor([0, 0]), torch.tensor([0, 0]))
    assert waiting.start(unread=1).tolist() == [True, True] and waiting.probing.all()  # a try: one guess a row
    assert not waiting.more(torch.tensor([0.9, 0.9], dtype=torch.float64)).any()  # a try is one guess
    waiting.record(torch.tensor([1, 1]), torch.tensor([1, 1]))
    assert waiting.start(unread=1).tolist() == [True, True] and not waiting.probing.any()  # a chain: it pays
    assert waiting.more(torch.tensor([0.9, 0.9], dtype=torch.float64)).all()


@pytest.mark.parametrize("name", ["speculative", "mtad"])
def test_a_draft_models_first_read_of_the_prompts_is_a_try(name):
    """Speculative and MTAD start a batch rested: t(n) flat up to 4 tokens a row, then steep (t(5) = 10), and a
    draft forward of 0.3. Prompts of at most 4 tokens cost the draft nothing more to read: the first step is a
    one-guess try, and the batch drafts. Prompts of 6 tokens cost it 0.3 x (t(6) - 1) = 5.4 steps to read, which no
    try could win back: it never drafts, and its choice says why. Every row equals greedy decoding either way."""
    make = {
        "speculative": lambda c: Speculative(pair()[1], policy=Adaptive(costs=c, acceptance=0.5)),
        "mtad": lambda c: MTAD(pair()[1], beam_width=2, policy=Adaptive(costs=c, acceptance=0.5)),
    }[name]
    costs = BatchCosts({2: DraftCosts(0.3, [1.0, 1.0, 1.0, 1.0, 10.0, 19.0])})
    target = pair()[0]
    for prompts, drafts in (([[1, 2, 3], [9, 8, 7, 6]], True), ([[1, 2, 3, 4, 5, 6], [6, 5, 4, 3, 2, 1]], False)):
        with warnings.catch_warnings(record=True):  # a run that decodes greedily warns
            warnings.simplefilter("always")
            result = mtdecode.generate(target, prompts, make(costs), max_new_tokens=20)
        assert result.steps[0].drafted == (1 if drafts else 0)  # the first step: a try, or a rest
        assert any(step.drafted for step in result.steps) == drafts
        assert drafts or "starts rested" in result.stats.choices[0].reason, result.stats.choices
        assert [result.row(b) for b in range(2)] == [greedy_tokens(target, p, 20) for p in prompts]


def test_eagles_first_tree_pays_for_the_heads_reading_of_the_prompts(monkeypatch):
    """Under the batch rule, costs where nodes pay: with a cheap read the head reads the prompts and grows trees;
    with a read dearer than any try could win back, it never reads them, and every step is a plain step. Every
    row equals greedy decoding of its prompt alone either way."""
    from mtdecode.strategies import eagle

    calls = {"grow": 0, "read": 0}
    count_calls(monkeypatch, eagle, "grow_tree", calls, "grow")
    count_calls(monkeypatch, eagle, "read_features", calls, "read")
    target, prompts = pair()[0], RAGGED
    for read_cost, drafts in ((0.0, True), (50.0, False)):
        calls.update(grow=0, read=0)
        policy = Adaptive(costs=together(4, 0.0, 0.05), depth_cost=0.05, read_cost=read_cost)
        strategy = Eagle(head(), depth=3, width=3, lookup=0, policy=policy)
        result = mtdecode.generate(target, prompts, strategy, max_new_tokens=20)
        assert (calls["grow"] > 0 and calls["read"] > 0) == drafts, (read_cost, calls)
        assert drafts or not any(step.drafted for step in result.steps)
        assert [result.row(b) for b in range(4)] == [greedy_tokens(target, p, 20) for p in prompts]


def test_eagles_batch_rule_weighs_a_drafting_steps_work_measured_in_a_run(monkeypatch):
    """Eagle() without costs, for a batch: what a drafting step does beside its target forward is measured in a run
    (`probes.measure_eagle_steps`, for the batch's rows) and weighed as the step's overhead. Where that work is
    cheap the batch drafts trees; where it is dearer than any tree could win back, every step is a plain step. One
    row weighs its own rate and measures nothing of it. Every row equals greedy decoding either way."""
    from mtdecode.strategies import eagle

    asked, calls = [], {"grow": 0}
    count_calls(monkeypatch, eagle, "grow_tree", calls, "grow")

    def costs(target, draft, rows, *, longest, planned, draft_cost=None, overhead=None):  # t(n) = 1 + 0.05 (n - 1)
        return BatchCosts({rows: DraftCosts(draft_cost or 0.0, [1 + 0.05 * n for n in range(longest)], overhead or 0)})

    monkeypatch.setattr(curves, "batch_draft_costs", costs)
    target, prompts = pair()[0], RAGGED
    for work, drafts in ((0.0, True), (50.0, False)):  # the step's work beside its forward, o
        measured = probes.EagleStepCosts(step=work, depth=0.05, node=0.0, read=0.0)
        monkeypatch.setattr(probes, "measure_eagle_steps", lambda *a, m=measured, **k: asked.append(a[3]) or m)
        calls.update(grow=0)
        result = mtdecode.generate(target, prompts, Eagle(head(), depth=3, width=3, lookup=0), max_new_tokens=20)
        assert (calls["grow"] > 0) == drafts, (work, calls)
        assert drafts or not any(step.drafted for step in result.steps)
        assert [result.row(b) for b in range(4)] == [greedy_tokens(target, p, 20) for p in prompts]
    assert asked == [4, 4]
    mtdecode.generate(target, prompts[0], Eagle(head(), depth=3, width=3, lookup=0), max_new_tokens=4)
    assert asked == [4, 4]  # one row: not measured


def test_eagles_step_parts_come_from_the_runs_medians():
    """`probes.eagle_step_parts`, on made-up medians (seconds beside the forward): a node is the wide tree's extra
    over its 2 W - 1 extra nodes, the step's own work what a one-node step adds to a plain one less a node, a depth
    what a second depth adds, the catch-up per entry what the first drafting step adds over the entries less one;
    a difference that noise made negative is 0."""
    parts = probes.eagle_step_parts(plain=1.0, first=5.0, one=2.0, deeper=2.5, wide=3.5, width=3, entries=11)
    assert parts == pytest.approx({"step": 0.8, "depth": 0.5, "node": 0.2, "read": 0.3})
    noisy = probes.eagle_step_parts(plain=1.0, first=1.5, one=2.0, deeper=1.9, wide=1.8, width=3, entries=11)
    assert noisy == pytest.approx({"step": 1.0, "depth": 0.0, "node": 0.0, "read": 0.0})


def test_eagles_steps_are_measured_in_a_run_once_per_number_of_rows(tmp_path, monkeypatch):
    """`probes.measure_eagle_steps`: measured in runs and kept on disk (the same numbers again, one file per number of
    rows). Its parts are differences of timings, which a busy host can make 0 (a depth came out 0 under
    `make test-hosts` with another process beside it), so no figure of them is asserted here: their arithmetic is
    tested on made-up medians above."""
    monkeypatch.setenv("MTDECODE_COSTS_DIR", str(tmp_path))
    monkeypatch.delenv("MTDECODE_COSTS", raising=False)
    model = mtdecode.CausalLM(pair()[0])

    def tree(depth: int, nodes: int) -> Eagle:
        return Eagle(head(), depth=depth, width=3, tree_size=nodes)

    two = probes.measure_eagle_steps(model, head(), 3, 2, tree, lookup=True)
    assert probes.measure_eagle_steps(model, head(), 3, 2, tree, lookup=True) == two
    probes.measure_eagle_steps(model, head(), 3, 3, tree, lookup=True)
    assert len(list(tmp_path.glob("eagle-step-*.json"))) == 2


@pytest.mark.parametrize("kind", ["eagle steps", "eagle depth", "eagle read", "beam depth", "draft forward"])
def test_kept_timings_are_shares_of_a_forward_timed_beside_them(tmp_path, monkeypatch, kind):
    """Every timing the rules weigh beside the target's forwards (`curves.kept_beside_forward`) is a share of t(rows, 1)
    timed right after it, not of the kept t(1, 1) timed at another hour: a host that runs everything twice as slowly
    while they are timed gives the same costs (the seconds here are made up: the timers are replaced)."""
    monkeypatch.delenv("MTDECODE_COSTS", raising=False)
    target, draft = (mtdecode.CausalLM(model) for model in pair())
    rows, share = 2, 0.3
    forward = curves.batch_seconds(target, rows, 1)  # the kept curve, measured before the timers are replaced
    steps = functools.partial(probes.measure_eagle_steps, target, head(), 3, rows, lambda d, n: None, lookup=True)
    timers = {  # the timer replaced, and the cost as the rules get it
        "eagle steps": ("_time_eagle_steps", lambda: steps().step),
        "eagle depth": ("_time_depth", lambda: probes.measure_depth_cost(target, head(), 3, rows)),
        "eagle read": ("_time_read", lambda: probes.measure_read_cost(target, head(), rows) * probes.READ_TOKENS),
        "beam depth": ("_time_beam_depth", lambda: probes.measure_beam_depth_cost(target, draft, 2, rows)),
        "draft forward": (None, lambda: curves.draft_forward_cost(target, draft, rows)),
    }
    timer, cost = timers[kind]

    def timed(slower: float) -> float:
        """The cost, measured in its own folder on a host `slower` times as slow as the kept curve says."""
        monkeypatch.setenv("MTDECODE_COSTS_DIR", str(tmp_path / f"x{slower}"))
        seconds = slower * share * forward
        if timer is not None:
            parts = dict.fromkeys(probes.EagleStepCosts._fields, seconds)
            monkeypatch.setattr(probes, timer, lambda *_, **__: parts if timer == "_time_eagle_steps" else seconds)
        monkeypatch.setattr(timing, "_time_forward", lambda model, _: seconds if model is draft else slower * forward)
        return cost()

    costs = [timed(1.0), timed(2.0)]
    # a share of t(2, 1), in units of t(1, 1)
    assert costs == pytest.approx([share * curves.batch_relative(target, rows, 1)] * 2, rel=1e-12), costs


@pytest.mark.parametrize("runs", [1, probes.STEP_RUNS])
def test_one_slow_catch_up_sets_the_heads_read_only_when_it_is_the_only_sample(tmp_path, monkeypatch, runs):
    """The head's catch-up is one step of a run, so `measure_eagle_steps` makes each run `STEP_RUNS` times and takes
    the median of their first steps: one catch-up that the host delays (0.3 s here, in the first timed run) then
    leaves the read at the tiny model's cost, where with a single run (`STEP_RUNS` = 1) that delay is the read."""
    from mtdecode.strategies import eagle as eagle_module

    monkeypatch.setenv("MTDECODE_COSTS_DIR", str(tmp_path))
    monkeypatch.delenv("MTDECODE_COSTS", raising=False)
    monkeypatch.setattr(probes, "STEP_RUNS", runs)
    model = mtdecode.CausalLM(pair()[0])
    catch_ups, real = [], eagle_module.read_features  # the entries of each catch-up on the prompts

    def delayed(s, runner, features, root):
        entries = max(len(f) for f in features)
        if entries >= probes.STEP_PROMPT:  # the prompts' features: a run's first drafting step
            catch_ups.append(entries)
            if len(catch_ups) == 2:  # the untimed warm-up run's is the first; the first timed run's the second
                time.sleep(0.3)
        return real(s, runner, features, root)

    monkeypatch.setattr(eagle_module, "read_features", delayed)
    probes.measure_eagle_steps(
        model, head(), 3, 2, lambda depth, nodes: Eagle(head(), depth=depth, width=3, tree_size=nodes), lookup=True
    )
    (kept,) = tmp_path.glob("eagle-step-*.json")  # the timings as kept, in seconds
    seconds = json.loads(kept.read_text())["value"]["read"] * (probes.STEP_PROMPT - 1)  # the catch-up on the prompts
    assert len(catch_ups) >= 1 + runs
    assert (seconds > 0.25) == (runs == 1), (runs, seconds)


def test_the_heads_reading_is_measured_once_per_number_of_rows(tmp_path, monkeypatch):
    """`probes.measure_read_cost`: a positive cost per entry, kept on disk (the same number again, one file per number
    of rows), and refused as an argument when it is not a cost."""
    from mtdecode.policy.adaptive import reading_cost

    monkeypatch.setenv("MTDECODE_COSTS_DIR", str(tmp_path))
    monkeypatch.delenv("MTDECODE_COSTS", raising=False)
    model = mtdecode.CausalLM(pair()[0])
    one, two = probes.measure_read_cost(model, head(), 1), probes.measure_read_cost(model, head(), 2)
    assert one > 0 and two > 0
    assert probes.measure_read_cost(model, head(), 2) == two
    assert len(list(tmp_path.glob("eagle-read-*.json"))) == 2
    # a read is priced in proportion to its entries (the head's grows faster than the target's forward)
    assert reading_cost(two, 158) == pytest.approx(158 * two) and reading_cost(two, 0) == reading_cost(0.0, 5) == 0
    for nonsense in (-1.0, float("nan")):
        with pytest.raises(ValueError, match="read_cost"):
            Eagle(head(), policy=Adaptive(read_cost=nonsense))


def test_jacobi_verifies_the_guesses_that_pay_and_moves_the_others_on():
    """Jacobi's rule: steep batch costs, no guess verified (a plain step each, and the choice says it decoded
    greedily); flat costs, guesses verified; a row that verified none moves its guesses on one place."""
    from mtdecode.strategies.jacobi import moved_on

    target = pair()[0]
    prompts = [[1, 2, 3], [9, 8, 7, 6, 5], [4], [2, 2, 2, 2]]
    steep = mtdecode.generate(target, prompts, Jacobi(policy=Adaptive(costs=together(4, 0.0, 3.0))), max_new_tokens=20)
    assert not any(s.drafted for s in steep.steps) and steep.stats.choices[0].greedy
    flat = mtdecode.generate(target, prompts, Jacobi(policy=Adaptive(costs=together(4, 0.0, 0.0))), max_new_tokens=20)
    assert sum(s.drafted > 0 for s in flat.steps_of(0)) > len(flat.steps_of(0)) / 2
    for result in (steep, flat):
        assert [result.row(b) for b in range(4)] == [greedy_tokens(target, p, 20) for p in prompts]
    assert moved_on(torch.tensor([[5, 6, 7]])).tolist() == [[6, 7, 7]]


def test_jacobis_later_places_start_from_the_place_before():
    """`PlaceRecord`: the first place starts from an even chance, each later one from the estimate of the place
    before it, so a block whose first guess failed 10 times in 10 is not kept worth verifying by its later places'
    short records (an even chance each would give them 1/2 where the first place has 1/12)."""
    from mtdecode.policy.records import PlaceRecord

    record = PlaceRecord(1, 3)
    for _ in range(10):
        record.add(torch.tensor([3]), torch.tensor([0]))
    first = (0 + 2 * 0.5) / (10 + 2)
    assert record.chances(3)[0].tolist() == pytest.approx([first] * 3)


def test_jacobis_first_place_starts_from_the_models_measured_acceptance(tmp_path, monkeypatch):
    """`priors.jacobi_acceptance` is a chance, measured once per model and kept on disk; `Jacobi`'s rule starts its
    first place there: at one row, where a guess costs 0.05 of a forward, a prior of 1/2 verifies guesses in the first
    step, and one of 0.02 verifies none until the row has rested its patience (then it may try one)."""
    from mtdecode.policy.rule import PATIENCE
    from mtdecode.strategies import jacobi

    monkeypatch.setenv("MTDECODE_COSTS_DIR", str(tmp_path))
    target = pair()[0]
    measured = priors.jacobi_acceptance(mtdecode.CausalLM(target))
    assert 0 <= measured <= 1
    monkeypatch.setattr(priors, "_target_text", lambda *_: pytest.fail("measured twice"))
    assert priors.jacobi_acceptance(mtdecode.CausalLM(target)) == measured
    # the measurement's steps are Jacobi(block=1)'s, started from the same guess
    for text, guess in (([1, 2, 3], 3), ([5, 9, 9, 9], 9), ([4], 7)):
        monkeypatch.setattr(jacobi, "prompt_tokens", lambda s, n, g=guess: torch.full((s.batch, n), g))
        steps = mtdecode.generate(target, text, Jacobi(block=1), max_new_tokens=16).steps
        theirs = [step.accepted > 0 for step in steps if step.drafted]
        assert priors.jacobi_guesses(mtdecode.CausalLM(target), text, guess, 16)[: len(theirs)] == theirs
    runs = {
        a: mtdecode.generate(
            target, [1, 2, 3], Jacobi(policy=Adaptive(costs=linear(0.0, 0.05), acceptance=a)), max_new_tokens=12
        )
        for a in (0.5, 0.02)
    }
    assert runs[0.5].steps[0].drafted > 0
    assert not any(step.drafted for step in runs[0.02].steps[:PATIENCE])
    for run in runs.values():
        assert run.row(0) == greedy_tokens(target, [1, 2, 3], 12)
    for nonsense in (-0.1, 1.5, float("nan")):
        with pytest.raises(ValueError, match="acceptance"):
            Jacobi(policy=Adaptive(acceptance=nonsense))


def test_lookaheads_candidates_of_every_rank_are_expected_to_bring_one_candidate_at_most():
    """`CandidateRecord` before any step: a step accepts one candidate at most, so verifying g of them is expected to
    bring 1 + (1 - 2^-g) tokens (ranks' priors 1/2, 1/4, ...; one token per accepted candidate), never 2 or more (an
    even chance for each rank would expect 1 + g/2)."""
    from mtdecode.policy.records import CandidateRecord

    expected = CandidateRecord(2, 7).expected(7)
    assert expected[0].tolist() == pytest.approx([2 - 0.5**g for g in range(8)])
    assert bool((expected < 2).all())


def test_lookaheads_candidate_record_is_kept_until_a_step_verifies_candidates():
    """`CandidateRecord.expected` is kept by width while steps verify no candidate (most steps on chat), and worked out
    afresh after one that did: row 0's second candidate brought 2 tokens, row 1's first was rejected."""
    from mtdecode.policy.records import CandidateRecord

    record = CandidateRecord(2, 3)
    before = record.expected(3)
    record.add(torch.tensor([0, 0]), torch.tensor([-1, -1]), torch.tensor([0, 0]))  # nothing verified
    assert record.expected(3) is before
    record.add(torch.tensor([2, 1]), torch.tensor([1, -1]), torch.tensor([2, 0]))
    after = record.expected(3)
    assert torch.equal(after, record.estimate(3)) and not torch.equal(after, before)
    assert after[0, 2] > before[0, 2] and after[1, 1] < before[1, 1]


def test_a_drafts_acceptance_is_measured_once_on_the_targets_own_text(tmp_path, monkeypatch):
    """`priors.draft_acceptance`: 1 for the target drafting for itself, less for an unrelated model, kept on disk."""
    monkeypatch.setenv("MTDECODE_COSTS_DIR", str(tmp_path))
    target, draft = mtdecode.CausalLM(pair()[0]), mtdecode.CausalLM(tiny_model("llama", vocab_size=VOCAB, seed=9))
    assert priors.draft_acceptance(target, target) == 1.0
    measured = priors.draft_acceptance(target, draft)
    assert 0 <= measured < 1
    monkeypatch.setattr(priors, "_score_draft", lambda *_: pytest.fail("measured twice"))
    assert priors.draft_acceptance(target, draft) == measured
    assert priors.draft_acceptance(mtdecode.CausalLM(target.hf), mtdecode.CausalLM(draft.hf)) == measured  # the disk's


def test_prompt_lookup_starts_its_copies_record_from_the_suites_rates(monkeypatch):
    """Prompt lookup's rule makes one `CopyRecord` per run, and it starts from `SUITE_RATES`."""
    made = []
    init = mtdecode.policy.records.CopyRecord.__init__

    def spy(self, batch, rates=None):
        made.append(rates)
        init(self, batch, rates)

    monkeypatch.setattr(mtdecode.policy.records.CopyRecord, "__init__", spy)
    mtdecode.generate(
        pair()[0], RAGGED, PromptLookup(policy=Adaptive(costs=together(4, 0.0, 0.2))), max_new_tokens=4, pad_token_id=0
    )
    assert made == [mtdecode.policy.records.SUITE_RATES]
