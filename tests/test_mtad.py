"""MTAD and MMTAD: the acceptance rule holds on every step (recomputed independently), in batches too; the
zero-error case is exact; MMTAD with one beam is MTAD; wrong rules are caught; bad settings are refused."""

import functools
import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import mtdecode
from mtdecode import Sampler, beams, oracle
from mtdecode.beam_q import HeadQ
from mtdecode.strategies import MMTAD, MTAD, mmtad, mtad
from mtdecode.testing import tiny_model
from mtdecode.testing.distribution import sampled_run
from mtdecode.testing.models import perturbed, random_head
from mtdecode.testing.mtad import check_multi_candidate_rule, check_threshold_rule, prefix_log_ratios


@functools.cache
def pair(vocab: int, kind: str):
    target = tiny_model("llama", vocab_size=vocab, seed=3)
    draft = {
        "same": lambda: target,
        "noisy": lambda: perturbed(target, 0.5, seed=1),
        "other": lambda: tiny_model("qwen2", vocab_size=vocab, seed=4),
        "head": lambda: random_head(target),  # scores the even tokens only (q = 0 on the odd ones)
    }
    return target, draft[kind]()


SAMPLERS = [Sampler(0.0), Sampler(1.0), Sampler(0.7, top_k=5), Sampler(1.0, top_p=0.9)]


#: a run's settings, drawn by Hypothesis: the pair, the prompt, k, W, tau, the sampler, the budget and the seed
RUNS = dict(
    vocab=st.sampled_from([4, 8, 16]),
    kind=st.sampled_from(["same", "noisy", "other", "head"]),
    prompt=st.lists(st.integers(0, 3), min_size=1, max_size=6),
    k=st.integers(1, 4),
    width=st.integers(1, 4),
    threshold=st.floats(0.05, 2.0),
    sampler=st.sampled_from(SAMPLERS),
    max_new_tokens=st.integers(0, 12),
    seed=st.integers(0, 1000),
)


@given(**RUNS)
def test_every_step_accepts_the_longest_prefix_that_passes(
    vocab, kind, prompt, k, width, threshold, sampler, max_new_tokens, seed
):
    target, draft = pair(vocab, kind)
    strategy = MTAD(draft, k, width, threshold)
    result = sampled_run(target, prompt, strategy, max_new_tokens, sampler, seed)
    assert result.tokens.shape == (1, max_new_tokens)
    check_threshold_rule(target, draft, prompt, result, threshold, sampler)
    assert result.stats.accepted_lengths == tuple(step.accepted for step in result.steps)
    assert len(result.stats.log_ratios) == len(result.steps)


@pytest.mark.parametrize("vocab, k", [(4, 2), (4, 3), (6, 2), (5, 3)])
@pytest.mark.parametrize("prompt", [[1], [2, 0, 3]])
def test_with_the_target_as_draft_and_exhaustive_beams_greedy_mtad_finds_the_most_likely_block(vocab, k, prompt):
    target = tiny_model("llama", vocab_size=vocab, seed=7)
    result = mtdecode.generate(target, prompt, MTAD(target, k, beam_width=vocab ** (k - 1)), max_new_tokens=k + 1)
    check_threshold_rule(target, target, prompt, result, 0.5, Sampler(0.0))
    first = result.steps[0]
    assert list(first.proposal) == oracle.most_likely_block(target, prompt, k)
    # the same model scored the block twice (a tree forward and a chain forward): equal up to rounding
    _, ties = prefix_log_ratios(target, target, prompt, first.proposal, Sampler(0.0))
    assert first.accepted == k and first.log_ratio == pytest.approx(0.0, abs=float(ties[-1]))


def test_the_oracle_mtjd_is_the_tempered_joint():
    target = tiny_model("llama", vocab_size=4, seed=7)
    plain = oracle.token_by_token_joint(target, [1, 2], 3, Sampler(1.0))
    # float64 identities: allclose's default tolerance (1e-5 relative) is ten orders of magnitude above
    # float64 rounding of 64 products of 3 factors, and far below any real difference of distributions
    assert torch.allclose(oracle.mtjd(target, [1, 2], 3, 1.0), plain)
    sharp = oracle.mtjd(target, [1, 2], 3, 0.5)
    assert torch.allclose(sharp, plain**2 / (plain**2).sum())
    mode = oracle.mtjd(target, [1, 2], 3, 0.0)
    assert mode.sum() == 1 and int(mode.argmax()) == int(plain.argmax())
    block = oracle.most_likely_block(target, [1, 2], 3)
    assert block[0] * 16 + block[1] * 4 + block[2] == int(plain.argmax())
    with pytest.raises(ValueError, match="too many to enumerate"):
        oracle.mtjd(tiny_model("llama", vocab_size=64), [1], 3, 1.0)


# ---- mutants: each breaks the acceptance rule; the rule check must catch it


def per_token(log_p, log_q, k, threshold):
    """Wrong: tests each token's ratio p/q > tau instead of the joint ratio of the prefix."""
    if not log_p.shape[1]:
        return torch.zeros_like(k)
    return _last_passing((log_p - log_q) > math.log(threshold), k)


def shortest(log_p, log_q, k, threshold):
    """Wrong: the shortest passing prefix instead of the longest."""
    if not log_p.shape[1]:
        return torch.zeros_like(k)
    passing = _within((log_p - log_q).cumsum(1) > math.log(threshold), k)
    return torch.where(passing.any(1), passing.long().argmax(1) + 1, 0)


def _within(passing, k):
    return passing & (torch.arange(passing.shape[1]) < k[:, None])


def _last_passing(passing, k):
    passing = _within(passing, k)
    last = passing.shape[1] - passing.flip(1).long().argmax(1)
    return torch.where(passing.any(1), last, 0)


def caught(target, strategy, check) -> bool:
    """Whether `check(result)` fails on any of ten seeded runs of `strategy` on [1, 2, 3] (temperature 1); it stops
    at the first that fails."""
    for seed in range(10):
        result = sampled_run(target, [1, 2, 3], strategy, 16, Sampler(1.0), seed)
        try:
            check(result)
        except AssertionError:
            return True
    return False


@pytest.mark.parametrize("mutant", [per_token, shortest], ids=lambda m: m.__name__)
def test_the_rule_check_catches_a_wrong_rule(monkeypatch, mutant):
    monkeypatch.setattr(mtad, "accepted_length", mutant)
    target, draft = pair(8, "other")
    check = functools.partial(check_threshold_rule, target, draft, [1, 2, 3], threshold=0.3, sampler=Sampler(1.0))
    assert caught(target, MTAD(draft, 4, 2, 0.3), lambda result: check(result=result)), (
        f"the {mutant.__name__} mutant went unnoticed in 10 runs"
    )


@pytest.mark.parametrize("kind", [MTAD, MMTAD], ids=["MTAD", "MMTAD"])
@pytest.mark.parametrize(
    "settings, message",
    [
        (dict(num_draft_tokens=0), "num_draft_tokens must be an integer >= 1"),
        (dict(beam_width=0), "beam_width must be an integer >= 1"),
        (dict(threshold=0.0), "threshold must be a number > 0"),
        (dict(threshold=-1.0), "threshold must be a number > 0"),
        (dict(threshold=float("nan")), "threshold must be a number > 0"),
    ],
)
def test_bad_settings_are_refused(kind, settings, message):
    target, _ = pair(8, "same")
    with pytest.raises(ValueError, match=message):
        kind(target, **settings)


def test_an_unknown_denominator_is_refused():
    target, _ = pair(8, "same")
    with pytest.raises((ValueError, TypeError), match="denominator"):  # a type error where the types are checked
        MMTAD(target, denominator="best")


def test_a_draft_with_another_vocabulary_is_refused():
    target, _ = pair(8, "same")
    with pytest.raises(ValueError, match=r"draft's vocabulary \(16 tokens\) differs from the target's \(8\)"):
        mtdecode.generate(target, [1, 2], MTAD(tiny_model("llama", vocab_size=16)), max_new_tokens=4)


@given(
    values=st.lists(
        st.one_of(st.just(0.0), st.just(1.0), st.just(float("nan")), st.floats(0.0, 1.0, allow_subnormal=True)),
        min_size=1,
        max_size=40,
    )
)
def test_the_log_that_skips_zeros_is_the_log_bit_for_bit(values):
    """`beams.log_of(q)` is `q.log()` in every bit (-inf at 0, NaN kept, subnormals and 1 alike): it only spares
    torch the slow log of 0."""
    q = torch.tensor(values, dtype=torch.float64)
    for shape in [(len(values),), (1, len(values), 1)]:
        assert torch.equal(beams.log_of(q.reshape(shape)).view(torch.int64), q.reshape(shape).log().view(torch.int64))


# ---- MMTAD


@given(**RUNS, denominator=st.sampled_from(["heaviest", "largest"]))
def test_every_mmtad_step_keeps_the_deepest_block_that_passes(
    vocab, kind, prompt, k, width, threshold, denominator, sampler, max_new_tokens, seed
):
    target, draft = pair(vocab, kind)
    strategy = MMTAD(draft, k, width, threshold, denominator)
    result = sampled_run(target, prompt, strategy, max_new_tokens, sampler, seed)
    assert result.tokens.shape == (1, max_new_tokens)
    check_multi_candidate_rule(target, prompt, result, strategy, sampler)


@pytest.mark.parametrize("sampler", [Sampler(0.0), Sampler(1.0, top_k=10, top_p=0.9)], ids=["greedy", "paper"])
@pytest.mark.parametrize("denominator, kind", [("heaviest", "noisy"), ("largest", "noisy"), ("heaviest", "head")])
def test_every_row_of_a_ragged_mmtad_batch_follows_the_rule(sampler, denominator, kind):
    target, draft = pair(16, kind)
    prompts = [[1, 2, 3, 4, 5], [6], [7, 8, 9]]
    strategy = MMTAD(draft, 4, 4, 0.3 if kind == "noisy" else 0.05, denominator)
    result = mtdecode.generate(target, prompts, strategy, max_new_tokens=14, seed=2, temperature=sampler.temperature,
                               top_k=sampler.top_k, top_p=sampler.top_p)  # fmt: skip
    check_multi_candidate_rule(target, prompts, result, strategy, sampler)
    assert {step.row for step in result.steps if step.accepted} == {0, 1, 2}  # every row accepted some block
    assert max(len(step.candidates) for step in result.steps) == 4


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_with_one_beam_mmtad_is_mtad_step_for_step(temperature):
    target, draft = pair(16, "noisy")
    prompts = [[1, 2, 3], [4, 5, 6, 7, 8]]
    runs = [
        mtdecode.generate(target, prompts, strategy, max_new_tokens=16, temperature=temperature, seed=5)
        for strategy in (MTAD(draft, 3, beam_width=1), MMTAD(draft, 3, beam_width=1))
    ]
    assert runs[0].tokens.tolist() == runs[1].tokens.tolist()
    assert [s.accepted for s in runs[0].steps] == [s.accepted for s in runs[1].steps]


@pytest.mark.parametrize("vocab, k", [(4, 2), (4, 3), (5, 2)])
@pytest.mark.parametrize("prompt", [[1], [2, 0, 3]])
def test_with_the_target_as_draft_and_exhaustive_beams_greedy_mmtad_accepts_the_most_likely_block(vocab, k, prompt):
    target = tiny_model("llama", vocab_size=vocab, seed=7)
    strategy = MMTAD(target, k, beam_width=vocab**k)  # every block of k tokens is a beam
    result = mtdecode.generate(target, prompt, strategy, max_new_tokens=k + 1)
    check_multi_candidate_rule(target, prompt, result, strategy, Sampler(0.0))
    first = result.steps[0]
    assert first.accepted == k and list(first.tokens[:k]) == oracle.most_likely_block(target, prompt, k)


# ---- MMTAD's mutants: each breaks the rule; the rule check must catch it

ACCEPT = mmtad.accept  # the real rule, which a mutant may start from


def shallowest(log_p, beams, threshold, denominator):
    """Wrong: the shallowest depth at which a beam passes instead of the deepest."""
    n, winner, ratio = ACCEPT(log_p, beams, threshold, denominator)
    passing = _passing(log_p, beams, threshold)
    first = passing.any(1).long().argmax(1) + 1
    at = (first - 1).clamp(min=0)
    rows = torch.arange(log_p.shape[0])
    winner = torch.where(passing[rows, :, at], log_p.cumsum(2)[rows, :, at], -torch.inf).argmax(1)
    return mmtad.Outcome(torch.where(n > 0, first, 0), torch.where(n > 0, winner, 0), ratio)


def heaviest_wins(log_p, beams, threshold, denominator):
    """Wrong: the heaviest beam (by q) wins at the accepted depth, passing or not, instead of the largest P."""
    n, _, ratio = ACCEPT(log_p, beams, threshold, denominator)
    return mmtad.Outcome(n, beams.heaviest, ratio)


def stops_at_first_failure(log_p, beams, threshold, denominator):
    """Wrong: MTAD's prefix rule on the heaviest beam alone, with the others verified for nothing."""
    passing = _passing(log_p, beams, threshold)[torch.arange(log_p.shape[0]), beams.heaviest]  # (batch, k)
    n = torch.where(passing.any(1), passing.shape[1] - passing.flip(1).long().argmax(1), 0)
    return mmtad.Outcome(n, beams.heaviest, torch.zeros(log_p.shape[0], dtype=torch.float64))


def _passing(log_p, beams, threshold):
    rows = torch.arange(log_p.shape[0])
    ratio = log_p.cumsum(2) - beams.log_q.cumsum(2)[rows, beams.heaviest][:, None, :]
    within = torch.arange(log_p.shape[2]) < beams.k[:, None]
    return (ratio > math.log(threshold)) & within[:, None, :] & (beams.tokens >= 0)


@pytest.mark.parametrize("mutant", [shallowest, heaviest_wins, stops_at_first_failure], ids=lambda m: m.__name__)
def test_the_multi_candidate_check_catches_a_wrong_rule(monkeypatch, mutant):
    monkeypatch.setattr(mmtad, "accept", mutant)
    target, draft = pair(8, "other")
    strategy = MMTAD(draft, 4, 4, 0.3)
    check = functools.partial(check_multi_candidate_rule, target, [1, 2, 3], strategy=strategy, sampler=Sampler(1.0))
    assert caught(target, strategy, lambda result: check(result=result)), (
        f"the {mutant.__name__} mutant went unnoticed in 10 runs"
    )


def test_the_check_tells_the_two_denominators_apart():
    """A run with one denominator fails the other's check on some run: the check reads the denominator."""
    target, draft = pair(16, "noisy")
    for run, other in [("largest", "heaviest"), ("heaviest", "largest")]:
        strategy, checked = MMTAD(draft, 4, 4, 0.5, run), MMTAD(draft, 4, 4, 0.5, other)
        check = functools.partial(check_multi_candidate_rule, target, [1, 2, 3], strategy=checked, sampler=Sampler(1.0))
        assert caught(target, strategy, lambda result, check=check: check(result=result)), (
            f"runs with the {run} block's Q all passed the check for the {other}'s"
        )


# ---- q from a feature head


@pytest.mark.parametrize("sampler", [Sampler(0.0), Sampler(1.0, top_k=10, top_p=0.9)], ids=["greedy", "paper"])
def test_every_row_of_a_ragged_mtad_batch_with_a_head_as_q_follows_the_rule(sampler):
    """The head's q while drafting (cached, batched, beams as a tree) is the q of plain forwards: every accepted
    block's recorded log P/Q is the recomputed one, and the rule holds, row by row."""
    target, head = pair(16, "head")
    prompts = [[1, 2, 3, 4, 5], [6], [7, 8, 9]]
    result = mtdecode.generate(target, prompts, MTAD(head, 4, 3, 0.01), max_new_tokens=20, seed=2,
                               temperature=sampler.temperature, top_k=sampler.top_k, top_p=sampler.top_p)  # fmt: skip
    check_threshold_rule(target, head, prompts, result, 0.01, sampler)
    assert sum(step.accepted > 1 for step in result.steps) >= 3  # blocks deeper than the head's first guess


def fed_the_root(self, fed):
    """Wrong: every depth's tokens fed with the root's feature instead of their parent's predicted one."""
    return REAL_CHILDREN(self, fed._replace(previous=torch.full_like(fed.previous, -1)))


def keeps_the_beams(self, path):
    """Wrong: the head keeps the accepted beam entries, made from its own predicted features, as its context."""
    self.runner.cache.keep(path)


REAL_CHILDREN = HeadQ.children


@pytest.mark.parametrize("method, mutant", [("children", fed_the_root), ("keep", keeps_the_beams)],
                         ids=["fed_the_root", "keeps_the_beams"])  # fmt: skip
def test_the_rule_check_catches_a_head_that_drafts_from_the_wrong_features(monkeypatch, method, mutant):
    monkeypatch.setattr(HeadQ, method, mutant)
    target, head = pair(16, "head")
    check = functools.partial(check_threshold_rule, target, head, [1, 2, 3], threshold=0.01, sampler=Sampler(1.0))
    assert caught(target, MTAD(head, 4, 3, 0.01), lambda result: check(result=result)), (
        f"the {mutant.__name__} mutant went unnoticed in 10 runs"
    )


def test_a_head_as_q_needs_a_fixed_block():
    _, head = pair(16, "head")
    with pytest.raises(ValueError, match="needs num_draft_tokens"):
        MTAD(head)
    assert MTAD(head, 4).num_draft_tokens == 4
