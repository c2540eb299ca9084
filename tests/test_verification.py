"""The multi-candidate verifier shared by Jacobi, prompt lookup and lookahead decoding.

Greedy: one-hot p gives the longest matching prefix plus the target's token, also after a
full match (the public lookahead code drops that bonus token). Sampling: the output
matches the exact distribution at a false-alarm rate of 1e-3
(`mtdecode.testing.verifier`), and the same test rejects three wrong verifiers.
"""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from mtdecode import verification
from mtdecode.sampling import RowRandom, Sampler, draw
from mtdecode.testing.verifier import check_one_hot_verifier
from mtdecode.verification import Verdict, verify_candidates

FALSE_ALARM = 1e-3


def one_hot(token: int, vocab: int = 8) -> torch.Tensor:
    return torch.nn.functional.one_hot(torch.tensor(token), vocab).double()


@pytest.mark.parametrize(
    "candidates, accepted, tokens, best",
    [
        ([[3, 1], [5, 6]], 2, [5, 6, 7], 1),  # a full match, then the bonus token
        ([[5, 2], [5, 6]], 2, [5, 6, 7], 1),  # the second candidate sharing 5 wins at position 2
        ([[5, 2]], 1, [5, 6], 0),  # rejected at position 2: the target's token instead
        ([[1, 2]], 0, [5], 0),
        ([[5, -1], [5, 6]], 2, [5, 6, 7], 1),  # a shorter candidate (padded with -1) ends where it ends
        ([[5, -1]], 1, [5, 6], 0),  # accepted to its end: the bonus token after it
        ([], 0, [5], -1),
    ],
)
def test_greedy_takes_the_longest_matching_prefix_and_the_next_token(candidates, accepted, tokens, best):
    """The target's greedy text is 5, 6, 7: after x0 it says 5, after 5 it says 6, after 5 6 it says 7."""
    rows = torch.tensor(candidates, dtype=torch.long).reshape(1, len(candidates), 2)
    after = torch.stack([torch.stack([one_hot(6), one_hot(7)]) for _ in candidates]) if candidates else None
    after = after if after is not None else torch.empty(0, 2, 8, dtype=torch.float64)
    verdict = verify_candidates(one_hot(5)[None], after[None], rows, RowRandom([0]))
    assert (verdict.candidate.item(), verdict.accepted.item()) == (best, accepted)
    assert verdict.tokens[0, : accepted + 1].tolist() == tokens


def test_rows_are_verified_each_on_their_own():
    """Two rows with other candidates in one call give what each gives alone."""
    after = torch.stack([torch.stack([one_hot(6), one_hot(7)])] * 2)[None].expand(2, -1, -1, -1)
    candidates = torch.tensor([[[3, 1], [5, 6]], [[5, 2], [-1, -1]]])
    verdict = verify_candidates(one_hot(5)[None].expand(2, -1), after, candidates, RowRandom([0, 1]))
    assert verdict.accepted.tolist() == [2, 1] and verdict.candidate.tolist() == [1, 0]
    assert verdict.tokens[0].tolist() == [5, 6, 7] and verdict.tokens[1, :2].tolist() == [5, 6]


def test_the_real_verifier_preserves_the_distribution():
    result = check_one_hot_verifier(verify_candidates, false_alarm=FALSE_ALARM)
    assert result.passed, str(result)


# ---- mutants: each breaks one step of the rule; the same test must reject it


def keep_rejected(p, proposals, random):
    """Wrong step 1: after rejecting x, keep p as it is instead of removing x and renormalising."""
    chosen = torch.full((p.shape[0],), -1)
    for c in range(proposals.shape[1]):
        x = proposals[:, c]
        trying = (x >= 0) & (chosen < 0) & ~(proposals[:, :c] == x[:, None]).any(1)
        u = random.uniform(trying.long())[:, 0]
        chosen = torch.where(trying & (u < p.gather(1, x.clamp(min=0)[:, None])[:, 0]), x, chosen)
    return chosen, p


def candidate_zero(after, alive, k):
    """Wrong step 2: after accepting x, continue with candidate 0's row even if it proposed another token."""
    return after[:, 0, k].double()


def stale_bonus(first, after, candidates, random, rows=None):
    """Wrong step 4: the bonus token after a full match is drawn from the row before the last token."""
    verdict = verify_candidates(first, after, candidates, random, rows)
    full = verdict.accepted == candidates.shape[2]
    stale = after[torch.arange(after.shape[0]), verdict.candidate.clamp(min=0), -2]
    bonus = draw(stale, random, rows=full)
    tokens = verdict.tokens.clone()
    tokens[full, -1] = bonus[full]
    return Verdict(verdict.candidate, verdict.accepted, tokens)


@pytest.mark.parametrize("mutant", ["keep_rejected", "candidate_zero", "stale_bonus"])
def test_the_check_rejects_a_wrong_verifier(mutant, monkeypatch):
    verify = verification.verify_candidates
    if mutant == "keep_rejected":
        monkeypatch.setattr(verification, "try_proposals", keep_rejected)
    elif mutant == "candidate_zero":
        monkeypatch.setattr(verification, "p_after", candidate_zero)
    else:
        verify = stale_bonus
    result = check_one_hot_verifier(verify, false_alarm=FALSE_ALARM)
    assert not result.passed, f"the {mutant} mutant went unnoticed: {result}"


@given(data=st.data())
def test_the_greedy_shortcut_gives_the_verdict_of_the_general_rule(data):
    """`verify_greedy` on the target's tokens == `verify_candidates` on one-hot p: same candidate, count, tokens,
    and the same use of every row's random stream. A vocabulary of 4 makes matches, ties between candidates and
    repeated proposals common; -1 pads candidates; some rows do not take part."""
    batch, count, length = data.draw(st.integers(1, 3)), data.draw(st.integers(0, 3)), data.draw(st.integers(1, 3))
    _check_greedy_shortcut(data, batch, count, length)


@given(data=st.data())
def test_the_greedy_shortcut_for_one_chain_gives_the_verdict_of_the_general_rule(data):
    """The same for one candidate per row (speculative decoding, prompt lookup), which takes its own path: longer
    chains whose guesses copy the target's tokens for a drawn number of positions, then anything (-1 too)."""
    batch, length = data.draw(st.integers(1, 4)), data.draw(st.integers(0, 8))
    _check_greedy_shortcut(data, batch, 1, length, agree=True)


def _check_greedy_shortcut(data, batch: int, count: int, length: int, agree: bool = False) -> None:
    vocab = 4
    token = st.integers(0, vocab - 1)
    first = torch.tensor(data.draw(st.lists(token, min_size=batch, max_size=batch)), dtype=torch.long)
    size = batch * count * length
    after = torch.tensor(data.draw(st.lists(token, min_size=size, max_size=size)), dtype=torch.long)
    after = after.reshape(batch, count, length)
    proposed = st.integers(-1, vocab - 1)
    candidates = torch.tensor(data.draw(st.lists(proposed, min_size=size, max_size=size)), dtype=torch.long)
    candidates = candidates.reshape(batch, count, length)
    if agree:  # candidate 0 proposes the target's own tokens for its first `agreeing` positions
        agreeing = torch.tensor(data.draw(st.lists(st.integers(0, length), min_size=batch, max_size=batch)))
        targets = torch.cat([first[:, None], after[:, 0, :-1]], dim=1)[:, :length]  # the target's token at each
        copy = torch.arange(length) < agreeing[:, None]
        candidates[:, 0] = torch.where(copy, targets, candidates[:, 0])
    rows = torch.tensor(data.draw(st.lists(st.booleans(), min_size=batch, max_size=batch)), dtype=torch.bool)
    hot = torch.nn.functional.one_hot
    seeds = list(range(batch))
    general_random, greedy_random = RowRandom(seeds), RowRandom(seeds)
    p_first, p_after = hot(first, vocab).double(), hot(after, vocab).double()
    general = verify_candidates(p_first, p_after, candidates, general_random, rows)
    greedy = verification.verify_greedy(first, after, candidates, greedy_random, rows)
    drawing = rows.nonzero()[:, 0]
    assert torch.equal(general.candidate[drawing], greedy.candidate[drawing])
    assert torch.equal(general.accepted[drawing], greedy.accepted[drawing])
    for b in drawing.tolist():
        n = int(general.accepted[b]) + 1
        assert general.tokens[b, :n].tolist() == greedy.tokens[b, :n].tolist()
    assert torch.equal(general_random.uniform(torch.ones(batch, dtype=torch.long)),
                       greedy_random.uniform(torch.ones(batch, dtype=torch.long)))  # fmt: skip


@given(data=st.data(), temperature=st.sampled_from([0.0, 1.0]))
def test_a_tree_verified_from_its_fed_positions_gets_the_verdict_of_its_gathered_logits(data, temperature):
    """`verify_fed` (EAGLE's tree: the target's tokens read once per fed position, then gathered) == `verify_logits`
    on a copy of the logits for every candidate's every token: the same verdict and the same use of the random
    streams, greedy and sampled. Logits of small integers make ties common (argmax keeps the first)."""
    batch, fed, count, length = (data.draw(st.integers(1, 3)) for _ in range(4))
    vocab = 4
    numbers = st.lists(st.integers(0, 2), min_size=batch * fed * vocab, max_size=batch * fed * vocab)
    logits = torch.tensor(data.draw(numbers), dtype=torch.float32).reshape(batch, fed, vocab)
    size = batch * count * length
    after_at = torch.tensor(data.draw(st.lists(st.integers(0, fed - 1), min_size=size, max_size=size)))
    after_at = after_at.reshape(batch, count, length)
    candidates = torch.tensor(data.draw(st.lists(st.integers(-1, vocab - 1), min_size=size, max_size=size)))
    candidates = candidates.reshape(batch, count, length)
    sampler = Sampler(temperature=temperature)
    seeds = list(range(batch))
    gathered_random, fed_random = RowRandom(seeds), RowRandom(seeds)
    after = logits[torch.arange(batch)[:, None, None], after_at]  # (batch, candidate, length, vocab)
    gathered = verification.verify_logits(sampler, logits[:, 0], after, candidates, gathered_random)
    from_fed = verification.verify_fed(sampler, logits, after_at, candidates, fed_random)
    assert torch.equal(gathered.candidate, from_fed.candidate) and torch.equal(gathered.accepted, from_fed.accepted)
    for b in range(batch):
        n = int(gathered.accepted[b]) + 1
        assert gathered.tokens[b, :n].tolist() == from_fed.tokens[b, :n].tolist()
    ones = torch.ones(batch, dtype=torch.long)
    assert torch.equal(gathered_random.uniform(ones), fed_random.uniform(ones))
