"""Autoregressive greedy equals transformers' `generate(do_sample=False)`, token for token (float64),
and the session's invariant checks catch a strategy that breaks the cache contract."""

import functools
from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

import mtdecode
from mtdecode.plain import prefill, sample_next
from mtdecode.strategies import Autoregressive
from mtdecode.testing import greedy_tokens, hf_greedy_tokens, tiny_model

from conftest import DEVICES

VOCAB = 64


@functools.cache
def model(family: str, device: str):
    return tiny_model(family, vocab_size=VOCAB, seed=2, device=device)


prompts = st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=12)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("family", ["llama", "qwen2"])
@given(prompt=prompts, max_new_tokens=st.integers(0, 24), eos_at=st.none() | st.integers(0, 23))
def test_greedy_equals_transformers(family, device, prompt, max_new_tokens, eos_at):
    m = model(family, device)
    eos = None
    if eos_at is not None:  # pick an EOS token the continuation really produces
        free_run = hf_greedy_tokens(m, prompt, 24)
        eos = free_run[eos_at]
    assert greedy_tokens(m, prompt, max_new_tokens, eos) == hf_greedy_tokens(m, prompt, max_new_tokens, eos)


def test_result_records_one_step_per_target_forward():
    result = mtdecode.generate(model("llama", "cpu"), [1, 2, 3], Autoregressive(), max_new_tokens=7)
    assert result.tokens.shape == (1, 7) and result.lengths.tolist() == [7]
    assert [s.tokens for s in result.steps] == [(t,) for t in result.tokens[0].tolist()]
    assert result.stats.target_forwards == 7 and result.stats.draft_forwards == 0
    assert result.stats.tokens_per_forward == 1.0
    assert result.stats.seconds > 0


def test_eos_stops_and_is_included():
    m = model("llama", "cpu")
    free = greedy_tokens(m, [4, 5], 10)
    result = mtdecode.generate(m, [4, 5], Autoregressive(), max_new_tokens=10, eos_token_id=[free[3], 63])
    out = result.tokens[0].tolist()
    assert out == free[: free.index(free[3]) + 1]


@dataclass(frozen=True)
class ForgetsToCommit:
    """A broken strategy: it feeds tokens but leaves them pending in the cache."""

    def decode(self, s):
        logits = prefill(s)
        while True:
            yield s.commit(sample_next(s, logits)[:, None], 1)
            logits = s.target.extend(s.last_tokens[:, None])[:, -1]  # no cache.commit()


@dataclass(frozen=True)
class TwoForwardsPerStep:
    """A broken strategy: it runs the target twice per recorded step."""

    def decode(self, s):
        logits = prefill(s)
        s.target.extend(s.last_tokens[:, None])
        s.target.cache.crop(len(s.tokens[0]))
        yield s.commit(sample_next(s, logits)[:, None], 1)


@pytest.mark.parametrize("strategy, message", [(ForgetsToCommit(), "pending"), (TwoForwardsPerStep(), "forward")])
def test_invariant_violations_are_caught(strategy, message):
    with pytest.raises(mtdecode.InvariantError, match=message):
        mtdecode.generate(model("llama", "cpu"), [1, 2, 3], strategy, max_new_tokens=5)


def test_strategy_satisfies_the_protocol():
    assert isinstance(Autoregressive(), mtdecode.DecodingStrategy)
