"""Batched decoding: every row of a batch is decoded exactly as its prompt alone.

- Row parity (float64, tiny Llama, Qwen2 and Mistral models; the Llama's MLPs and output layer skip the cells
  nobody reads, as those of the models `load_model` loads do, `mtdecode.tokenwise`): every row of a batched greedy run
  equals greedy decoding of the same prompt alone, for every exact strategy (EAGLE with a random head, whose
  rows verify trees of different sizes in one forward); MTAD's and MMTAD's rows equal
  their prompts alone. Hypothesis draws the batches: prompts of different lengths, EOS in some rows,
  budgets, batch sizes 1, 2, 3 and 17.
- Rows never influence each other where each row weighs its own guesses (fixed settings, or one row's
  `DraftCosts`): sampled row b of a batch seeded s equals its prompt alone seeded s + b, token for token
  and step for step. Under the batch rule (`BatchCosts`, the measured default) the batch decides how many
  guesses every row verifies, so a row's steps follow the batch (`tests/test_goodput.py`); its tokens
  keep their law, as the next test shows.
- Rows are independent in law, under the batch rule too: a chi-square test of the joint law of two rows
  against the product of their exact marginals, at a false-alarm rate of 1e-3, which a batch whose rows
  share their random numbers fails.
"""

import functools
import importlib

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mtdecode import Sampler, generate
from mtdecode.attention import GROUPED_SDPA
from mtdecode.costs import BatchCosts, DraftCosts
from mtdecode.policy import Adaptive, rule
from mtdecode.policy import batch as batch_rule
from mtdecode.strategies import MMTAD, MTAD, Autoregressive, Eagle, Jacobi, Lookahead, PromptLookup, Speculative
from mtdecode.testing import greedy_tokens, tiny_model
from mtdecode.testing.distribution import block_cells, exact_joint
from mtdecode.testing.models import perturbed
from mtdecode.testing.stats import chi_square_test
from mtdecode.tokenwise import tokenwise_skips
from mtdecode.zoo.eagle import EagleHead

from conftest import types_unchecked

VOCAB = 16  # small, so that greedy text repeats and guesses are accepted
FAMILIES = ["llama", "qwen2", "mistral"]
BATCH_SIZES = [1, 2, 3, 17]
LONGEST = 20  # the most new tokens a drawn batch asks for (`batches`)
PAD = VOCAB - 1


@functools.cache
def target(family: str):
    # Llama runs as the models `load_model` loads do: mtdecode's grouped attention, and MLPs and an output layer that
    # skip the cells nobody reads (`mtdecode.tokenwise`: padding, and the slots of rows that finished); the others
    # run transformers' sdpa
    if family == "llama":
        return tokenwise_skips(tiny_model(family, vocab_size=VOCAB, seed=3, attn_implementation=GROUPED_SDPA))
    return tiny_model(family, vocab_size=VOCAB, seed=3, attn_implementation="sdpa")


@functools.cache
def draft(family: str):
    return perturbed(target(family), 0.3, seed=1)


STRATEGIES = {
    "autoregressive": lambda f: Autoregressive(),
    "speculative": lambda f: Speculative(draft(f), 3),
    "jacobi": lambda f: Jacobi(4),
    "prompt_lookup": lambda f: PromptLookup(2, 5),
    "lookahead": lambda f: Lookahead(3, 3, 3, prompt_pool=True),
    "mtad": lambda f: MTAD(draft(f), 3, 2, 0.5),
    "mmtad": lambda f: MMTAD(draft(f), 3, 2, 0.5),
    # a random head, its tree sized by the rule from a made-up cost curve: rows verify trees of different sizes
    "eagle": lambda f: Eagle(head(f), depth=3, width=3, policy=Adaptive(costs=EAGLE_COSTS, depth_cost=0.05)),
}
EAGLE_COSTS = DraftCosts(draft=0.0, target=[1.0, 1.2, 1.05, 1.1, 1.3, 1.35])


@functools.cache
def head(family: str) -> EagleHead:
    model = target(family)
    torch.manual_seed(2)
    weights = model.get_input_embeddings().weight, model.get_output_embeddings().weight
    return EagleHead(model.config, *weights, torch.arange(VOCAB)).to(model.dtype).eval()


@st.composite
def batches(draw):
    """A batch of prompts of different lengths, a budget, and an EOS token from some row's greedy text."""
    size = draw(st.sampled_from(BATCH_SIZES))
    prompts = [draw(st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=10)) for _ in range(size)]
    budget = draw(st.integers(1, LONGEST))
    eos_from = draw(st.none() | st.tuples(st.integers(0, size - 1), st.integers(0, LONGEST - 1)))
    return prompts, budget, eos_from


@functools.cache
def greedy_alone(family: str, prompt: tuple[int, ...]) -> list[int]:
    """The prompt alone, decoded greedily for `LONGEST` tokens with no EOS: made once per prompt, as the tests of
    every strategy draw the same batches. The reference runs with the type checks off: `Autoregressive` is
    checked where it is tested, and checking its every forward again here made the reference 1.5 to 2 times slower."""
    with types_unchecked():
        return greedy_tokens(target(family), prompt, LONGEST)


def expected_greedy(family: str, prompt: list[int], budget: int, eos: int | None) -> list[int]:
    """Greedy decoding of the prompt alone with this budget and EOS: `greedy_alone`'s tokens up to the budget, and
    up to the first EOS (kept) if there is one. A shorter budget or an EOS only stops the same forwards earlier,
    so this is `greedy_tokens(target(family), prompt, budget, eos)`, as the last test of this file checks."""
    tokens = greedy_alone(family, tuple(prompt))[:budget]
    return tokens[: tokens.index(eos) + 1] if eos in tokens else tokens


def eos_token(family, prompts, eos_from):
    """A token that row r's greedy text contains at index i, so that row stops early (others maybe not)."""
    if eos_from is None:
        return None
    row, index = eos_from
    return greedy_alone(family, tuple(prompts[row]))[index]


def assert_rows_add_up(result, batch: int, eos, budget: int):
    """Each row's steps add up to its tokens; padding follows its end; its stats count its own steps."""
    for b in range(batch):
        row = result.row(b)
        assert [t for step in result.steps_of(b) for t in step.tokens] == row
        assert len(row) == budget or (eos is not None and row[-1] == eos)
        assert result.tokens[b, len(row) :].eq(PAD).all()
    assert result.stats.row_forwards == len(result.steps)
    assert result.stats.new_tokens == int(result.lengths.sum())


def check_rows(family: str, name: str, batch) -> None:
    """Decode the batch greedily with the strategy; every row must equal its prompt decoded alone."""
    prompts, budget, eos_from = batch
    eos = eos_token(family, prompts, eos_from)
    strategy = STRATEGIES[name](family)
    settings_ = dict(max_new_tokens=budget, eos_token_id=eos, pad_token_id=PAD, seed=0)
    result = generate(target(family), prompts, strategy, **settings_)
    for b, prompt in enumerate(prompts):
        if getattr(strategy, "exact", True):
            expected = expected_greedy(family, prompt, budget, eos)
        else:  # MTAD is not greedy decoding, but a row must still decode as its prompt alone
            with types_unchecked():  # the reference: the batch above, and MTAD's own tests, check its types
                expected = generate(target(family), prompt, strategy, **{**settings_, "seed": b}).row(0)
        assert result.row(b) == expected, f"row {b} of {len(prompts)} differs from its prompt alone"
    assert_rows_add_up(result, len(prompts), eos, budget)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("name", [name for name in STRATEGIES if name not in ("mtad", "mmtad")])
@given(batch=batches())
def test_every_row_of_a_greedy_batch_equals_its_prompt_alone(family, name, batch):
    check_rows(family, name, batch)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("name", ["mtad", "mmtad"])
@settings(max_examples=12)  # each example decodes every row alone too, with beams: the costliest case
@given(batch=batches())
def test_every_row_of_a_greedy_mtad_batch_equals_its_prompt_alone(family, name, batch):
    check_rows(family, name, batch)


#: the sampled rows' strategies: every one, and lookahead with a window of x0 alone (W = 1, N = 2), whose steps
#: without a candidate in any row are plain steps while other steps verify (`lookahead.plain_step`)
SAMPLED = {**STRATEGIES, "lookahead, x0 alone": lambda f: Lookahead(1, 2, 2, prompt_pool=True)}


@pytest.mark.parametrize("name", SAMPLED)
@settings(max_examples=10)
@given(batch=batches(), seed=st.integers(0, 2**40))
def test_a_sampled_row_equals_its_prompt_alone_with_its_seed(name, batch, seed):
    """Row b of a batch seeded s draws exactly what its prompt alone seeded s + b draws: no row's tokens
    or steps depend on the other rows."""
    prompts, budget, eos_from = batch
    eos = eos_token("llama", prompts, eos_from)
    strategy = SAMPLED[name]("llama")
    sampling = dict(max_new_tokens=budget, eos_token_id=eos, pad_token_id=PAD, temperature=0.9, top_k=12)
    result = generate(target("llama"), prompts, strategy, seed=seed, **sampling)
    for b, prompt in enumerate(prompts):
        with types_unchecked():  # the reference: the batch above checks the strategy's types
            alone = generate(target("llama"), prompt, strategy, seed=seed + b, **sampling)
        assert result.row(b) == alone.row(0)
        ours = [(s.tokens, s.drafted, s.accepted) for s in result.steps_of(b)]
        assert ours == [(s.tokens, s.drafted, s.accepted) for s in alone.steps]


def test_rows_end_at_their_own_eos_and_budget_in_the_middle_of_a_step():
    """Non-vacuity: with a draft that is the target itself every guess is accepted, so a row's EOS falls
    inside an accepted block and cuts the step there, while the other rows go on to the budget."""
    family = "llama"
    prompts = [[1, 2, 3], [4], [5, 6, 7, 8, 9]]
    eos = greedy_tokens(target(family), prompts[0], 20)[5]
    result = generate(
        target(family), prompts, Speculative(target(family), 4), max_new_tokens=20, eos_token_id=eos, pad_token_id=PAD
    )
    lengths = result.lengths.tolist()
    assert lengths[0] == 6 and len(set(lengths)) > 1
    last = result.steps_of(0)[-1]
    assert last.tokens[-1] == eos and last.drafted == 4 and len(last.tokens) < 5  # cut inside the step
    for b, prompt in enumerate(prompts):
        assert result.row(b) == greedy_tokens(target(family), prompt, 20, eos)
    # a finished row is a masked slot: it no longer counts as decoded, and its tokens stop
    assert (
        result.stats.row_forwards == sum(len(result.steps_of(b)) for b in range(3)) < 3 * result.stats.target_forwards
    )


def test_stats_count_every_row():
    prompts = [[1, 2], [3], [4, 5, 6]]
    result = generate(target("llama"), prompts, Autoregressive(), max_new_tokens=7)
    stats = result.stats
    assert (stats.new_tokens, stats.target_forwards, stats.row_forwards) == (21, 7, 21)
    assert stats.tokens_per_forward == 1.0
    assert result.tokens.shape == (3, 7) and result.lengths.tolist() == [7, 7, 7]


def test_a_tensor_of_prompts_is_a_batch():
    prompts = torch.tensor([[1, 2, 3], [4, 5, 6]])
    a = generate(target("llama"), prompts, Jacobi(3), max_new_tokens=6, seed=0)
    b = generate(target("llama"), prompts.tolist(), Jacobi(3), max_new_tokens=6, seed=0)
    assert torch.equal(a.tokens, b.tokens)


# ---- independence in law

PAIRS = 20_000
FALSE_ALARM = 1e-3
SMALL = 4  # vocabulary of the independence test: two rows of 2 tokens make 256 joint cells
PROMPTS = ([1, 2, 3, 1, 2], [3, 0, 1])


@functools.cache
def small_pair():
    model = tiny_model("llama", vocab_size=SMALL, seed=1, layers=1, hidden=16)
    return model, perturbed(model, 0.3, seed=2)


def joint_of_two_rows(strategy, sampler: Sampler, new_tokens: int = 2):
    """Chi-square test of (row 2i's first 2 tokens, row 2i+1's) over PAIRS pairs of one batch, each row decoding
    `new_tokens`, against the product of the two prompts' exact laws (`exact_joint`, by enumeration). Also the
    run's steps."""
    model, _ = small_pair()
    prompts = [list(PROMPTS[b % 2]) for b in range(2 * PAIRS)]
    sampling = dict(temperature=sampler.temperature, top_k=sampler.top_k, top_p=sampler.top_p)
    result = generate(model, prompts, strategy, max_new_tokens=new_tokens, seed=0, **sampling)
    cells = block_cells(result.tokens[:, :2], SMALL)  # (rows,): 16 cells per row
    joint = cells[0::2] * SMALL**2 + cells[1::2]  # (pairs,): 256 cells
    product = torch.outer(*(exact_joint(model, p, 2, sampler) for p in PROMPTS)).flatten()
    return chi_square_test(torch.bincount(joint, minlength=SMALL**4), product, false_alarm=FALSE_ALARM), result


INDEPENDENCE = {
    "speculative": lambda: Speculative(small_pair()[1], 1),
    "lookahead": lambda: Lookahead(2, 2, 2, prompt_pool=True),
    # the batch rule: every row's number of guesses follows the whole batch's record (`mtdecode.policy.rule`)
    "speculative, the batch rule": lambda: Speculative(
        small_pair()[1], policy=Adaptive(costs=BatchCosts({2 * PAIRS: DraftCosts(0.05, [1.0, 1.1, 1.2, 1.3])}))
    ),
}


def patience_of_one(monkeypatch) -> None:
    """A batch that starts rested (`Speculative` under the batch rule) tries its first guess only with more than
    twice its patience left: with a patience of 1 step, the first of 3 tokens is a try."""
    monkeypatch.setattr(rule, "PATIENCE", 1)  # read by the row rule and the batch rule
    monkeypatch.setattr(batch_rule, "PATIENCE", 1)


@pytest.mark.parametrize("name", INDEPENDENCE)
def test_two_rows_of_a_batch_are_independent(name, monkeypatch):
    """Under the batch rule each row decodes 3 tokens, of which the first 2 are tested: the first step is a try of
    one guess a row, and a row whose first step made one token drafts its second step's guesses by the whole batch's
    record of the first step."""
    batch_rule = "batch rule" in name
    if batch_rule:
        patience_of_one(monkeypatch)
    result, run = joint_of_two_rows(INDEPENDENCE[name](), Sampler(temperature=1.0), 3 if batch_rule else 2)
    assert result.passed, str(result)
    if batch_rule:  # non-vacuity: where a first step made one token, the rule drafted the second step's guess
        seconds = [run.steps_of(b)[1].drafted for b in range(0, 2 * PAIRS, 101) if len(run.steps_of(b)[0].tokens) == 1]
        assert seconds and all(drafted == 1 for drafted in seconds)


@pytest.mark.parametrize("name", ["speculative", "speculative, the batch rule"])
def test_the_independence_test_catches_rows_that_share_their_random_numbers(name, monkeypatch):
    """Mutant: rows 2i and 2i+1 get the same seed, so they draw the same numbers (a batch that seeds
    every row alike makes this mistake); their tokens become dependent and the test fails."""
    module = importlib.import_module("mtdecode.generate")  # the module, not the function of the same name
    monkeypatch.setattr(module, "_seeds", lambda seed, batch: [b // 2 for b in range(batch)])
    patience_of_one(monkeypatch)
    result, _ = joint_of_two_rows(INDEPENDENCE[name](), Sampler(temperature=1.0), 3 if "batch rule" in name else 2)
    assert not result.passed, f"rows sharing their random numbers went unnoticed: {result}"


@settings(max_examples=10)
@given(batch=batches(), family=st.sampled_from(FAMILIES))
def test_the_cut_reference_is_greedy_decoding_with_that_budget_and_eos(batch, family):
    """`expected_greedy` (one 20-token decode per prompt, cut at the budget and the EOS) is what greedy decoding
    of the prompt with that budget and EOS gives."""
    prompts, budget, eos_from = batch
    eos = eos_token(family, prompts, eos_from)
    for prompt in prompts[:3]:
        assert expected_greedy(family, prompt, budget, eos) == greedy_tokens(target(family), prompt, budget, eos)
