"""MTAD against exact MTJD: the law of its first k tokens stays within the bound proved in
docs/strategies/mtad.md, TV(M, MTJD) <= TV(A, MTJD) + P(E), checked at a false-alarm rate of
1e-3 (`mtdecode.testing.mtad.check_bounded_error`); the bound is not vacuous; and the check
rejects an MTAD that draws its extra token from the wrong row."""

import functools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mtdecode import Sampler
from mtdecode.strategies import MTAD, mtad
from mtdecode.testing import tiny_model
from mtdecode.testing.mtad import check_bounded_error

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_thread")]

FALSE_ALARM = 1e-3
SAMPLES = 4_000
PROMPT = [1, 2]


@functools.cache
def pair(vocab: int, draft_seed: int = 5):
    target = tiny_model("llama", vocab_size=vocab, seed=1, layers=1, hidden=16)
    return target, tiny_model("qwen2", vocab_size=vocab, seed=draft_seed, layers=1, hidden=16)


def check(vocab: int, k: int, strategy_settings: tuple, sampler: Sampler):
    """`check_bounded_error` for MTAD(draft, *strategy_settings) on the tiny pair with this vocabulary."""
    target, draft = pair(vocab)
    strategy = MTAD(draft, *strategy_settings)
    return check_bounded_error(
        target, draft, PROMPT, strategy, k=k, sampler=sampler, samples=SAMPLES, false_alarm=FALSE_ALARM
    )


@settings(max_examples=4)
@given(
    vocab=st.integers(4, 8),
    k=st.integers(2, 3),
    threshold=st.floats(0.05, 2.0),
    temperature=st.sampled_from([0.5, 0.7, 1.0]),
    width=st.integers(1, 3),
)
def test_mtad_stays_within_the_bound(vocab, k, threshold, temperature, width):
    if vocab**k > 512:
        k = 2  # keep the enumeration and the sampling allowance small
    result = check(vocab, k, (k - 1, width, threshold), Sampler(temperature))
    assert result.passed, str(result)


def test_the_bound_is_not_vacuous():
    """A draft that disagrees with the target and a low threshold: MTAD's error is a large part of the bound."""
    result = check(4, 3, (2, 2, 0.5), Sampler(0.7))
    assert result.passed, str(result)
    assert result.bound < 1 and result.measured >= result.bound / 4, str(result)


def test_the_check_rejects_an_extra_token_from_the_wrong_row(monkeypatch):
    """Wrong step 4: the extra token after n accepted tokens is drawn from p_{n+2} instead of p_{n+1}.
    With a high threshold almost nothing is accepted, so the bound is nearly TV(A, MTJD) and the error shows."""
    score_block = mtad.score_block

    def shifted(s, block):
        log_p, p = score_block(s, block)
        return log_p, torch.cat([p[:, 1:], p[:, -1:]], dim=1)

    monkeypatch.setattr(mtad, "score_block", shifted)
    result = check(4, 3, (2, 2, 5.0), Sampler(1.0))
    assert not result.passed, f"the shifted-row mutant went unnoticed: {result}"
