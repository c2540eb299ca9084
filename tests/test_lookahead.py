"""Jacobi, prompt lookup and lookahead decoding: greedy parity (float64), the one-forward
lookahead input equals each branch run on its own, the pool, the tuned settings, and clear
errors for bad settings. The statistical tests are in test_lookahead_sampling.py."""

import functools
import warnings

import pytest
import torch
from hypothesis import example, given
from hypothesis import strategies as st

import mtdecode
from mtdecode import masks
from mtdecode.copying import lookup
from mtdecode.costs import curves, timing
from mtdecode.model import Runner
from mtdecode.policy import report, search
from mtdecode.strategies import Jacobi, Lookahead, PromptLookup
from mtdecode.strategies.lookahead import NgramPool, Window
from mtdecode.testing import assert_greedy_parity, greedy_tokens, tiny_model
from mtdecode.testing.tolerance import rounding_tolerance

VOCAB = 16  # small, so that greedy text repeats and guesses are often right


@functools.cache
def model(family: str = "llama"):
    return tiny_model(family, vocab_size=VOCAB, seed=3)


prompts = st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=12)
budgets = st.integers(0, 24)
eos_positions = st.none() | st.integers(0, 23)


def eos_token(family, prompt, eos_at):
    return None if eos_at is None else greedy_tokens(model(family), prompt, 24)[eos_at]


@pytest.mark.parametrize("family", ["llama", "qwen2"])
@given(prompt=prompts, block=st.integers(1, 9), max_new_tokens=budgets, eos_at=eos_positions)
def test_jacobi_greedy_equals_autoregressive(family, prompt, block, max_new_tokens, eos_at):
    eos = eos_token(family, prompt, eos_at)
    assert_greedy_parity(model(family), prompt, Jacobi(block), max_new_tokens=max_new_tokens, eos_token_id=eos)


@pytest.mark.parametrize("family", ["llama", "qwen2"])
@given(prompt=prompts, ngram=st.integers(1, 4), k=st.integers(1, 10), max_new_tokens=budgets, eos_at=eos_positions)
def test_prompt_lookup_greedy_equals_autoregressive(family, prompt, ngram, k, max_new_tokens, eos_at):
    eos = eos_token(family, prompt, eos_at)
    strategy = PromptLookup(ngram, k)
    assert_greedy_parity(model(family), prompt, strategy, max_new_tokens=max_new_tokens, eos_token_id=eos)


@pytest.mark.parametrize("family", ["llama", "qwen2"])
@given(
    prompt=prompts,
    w=st.integers(1, 6),
    n=st.integers(2, 5),
    g=st.integers(0, 6),
    prompt_pool=st.booleans(),
    max_new_tokens=budgets,
    eos_at=eos_positions,
)
def test_lookahead_greedy_equals_autoregressive(family, prompt, w, n, g, prompt_pool, max_new_tokens, eos_at):
    eos = eos_token(family, prompt, eos_at)
    strategy = Lookahead(w, n, g, prompt_pool=prompt_pool)
    assert_greedy_parity(model(family), prompt, strategy, max_new_tokens=max_new_tokens, eos_token_id=eos)


@given(
    prompt=prompts,
    w=st.integers(1, 4),
    n=st.integers(2, 4),
    curve=st.lists(st.floats(0.5, 3.0), min_size=len(timing.SIZES) - 1, max_size=len(timing.SIZES) - 1),
    max_new_tokens=budgets,
)
@example(prompt=[0], w=1, n=4, curve=[1.0] * 4 + [2.0] * 4 + [3.0, 1.0], max_new_tokens=6)  # found by test-hosts
def test_lookahead_with_its_candidate_rule_equals_greedy(prompt, w, n, curve, max_new_tokens):
    """G tuned: each step verifies the candidates the rule says pay, on any forward-cost curve (dips included)."""
    from mtdecode.policy.adaptive import Candidates

    costs = dict(zip(timing.SIZES, [1.0, *curve], strict=True))
    verified = []  # candidates each step verified

    def counted(plan, found, rows):
        kept = worth_trying(plan, found, rows)
        verified.extend(len(row) for row in kept)
        return kept

    worth_trying = Candidates.verify
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(timing, "forward_costs", lambda _model, rows=1, **_: costs)
        patch.setattr(Candidates, "verify", counted)
        assert_greedy_parity(model(), prompt, Lookahead(w, n, None), max_new_tokens=max_new_tokens)
    assert all(count <= search.choose(costs, w, n, prompt_pool=True)[2] for count in verified)


@pytest.mark.parametrize(
    "strategy", [Jacobi(4), PromptLookup(2, 6), Lookahead(4, 4, 4), Lookahead(7, 5, 7, prompt_pool=True)]
)
def test_guesses_are_accepted_on_repetitive_text(strategy):
    """The parity tests above are not vacuous: on this model's greedy text (16 tokens, so it
    repeats itself), guesses get accepted. Jacobi's and lookahead's first guesses are random prompt
    tokens: `assert_greedy_parity` seeds them, so the count repeats on every run."""
    result = assert_greedy_parity(model(), [1, 2, 3, 4, 1, 2, 3], strategy, max_new_tokens=60)
    assert result.stats.tokens_per_forward > 1.1, result.stats
    assert sum(step.accepted for step in result.steps) >= 8


def counting_steps(monkeypatch) -> dict[str, int]:
    """Count the calls of `lookahead.plain_step` ("plain") and `lookahead.lookahead_step` ("layout") from now on."""
    from mtdecode.strategies import lookahead

    calls = {"plain": 0, "layout": 0}

    def counted(name, step):
        def run(*args):
            calls[name] += 1
            return step(*args)

        return run

    monkeypatch.setattr(lookahead, "plain_step", counted("plain", lookahead.plain_step))
    monkeypatch.setattr(lookahead, "lookahead_step", counted("layout", lookahead.lookahead_step))
    return calls


def test_a_window_of_x0_alone_with_no_candidates_takes_plain_steps(monkeypatch):
    """W = 1, N = 2: the window is x0 alone (its start draws W + N - 3 = 0 prompt tokens), so with G = 0 every step
    is a plain step (`plain_step`, one token per row, as greedy decoding feeds), never the layout's forward."""
    calls = counting_steps(monkeypatch)
    prompts = [[1, 2, 3], [4, 5]]
    result = mtdecode.generate(model(), prompts, Lookahead(1, 2, 0), max_new_tokens=6)
    assert calls == {"plain": 6, "layout": 0}
    assert [result.row(b) for b in range(2)] == [greedy_tokens(model(), p, 6) for p in prompts]


def test_a_batch_with_a_window_of_x0_alone_mixes_plain_and_verifying_steps_and_equals_greedy(monkeypatch):
    """W = 1, N = 2: a step in which no row has a candidate is a plain step (`plain_step`), the others verify in the
    layout's forward; both kinds run in this batch (non-vacuity), and every row is greedy's."""
    calls = counting_steps(monkeypatch)
    prompts = [[1, 2, 3, 4, 1, 2, 3], [5, 9], [7, 7, 7, 7]]
    result = mtdecode.generate(model(), prompts, Lookahead(1, 2, 3, prompt_pool=True), max_new_tokens=30)
    assert calls["plain"] > 0 and calls["layout"] > 0, calls
    assert [result.row(b) for b in range(3)] == [greedy_tokens(model(), p, 30) for p in prompts]
    assert sum(step.accepted for step in result.steps) > 0


def test_one_forward_equals_each_branch_on_its_own():
    """Every row of the lookahead input gives the logits that a plain left-to-right forward over
    the tokens it may see (by the rule) gives, at the positions that rule assigns."""
    m = model()
    gen = torch.Generator().manual_seed(0)
    prefix_tokens = torch.randint(VOCAB, (5,), generator=gen).tolist()
    layout = masks.LookaheadLayout(context=2, rows=3, columns=4, candidates=2, length=3)
    ids = torch.randint(VOCAB, (layout.size,), generator=gen)
    runner = Runner(mtdecode.model.CausalLM.wrap(m), "target")
    runner.extend(prefix_tokens)
    runner.cache.commit()
    logits = runner.forward(ids[None], layout.positions(), layout.mask())[0]  # placed after the 5 cached tokens
    context = list(range(layout.context))

    def seen_by(index: int) -> list[int]:
        for r in range(layout.rows):
            for j in range(layout.columns):
                if layout.cell(r, j) == index and index >= layout.context:
                    row0 = [layout.cell(0, jj) for jj in range(1, j + 1)]
                    return context + row0 + [layout.cell(rr, j) for rr in range(1, r + 1)]
        for c in range(layout.candidates):
            for k in range(layout.length):
                if layout.candidate(c, k) == index:
                    return context + [layout.candidate(c, kk) for kk in range(k + 1)]
        return list(range(index + 1))  # a context token: the context up to it

    for index in range(layout.size):
        sequence = prefix_tokens + ids[seen_by(index)].tolist()
        with torch.no_grad():
            alone = m(torch.tensor([sequence])).logits[0, -1]
        tolerance = rounding_tolerance(m, alone, keys=len(sequence))
        torch.testing.assert_close(logits[index], alone, rtol=0, atol=tolerance)


def test_window_and_pool_do_not_leak_between_calls():
    strategy = Lookahead(3, 3, 3)
    first = mtdecode.generate(model(), [5, 6, 7], strategy, max_new_tokens=30, seed=0)
    mtdecode.generate(model(), [1, 2, 3, 4, 1, 2, 3], strategy, max_new_tokens=30, seed=1)
    again = mtdecode.generate(model(), [5, 6, 7], strategy, max_new_tokens=30, seed=0)
    assert first.tokens.tolist() == again.tokens.tolist()
    assert [s.accepted for s in first.steps] == [s.accepted for s in again.steps]


def test_pool_keeps_the_most_recent_per_key():
    pool = NgramPool(per_key=2)
    for ngram in [(1, 2, 3), (1, 4, 5), (2, 0, 0), (1, 2, 3), (1, 6, 7)]:
        pool.add(ngram)
    assert pool.candidates(1, length=2) == [[6, 7], [2, 3]]  # (1, 4, 5) was least recently used
    assert pool.candidates(1, length=1) == [[6], [2]]
    assert pool.candidates(9, length=2) == [] and pool.candidates(1, length=0) == []
    empty = NgramPool(per_key=0)
    empty.add((1, 2))
    assert empty.candidates(1, length=1) == []


def test_window_warms_up_to_n_minus_1_rows_of_w():
    w, n = 3, 5
    window = Window([torch.arange(w + n - 3)[None]], depth=n - 1)  # a batch of one row
    shapes = []
    while not window.full:
        window.slide(torch.arange(window.columns)[None])
        shapes.append((len(window.rows), window.columns))
    assert shapes == [(2, 5), (3, 4), (4, 3)]  # N - 2 warm-up steps
    window.slide(torch.tensor([[7, 8, 9]]))
    assert (len(window.rows), window.columns) == (n - 1, w) and window.rows[-1].tolist() == [[7, 8, 9]]


def test_lookup_takes_the_latest_match_and_falls_back_to_shorter_ngrams():
    assert lookup([1, 2, 3, 9, 1, 2, 3, 8, 7, 1, 2, 3], ngram=3, k=2) == [8, 7]
    assert lookup([5, 6, 4, 6], ngram=3, k=5) == [4, 6]  # only the 1-gram [6] matches
    assert lookup([1, 2, 3], ngram=2, k=4) == []
    assert lookup([1, 1], ngram=3, k=3) == [1]


def test_tuning_picks_small_inputs_when_forwards_grow_and_large_ones_when_they_do_not():
    flat = {n: 1.0 for n in timing.SIZES}
    steep = {n: float(n) ** 0.9 for n in timing.SIZES}
    w, n, g = search.choose(flat)
    assert (w + g) * (n - 1) >= 40  # a GPU-like profile: the more guesses the better
    w, n, g = search.choose(steep)
    assert (w + g) * (n - 1) <= 4
    assert search.choose(steep, window=7, ngram=5)[:2] == (7, 5)  # a value given is kept
    assert curves.relative_cost({1: 1.0, 4: 2.0, 8: 4.0}, 6) == 3.0
    assert curves.relative_cost({1: 1.0, 4: 2.0, 8: 4.0}, 10) == 5.0


def test_tuned_lookahead_decodes_greedily_where_no_setting_can_win(monkeypatch):
    """A host where a forward over 2 tokens already costs 1.9x one token: no (W, N, G) is predicted to
    beat greedy, so Lookahead() decodes at greedy cost and says why; where forwards are flat it looks ahead."""
    m = mtdecode.model.CausalLM.wrap(model())
    steep = {n: 1.0 if n == 1 else 0.9 * n + 0.1 for n in timing.SIZES}
    monkeypatch.setattr(timing, "forward_costs", lambda _model, rows=1, **_: steep)
    monkeypatch.setattr(timing, "scatter", lambda _model, rows=1, **_: {n: 0.0 for n in timing.SIZES})
    assert search.lookahead_plan(m, None, None, None)[0] is None
    assert search.lookahead_plan(m, 2, None, None)[0] is not None  # a value given: the user asked for lookahead
    with pytest.warns(mtdecode.GreedyFallbackWarning, match=r"^Lookahead: decodes greedily: its best setting"):
        result = assert_greedy_parity(m, [1, 2, 3], Lookahead(), max_new_tokens=12)
    assert result.stats.target_forwards == 12 and all(step.drafted == 0 for step in result.steps)
    assert [choice.greedy for choice in result.stats.choices] == [True]  # tests/test_fallback.py checks the rest
    assert "decodes greedily" in report.explain(m)[1]
    flat = {n: 1.0 for n in timing.SIZES}
    monkeypatch.setattr(timing, "forward_costs", lambda _model, rows=1, **_: flat)
    w, n, g = search.lookahead_plan(m, None, None, None)[0]
    assert g >= 1 and "predicted" in report.explain(m)[1]


def test_a_predicted_gain_within_the_measurements_scatter_is_not_taken(monkeypatch):
    """Forwards of 2 to 4 tokens at 1.02x one token: the best setting is predicted a little above 1.0x. With
    repeats that scatter by 0 it is taken; when the repeats scatter by more than the predicted gain, greedy."""
    m = mtdecode.model.CausalLM.wrap(model())
    mild = {n: 1.0 if n == 1 else 1.02 + 0.3 * (n - 4) * (n > 4) for n in timing.SIZES}
    monkeypatch.setattr(timing, "forward_costs", lambda _model, rows=1, **_: mild)
    w, n, g = search.choose(mild)
    gain = search.predicted_speedup(mild, w, n, g) - 1
    assert 0 < gain < 0.2
    monkeypatch.setattr(timing, "scatter", lambda _model, rows=1, **_: {s: 0.0 for s in timing.SIZES})
    assert search.lookahead_plan(m, None, None, None)[0] == (w, n, g)
    # margin = 2 x gain
    monkeypatch.setattr(timing, "scatter", lambda _model, rows=1, **_: {s: gain for s in timing.SIZES})
    assert search.lookahead_plan(m, None, None, None)[0] is None
    assert "within the measurement's scatter" in report.explain(m)[1]


def test_a_batch_takes_a_predicted_gain_only_beyond_the_scatter_and_the_steps_bookkeeping(monkeypatch):
    """Forwards of 2 to 4 tokens at 1.08x one token, in one row and in a batch of 4 alike, and no scatter: the best
    setting is predicted less than `curves.BOOKKEEPING` above 1.0x. One row takes it (its candidate rule weighs the
    bookkeeping step by step); a batch does not, as the batch rule's margin (`curves.batch_margin`) would not."""
    m = mtdecode.model.CausalLM.wrap(model())
    mild = {n: 1.0 if n == 1 else 1.08 + 0.3 * (n - 4) * (n > 4) for n in timing.SIZES}
    monkeypatch.setattr(timing, "forward_costs", lambda _model, rows=1, **_: mild)
    monkeypatch.setattr(timing, "scatter", lambda _model, rows=1, **_: dict.fromkeys(timing.SIZES, 0.0))
    monkeypatch.setattr(timing, "uncertainty", lambda _model, rows: dict.fromkeys(timing.SIZES, 0.0))
    w, n, g = search.choose(mild)
    assert 0 < search.predicted_speedup(mild, w, n, g) - 1 < curves.BOOKKEEPING
    assert search.lookahead_plan(m, None, None, None)[0] == (w, n, g)
    settings, choice = search.lookahead_plan(m, None, None, None, rows=4)
    assert settings is None and choice.greedy and "plus the steps' bookkeeping (5%)" in choice.reason
    assert search.lookahead_plan(m, w, None, None, rows=4)[0] == (w, n, g)  # a value given: the user asked for it


def test_tuned_lookahead_measures_once_and_decodes_exactly():
    m = mtdecode.model.CausalLM.wrap(model())
    with warnings.catch_warnings(record=True) as caught:  # whether it looks ahead depends on this host's costs
        warnings.simplefilter("always")
        result = assert_greedy_parity(m, [1, 2, 3], Lookahead(), max_new_tokens=10)
    assert result.tokens.shape == (1, 10)
    fell_back = [str(choice) for choice in result.stats.choices if choice.greedy]  # and then it says so, once
    assert [str(w.message) for w in caught if w.category is mtdecode.GreedyFallbackWarning] == fell_back
    costs = timing.forward_costs(m)
    assert timing.forward_costs(m) is costs and set(costs) == set(timing.SIZES)


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: Jacobi(0), "block must be an integer >= 1"),
        (lambda: Jacobi(True), "block must be an integer >= 1"),
        (lambda: PromptLookup(ngram=0), "ngram must be an integer >= 1"),
        (lambda: PromptLookup(num_draft_tokens=0), "num_draft_tokens must be an integer >= 1"),
        (lambda: Lookahead(window=0), "window must be None"),
        (lambda: Lookahead(ngram=1), "ngram must be None"),
        (lambda: Lookahead(guesses=-1), "guesses must be None"),
        (lambda: Lookahead(window=True), "window must be None"),
    ],
)
def test_bad_settings_are_refused(make, message):
    with pytest.raises(ValueError, match=message):
        make()
