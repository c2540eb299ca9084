"""Reusable checks: tiny models, greedy parity, and statistical tests with stated false-alarm rates.

Other projects can use these as the oracle for their own decoders.
"""

from mtdecode.testing.models import FAMILIES, tiny_model
from mtdecode.testing.parity import (
    NearTie,
    assert_greedy_parity,
    first_divergence,
    greedy_tokens,
    hf_greedy_tokens,
)
from mtdecode.testing.stats import GoodnessOfFit, assert_matches, chi_square_test

__all__ = [
    "FAMILIES",
    "GoodnessOfFit",
    "NearTie",
    "assert_greedy_parity",
    "assert_matches",
    "chi_square_test",
    "first_divergence",
    "greedy_tokens",
    "hf_greedy_tokens",
    "tiny_model",
]
