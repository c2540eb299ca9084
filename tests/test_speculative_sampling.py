"""Speculative sampling preserves the target distribution exactly.

On an 8-token vocabulary the joint distribution of the next 3 tokens under token-by-token
sampling is enumerated exactly (512 blocks); 20,000 seeded speculative runs with 2 guesses
per step (so one step covers all 3 tokens: accept, reject-and-correct, and bonus paths)
are compared with it by a chi-square test at a false-alarm rate of 1e-3
(`mtdecode.testing.stats`). The same test is shown to fail on three wrong verifiers.

With the stopping rule on (`mtdecode.policy.rule`, costs chosen so that rows draft 1 or 2
guesses by q's confidence) the law is the same; a rule that peeks at p is caught.
"""

import functools

import pytest
import torch

from mtdecode import Sampler
from mtdecode.costs import DraftCosts
from mtdecode.policy import Adaptive
from mtdecode.sampling import draw
from mtdecode.strategies import speculative
from mtdecode.strategies.speculative import Speculative
from mtdecode.testing import tiny_model
from mtdecode.testing.distribution import check_distribution
from mtdecode.testing.models import perturbed

# thousands of seeded runs, with jaxtyping's checks off (`unchecked` in conftest.py says why)
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_thread", "unchecked")]

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


# ---- the stopping rule: guesses drafted until q is unsure

#: cheap drafting: at the first step a row drafts a second guess iff q gave its first more than about 0.35
CHEAP = DraftCosts(draft=0.05, target=[1.0, 1.1, 1.2, 1.3])


def with_rule() -> Speculative:
    return Speculative(pair()[1], max_draft_tokens=2, policy=Adaptive(costs=CHEAP))


def test_the_rule_drafts_one_or_two_guesses_here():
    """The law test below is only worth something if the rule really varies the number of guesses."""
    import mtdecode

    result = mtdecode.generate(pair()[0], [PROMPT] * 200, with_rule(), max_new_tokens=3, temperature=1.0, seed=0)
    first = [result.steps_of(b)[0].drafted for b in range(200)]
    assert set(first) == {1, 2}, first


@pytest.mark.parametrize("name", SETTINGS)
def test_speculative_sampling_with_the_stopping_rule_matches_autoregressive(name):
    target, _ = pair()
    result = check_distribution(
        target, PROMPT, with_rule(), n=3, sampler=SETTINGS[name], samples=SAMPLES, false_alarm=FALSE_ALARM
    )
    assert result.passed, str(result)


_draft_tokens = speculative.draft_tokens


def stop_where_p_is_unsure(s, draft, k, length=None):
    """Wrong: the draft is cut at the first guess the *target* gives less than 0.3. The cut chooses which
    guesses are proposed with knowledge of the verifier, so the output is no longer p."""
    guesses, q, drafted = _draft_tokens(s, draft, k, length)
    if guesses.shape[1] == 0:
        return guesses, q, drafted
    rows = [tokens + guess for tokens, guess in zip(s.tokens, guesses.tolist(), strict=True)]
    width = max(map(len, rows))
    ids = torch.tensor([row + [0] * (width - len(row)) for row in rows])  # right padding: causal, harmless
    logits = s.target.model.hf(ids).logits  # (batch, width, vocab), no cache
    at = torch.tensor([len(t) - 1 for t in s.tokens])[:, None] + torch.arange(guesses.shape[1])  # before guess i
    p = s.sampler.probs(logits[torch.arange(len(rows))[:, None], at])  # (batch, guesses, vocab)
    unsure = p.gather(2, guesses[..., None])[..., 0] < 0.3
    first = torch.where(unsure.any(1), unsure.long().argmax(1), guesses.shape[1])
    return guesses, q, torch.minimum(drafted, first)


def test_the_test_rejects_a_stopping_rule_that_peeks_at_p(monkeypatch):
    monkeypatch.setattr(speculative, "draft_tokens", stop_where_p_is_unsure)
    target, _ = pair()
    result = check_distribution(
        target, PROMPT, with_rule(), n=3, sampler=SETTINGS["plain"], samples=SAMPLES, false_alarm=FALSE_ALARM
    )
    assert not result.passed, f"a stopping rule that peeks at p was not caught: {result}"


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
