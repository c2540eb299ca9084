"""Lookahead and prompt-lookup sampling preserve the target distribution exactly.

Same test as for speculative sampling (`mtdecode.testing.distribution`): on an 8-token
vocabulary the joint distribution of the next 3 tokens under token-by-token sampling is
enumerated (512 blocks) and compared with 20,000 seeded runs by a chi-square test at a
false-alarm rate of 1e-3. The prompts are chosen so that the first step has candidates:
for lookahead, the prompt's n-grams seed the pool with two candidates that share their
first token (x0 = 1: [2, 4] and [2, 3]); for prompt lookup, the last bigram (1, 2) was
followed by [4, 1]. Both are checked again with their drafting rules on (how many copied
tokens or candidates a step verifies, chosen from earlier steps). The same test rejects a
lookahead and a prompt lookup whose verifier, after rejecting a token, draws from p without
removing it (the unit-level check in test_verification.py rejects two more wrong verifiers).
"""

import functools

import pytest

import mtdecode
from mtdecode import Sampler, verification
from mtdecode.costs import DraftCosts, timing
from mtdecode.policy import Adaptive
from mtdecode.strategies import Lookahead, PromptLookup
from mtdecode.testing import tiny_model
from mtdecode.testing.distribution import check_distribution

from test_verification import keep_rejected

# thousands of seeded runs, with jaxtyping's checks off (`unchecked` in conftest.py says why)
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_thread", "unchecked")]

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


def test_prompt_lookup_sampling_with_the_rule_matches_autoregressive():
    """The default rule (`Rule.plan`) chooses how many copied tokens to verify from the row's earlier steps
    only; on a host whose 2-token forward is dearer than its 3-token one it verifies 0 or 1 of them at the
    second step depending on the first step's outcome (checked first), and the law is still p. (Copied tokens are
    not drawn: whether a step verifies one or not, its output at that position is p, so even a rule that read p
    could not bias the law; what this guards is the bookkeeping of steps of varying widths.)"""
    strategy = PromptLookup(ngram=2, policy=Adaptive(costs=DraftCosts(draft=0.0, target=[1.0, 1.2, 1.05, 1.4])))
    runs = mtdecode.generate(target(), [LOOKUP_PROMPT] * 200, strategy, max_new_tokens=3, temperature=1.0, seed=0)
    second = {runs.steps_of(b)[1].drafted for b in range(200) if len(runs.steps_of(b)) > 1}
    assert len(second) > 1, second
    result = check(strategy, LOOKUP_PROMPT, SETTINGS["plain"])
    assert result.passed, str(result)


def fix_costs(monkeypatch) -> None:
    """A forward-cost curve that is the same on every host (and for every number of rows), measured without scatter
    or uncertainty, which set the rule's margin: measured, they grow on a busy host until no candidate pays, and the
    rule's width no longer varies."""
    curve = {n: 1.0 + 0.02 * (n - 1) for n in timing.SIZES}
    monkeypatch.setattr(timing, "forward_costs", lambda _model, rows=1, **_: curve)
    monkeypatch.setattr(timing, "scatter", lambda _model, rows=1, **_: dict.fromkeys(timing.SIZES, 0.0))
    monkeypatch.setattr(timing, "uncertainty", lambda _model, rows: dict.fromkeys(timing.SIZES, 0.0))


def test_lookahead_sampling_with_the_rule_matches_autoregressive(monkeypatch):
    """Lookahead with G tuned verifies only the candidates that pay (`CandidateRecord`), from earlier steps only;
    the forward costs and their scatter are fixed here so that the tuning and the draws repeat on every host."""
    fix_costs(monkeypatch)
    strategy = Lookahead(2, 3, None, prompt_pool=True)
    runs = mtdecode.generate(target(), [LOOKAHEAD_PROMPT] * 200, strategy, max_new_tokens=3, temperature=1.0, seed=0)
    assert len({step.drafted for step in runs.steps}) > 1  # the rule varied the candidates verified
    result = check(strategy, LOOKAHEAD_PROMPT, SETTINGS["plain"])
    assert result.passed, str(result)


@pytest.mark.parametrize("which", ["lookahead", "lookahead with the rule", "prompt lookup with the rule"])
def test_the_test_rejects_a_wrong_verifier(which, monkeypatch):
    monkeypatch.setattr(verification, "try_proposals", keep_rejected)
    if which == "lookahead":
        result = check(Lookahead(2, 3, 2, prompt_pool=True), LOOKAHEAD_PROMPT, SETTINGS["plain"])
    elif which == "lookahead with the rule":
        fix_costs(monkeypatch)
        result = check(Lookahead(2, 3, None, prompt_pool=True), LOOKAHEAD_PROMPT, SETTINGS["plain"])
    else:
        strategy = PromptLookup(ngram=2, policy=Adaptive(costs=DraftCosts(draft=0.0, target=[1.0, 1.2, 1.05, 1.4])))
        result = check(strategy, LOOKUP_PROMPT, SETTINGS["plain"])
    assert not result.passed, f"the keep_rejected mutant went unnoticed: {result}"
