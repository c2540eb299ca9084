"""Speculative decoding: greedy parity (float64), the cache invariant on both models, and
clear errors for a mismatched draft. The statistical tests are in test_speculative_sampling.py."""

import functools

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import mtdecode
from mtdecode.sampling import RowRandom
from mtdecode.session import with_new_token
from mtdecode.strategies import speculative
from mtdecode.strategies.speculative import Speculative
from mtdecode.testing import assert_greedy_parity, greedy_tokens, tiny_model
from mtdecode.testing.models import perturbed

from conftest import DEVICES

VOCAB = 32


@functools.cache
def pair(kind: str, device: str = "cpu"):
    """A target and a draft: the target itself, a noisy copy, or an unrelated random model."""
    target = tiny_model("llama", vocab_size=VOCAB, seed=3, device=device)
    draft = {
        "same": target,
        "noisy": perturbed(target, 0.3, seed=1),
        "unrelated": tiny_model("qwen2", vocab_size=VOCAB, seed=4, layers=1, device=device),
    }[kind]
    return target, draft


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", ["same", "noisy", "unrelated"])
@given(
    prompt=st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=10),
    k=st.integers(1, 8),
    max_new_tokens=st.integers(0, 30),
    eos_at=st.none() | st.integers(0, 29),
)
def test_greedy_equals_autoregressive(kind, device, prompt, k, max_new_tokens, eos_at):
    target, draft = pair(kind, device)
    eos = None if eos_at is None else greedy_tokens(target, prompt, 30)[eos_at]
    result = assert_greedy_parity(
        target, prompt, Speculative(draft, k), max_new_tokens=max_new_tokens, eos_token_id=eos
    )
    if kind == "same" and eos is None and max_new_tokens > 0:  # every guess is accepted
        assert all(step.accepted == step.drafted for step in result.steps)
        assert result.stats.target_forwards == -(-max_new_tokens // (k + 1))


def test_an_unrelated_draft_is_mostly_rejected_and_a_copy_always_accepted():
    target, unrelated = pair("unrelated")
    few = mtdecode.generate(target, [1, 2, 3], Speculative(unrelated, 4), max_new_tokens=40).stats
    all_ = mtdecode.generate(target, [1, 2, 3], Speculative(target, 4), max_new_tokens=40).stats
    assert few.mean_accepted < 1.0 < 4.0 == all_.mean_accepted
    assert all_.accepted_per_position == all_.drafted_per_position == (8, 8, 8, 8)
    assert all_.tokens_per_forward == 5.0


@given(data=st.data())
def test_the_greedy_judgement_is_the_general_rule_on_one_hot_p_and_q(data):
    """`judge_greedy` on the argmaxes == `accept` then `correct` on one-hot p and q: the same number of kept guesses
    and new token in every drawing row, and the same numbers used from every row's stream. A vocabulary of 3 makes
    agreement common; guesses past a row's own k are anything; some rows do not draw (one at least does)."""
    batch, width, vocab = data.draw(st.integers(1, 4)), data.draw(st.integers(0, 6)), 3
    token = st.integers(0, vocab - 1)

    def tokens(*shape: int) -> torch.Tensor:
        size = shape[0] * shape[1]
        return torch.tensor(data.draw(st.lists(token, min_size=size, max_size=size)), dtype=torch.long).reshape(shape)

    target, guesses = tokens(batch, width + 1), tokens(batch, width)
    agreeing = torch.tensor(data.draw(st.lists(st.integers(0, width), min_size=batch, max_size=batch)))
    guesses = torch.where(torch.arange(width) < agreeing[:, None], target[:, :width], guesses)  # long matches too
    k = torch.tensor(data.draw(st.lists(st.integers(0, width), min_size=batch, max_size=batch)), dtype=torch.long)
    rows = torch.tensor(data.draw(st.lists(st.booleans(), min_size=batch, max_size=batch).filter(any)))
    k[rows.long().argmax()] = width  # as in a decode: the guesses are as wide as the widest drawing row's k
    p, q = (torch.nn.functional.one_hot(t, vocab).double() for t in (target, guesses))
    general_random, greedy_random = RowRandom(range(batch)), RowRandom(range(batch))
    accepted = speculative.accept(guesses, p, q, k, general_random, rows)
    new_token = speculative.correct(p, q, accepted, k, general_random, rows)
    greedy_accepted, greedy_new_token = speculative.judge_greedy(target, guesses, k, greedy_random, rows)
    assert torch.equal(accepted[rows], greedy_accepted[rows])
    assert torch.equal(new_token[rows], greedy_new_token[rows])
    assert torch.equal(general_random.drawn, greedy_random.drawn)


def test_stats_count_acceptance_per_position():
    target, draft = pair("noisy")
    result = mtdecode.generate(target, [5, 6], Speculative(draft, 3), max_new_tokens=30, temperature=1.0, seed=1)
    stats, steps = result.stats, result.steps
    assert stats.drafted_per_position[0] == sum(s.drafted > 0 for s in steps)
    assert list(stats.accepted_per_position) == [sum(s.accepted > i for s in steps) for i in range(3)]
    assert stats.accepted_per_position[0] >= stats.accepted_per_position[1] >= stats.accepted_per_position[2]
    assert stats.mean_accepted == pytest.approx(sum(s.accepted for s in steps) / len(steps))


def test_both_caches_are_checked_after_every_step(monkeypatch):
    """A draft may lag behind the committed tokens (`Session.read_later`), never run ahead: a commit that leaves the
    rejected guesses in the draft's cache fails the invariant check."""
    target, draft = pair("noisy")

    def commit_keeping_rejected_guesses(s, draft_runner, guesses, accepted, new_token, k):
        s.target.cache.crop(s.lengths + accepted)
        steps = s.commit(*with_new_token(guesses, accepted, new_token), drafted=k, accepted=accepted)
        s.read_later(draft_runner)
        return steps

    monkeypatch.setattr(speculative, "commit", commit_keeping_rejected_guesses)
    with pytest.raises(mtdecode.InvariantError, match="draft cache"):
        mtdecode.generate(target, [1, 2, 3], Speculative(draft, 3), max_new_tokens=10)


def test_a_draft_with_another_vocabulary_is_refused_before_any_work():
    target = tiny_model("llama", vocab_size=VOCAB)
    draft = tiny_model("llama", vocab_size=VOCAB + 1)
    adapter = mtdecode.CausalLM.wrap(target)
    with pytest.raises(ValueError, match=r"draft's vocabulary \(33 tokens\) differs from the target's \(32\)"):
        mtdecode.generate(adapter, [1, 2], Speculative(draft), max_new_tokens=5)


def test_a_draft_on_another_device_is_refused():
    target, draft = pair("noisy")

    class Elsewhere(mtdecode.CausalLM):
        @property
        def device(self):
            return torch.device("meta")

    with pytest.raises(ValueError, match="draft model is on meta but the target is on cpu"):
        mtdecode.generate(target, [1, 2], Speculative(Elsewhere(draft, probe=False)), max_new_tokens=5)


@pytest.mark.parametrize("k", [0, -1, True])
def test_nonsense_settings_are_refused(k):
    with pytest.raises(ValueError, match="num_draft_tokens"):
        Speculative(pair("same")[0], num_draft_tokens=k)
