"""The multi-candidate verifier shared by Jacobi, prompt lookup and lookahead decoding.

Greedy: one-hot p gives the longest matching prefix plus the target's token, also after a
full match (the public lookahead code drops that bonus token). Sampling: the output
matches the exact distribution at a false-alarm rate of 1e-3
(`mtdecode.testing.verifier`), and the same test rejects three wrong verifiers.
"""

import pytest
import torch

from mtdecode import verification
from mtdecode.sampling import draw
from mtdecode.testing.verifier import check_one_hot_verifier
from mtdecode.verification import Verdict, try_proposals, verify_candidates

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
        ([], 0, [5], -1),
    ],
)
def test_greedy_takes_the_longest_matching_prefix_and_the_next_token(candidates, accepted, tokens, best):
    """The target's greedy text is 5, 6, 7: after x0 it says 5, after 5 it says 6, after 5 6 it says 7."""
    rows = torch.tensor(candidates, dtype=torch.long).reshape(len(candidates), 2)
    after = torch.stack([torch.stack([one_hot(6), one_hot(7)]) for _ in candidates]) if candidates else None
    after = after if after is not None else torch.empty(0, 2, 8, dtype=torch.float64)
    verdict = verify_candidates(one_hot(5), after, rows, torch.Generator().manual_seed(0))
    assert verdict == Verdict(best, accepted, tokens)


def test_the_real_verifier_preserves_the_distribution():
    result = check_one_hot_verifier(verify_candidates, false_alarm=FALSE_ALARM)
    assert result.passed, str(result)


# ---- mutants: each breaks one step of the rule; the same test must reject it


def keep_rejected(p, proposals, generator):
    """Wrong step 1: after rejecting x, keep p as it is instead of removing x and renormalising."""
    for x in dict.fromkeys(proposals):
        if float(torch.rand((), generator=generator, dtype=torch.float64)) < float(p[x]):
            return x, p
    return None, p


def no_filter(first, after, candidates, generator):
    """Wrong step 2: after accepting x, continue with candidate 0's row even if it proposed another token."""
    guesses, p, accepted = candidates.tolist(), first, []
    for k in range(candidates.shape[1]):
        x, p = try_proposals(p, [g[k] for g in guesses], generator)
        if x is None:
            return Verdict(0, k, accepted + [int(draw(p, generator))])
        accepted.append(x)
        p = after[0, k]
    return Verdict(0, len(accepted), accepted + [int(draw(p, generator))])


def stale_bonus(first, after, candidates, generator):
    """Wrong step 4: the bonus token after a full match is drawn from the row before the last token."""
    verdict = verify_candidates(first, after, candidates, generator)
    if verdict.accepted == candidates.shape[1]:
        stale = after[verdict.candidate, -2]
        return Verdict(verdict.candidate, verdict.accepted, verdict.tokens[:-1] + [int(draw(stale, generator))])
    return verdict


@pytest.mark.parametrize("mutant", ["keep_rejected", "no_filter", "stale_bonus"])
def test_the_check_rejects_a_wrong_verifier(mutant, monkeypatch):
    if mutant == "keep_rejected":
        monkeypatch.setattr(verification, "try_proposals", keep_rejected)
        verify = verification.verify_candidates
    else:
        verify = {"no_filter": no_filter, "stale_bonus": stale_bonus}[mutant]
    result = check_one_hot_verifier(verify, false_alarm=FALSE_ALARM)
    assert not result.passed, f"the {mutant} mutant went unnoticed: {result}"
