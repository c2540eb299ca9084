"""Speculative sampling preserves the target distribution exactly.

On an 8-token vocabulary the joint distribution of the next 3 tokens under token-by-token
sampling is enumerated exactly (512 blocks); 20,000 seeded speculative runs with 2 guesses
per step (so one step covers all 3 tokens: accept, reject-and-correct, and bonus paths)
are compared with it by a chi-square test at a false-alarm rate of 1e-3
(`mtdecode.testing.stats`). The same test is shown to fail on three wrong verifiers.
"""

import functools

import pytest
import torch

from mtdecode import Sampler
from mtdecode.sampling import draw
from mtdecode.strategies import speculative
from mtdecode.strategies.speculative import Speculative
from mtdecode.testing import tiny_model
from mtdecode.testing.distribution import check_distribution
from mtdecode.testing.models import perturbed

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_thread")]

SAMPLES = 20_000
FALSE_ALARM = 1e-3
PROMPT = [1, 2, 3]
SETTINGS = {
    "plain": Sampler(temperature=1.0),
    "top-k and top-p": Sampler(temperature=0.8, top_k=5, top_p=0.9),
}


@functools.cache
def pair():
    target = tiny_model("llama", vocab_size=8, seed=1, layers=1, hidden=16)
    return target, perturbed(target, 0.2, seed=2)


def check(sampler: Sampler):
    target, draft = pair()
    return check_distribution(
        target, PROMPT, Speculative(draft, 2), n=3, sampler=sampler, samples=SAMPLES, false_alarm=FALSE_ALARM
    )


@pytest.mark.parametrize("name", SETTINGS)
def test_speculative_sampling_matches_autoregressive(name):
    result = check(SETTINGS[name])
    assert result.passed, str(result)


# ---- mutants: each breaks one line of Algorithm 1; the same test must reject it


def residual_from_p(p, q, accepted, k, random, rows):
    """Wrong line 7: after a rejection, draw from p instead of norm(max(0, p - q))."""
    return draw(p[torch.arange(p.shape[0]), accepted], random, rows)


_accept, _correct = speculative.accept, speculative.correct  # the real rules, kept before any monkeypatching


def accept_with_p(guesses, p, q, k, random, rows):
    """Wrong line 5: accept with probability p(x) instead of min(1, p(x)/q(x))."""
    return _accept(guesses, p, torch.ones_like(q), k, random, rows)


def bonus_from_q(p, q, accepted, k, random, rows):
    """Wrong line 10: when every guess was accepted, draw the bonus token from q instead of p."""
    right = _correct(p, q, accepted, k, random, rows)
    if q.shape[1] == 0:
        return right
    from_q = draw(q[:, -1], random, rows & (accepted == k))
    return torch.where(accepted == k, from_q, right)


MUTANTS = {"correct": [residual_from_p, bonus_from_q], "accept": [accept_with_p]}


@pytest.mark.parametrize(
    "function, mutant", [(name, m) for name, ms in MUTANTS.items() for m in ms], ids=lambda x: getattr(x, "__name__", x)
)
def test_the_test_rejects_a_wrong_verifier(monkeypatch, function, mutant):
    monkeypatch.setattr(speculative, function, mutant)
    result = check(SETTINGS["plain"])
    assert not result.passed, f"{mutant.__name__} was not caught: {result}"
