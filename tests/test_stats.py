"""The chi-square test's false-alarm rate, measured on simulated data (no model involved)."""

import pytest
import torch

from mtdecode.testing import chi_square_test

POOLED = torch.tensor([0.3, 0.2, 0.15, 0.1, 0.1, 0.05, 0.05, 0.03, 0.015, 0.005], dtype=torch.float64)
#: 12 cells of which 8 expect fewer than 5 draws in 1,000: the pooling path is exercised
SMALL_CELLS = torch.tensor([0.45, 0.3, 0.15, 0.06] + [0.005] * 8, dtype=torch.float64)


@pytest.mark.parametrize("probs", [POOLED, SMALL_CELLS], ids=["larger cells", "pooled small cells"])
def test_false_alarm_rate_is_as_stated(probs):
    """Draw 2,000 data sets of 1,000 draws from the true distribution; at a 5% false-alarm rate
    the test should reject about 100 of them. 4 standard deviations of Binomial(2000, 0.05) is ±39."""
    generator = torch.Generator().manual_seed(0)
    rejections = 0
    for _ in range(2000):
        draws = torch.multinomial(probs, 1000, replacement=True, generator=generator)
        counts = torch.bincount(draws, minlength=len(probs))
        rejections += not chi_square_test(counts, probs, false_alarm=0.05).passed
    assert 61 <= rejections <= 139, rejections


def test_too_few_draws_are_refused():
    with pytest.raises(ValueError, match="too few to test"):
        chi_square_test(torch.tensor([4, 0]), torch.tensor([0.5, 0.5], dtype=torch.float64))


def test_impossible_draws_fail_at_once():
    result = chi_square_test(torch.tensor([50, 49, 1]), torch.tensor([0.5, 0.5, 0.0], dtype=torch.float64))
    assert result.impossible_draws == 1 and not result.passed


def test_a_shifted_distribution_is_rejected():
    counts = torch.tensor([5200, 4800])
    assert not chi_square_test(counts, torch.tensor([0.5, 0.5], dtype=torch.float64)).passed
