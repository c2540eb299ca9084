"""Lookahead and prompt-lookup sampling preserve the target distribution exactly.

Same test as for speculative sampling (`mtdecode.testing.distribution`): on an 8-token
vocabulary the joint distribution of the next 3 tokens under token-by-token sampling is
enumerated (512 blocks) and compared with 20,000 seeded runs by a chi-square test at a
false-alarm rate of 1e-3. The prompts are chosen so that the first step has candidates:
for lookahead, the prompt's n-grams seed the pool with two candidates that share their
first token (x0 = 1: [2, 4] and [2, 3]); for prompt lookup, the last bigram (1, 2) was
followed by [4, 1]. The same test rejects a lookahead whose verifier, after rejecting a
token, draws from p without removing it (the unit-level check in test_verification.py
rejects two more wrong verifiers).
"""

import functools

import pytest

from mtdecode import Sampler, verification
from mtdecode.strategies import Lookahead, PromptLookup
from mtdecode.testing import tiny_model
from mtdecode.testing.distribution import check_distribution

from test_verification import keep_rejected

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_thread")]

SAMPLES = 20_000
FALSE_ALARM = 1e-3
LOOKAHEAD_PROMPT = [1, 2, 3, 1, 2, 4, 1]
LOOKUP_PROMPT = [1, 2, 3, 1, 2, 4, 1, 2]
SETTINGS = {
    "plain": Sampler(temperature=1.0),
    "top-k and top-p": Sampler(temperature=0.8, top_k=5, top_p=0.9),
}


@functools.cache
def target():
    return tiny_model("llama", vocab_size=8, seed=1, layers=1, hidden=16)


def check(strategy, prompt, sampler):
    return check_distribution(
        target(), prompt, strategy, n=3, sampler=sampler, samples=SAMPLES, false_alarm=FALSE_ALARM
    )


@pytest.mark.parametrize("name", SETTINGS)
def test_lookahead_sampling_matches_autoregressive(name):
    result = check(Lookahead(2, 3, 2, prompt_pool=True), LOOKAHEAD_PROMPT, SETTINGS[name])
    assert result.passed, str(result)


def test_prompt_lookup_sampling_matches_autoregressive():
    result = check(PromptLookup(ngram=2, num_draft_tokens=2), LOOKUP_PROMPT, SETTINGS["plain"])
    assert result.passed, str(result)


def test_the_test_rejects_a_lookahead_with_a_wrong_verifier(monkeypatch):
    monkeypatch.setattr(verification, "try_proposals", keep_rejected)
    result = check(Lookahead(2, 3, 2, prompt_pool=True), LOOKAHEAD_PROMPT, SETTINGS["plain"])
    assert not result.passed, f"the keep_rejected mutant went unnoticed: {result}"
