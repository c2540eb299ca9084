"""Statistical goodness-of-fit checks with a stated false-alarm rate.

`chi_square_test(counts, probs, false_alarm=1e-3)` asks whether `counts`, drawn
independently from some distribution, could come from `probs`.

**The test.** Pearson's statistic X² = Σ (observed - expected)² / expected over the
cells, compared with the chi-square distribution with (cells - 1) degrees of freedom.
Cells expected to hold fewer than 5 draws are pooled into one cell first, because
the chi-square approximation is only good when every cell expects at least ~5.
A draw in a cell of probability 0 fails at once (that outcome is impossible).

**False-alarm rate.** If the draws really come from `probs`, the test rejects with
probability `false_alarm` (up to the chi-square approximation, which pooling keeps
accurate; `tests/test_stats.py` measures the rate on simulated data). A failing
test therefore means either a wrong sampler or a 1-in-1/`false_alarm` accident; the
seeds in the suite are fixed, so an accident would show on every run, never flakily.
"""

from dataclasses import dataclass

import torch

from mtdecode.tensor_types import Float, Int, Tensor

MIN_EXPECTED = 5.0


@dataclass(frozen=True)
class GoodnessOfFit:
    """Outcome of `chi_square_test`."""

    statistic: float
    dof: int
    p_value: float
    false_alarm: float
    impossible_draws: int

    @property
    def passed(self) -> bool:
        return self.impossible_draws == 0 and self.p_value > self.false_alarm

    def __str__(self) -> str:
        return (
            f"X²={self.statistic:.2f} on {self.dof} dof, p={self.p_value:.3g} "
            f"(false-alarm rate {self.false_alarm:g}), draws in impossible cells: {self.impossible_draws}"
        )


def chi_square_test(
    counts: Int[Tensor, " cells"] | Float[Tensor, " cells"],
    probs: Float[Tensor, " cells"],
    *,
    false_alarm: float = 1e-3,
) -> GoodnessOfFit:
    """Pearson's chi-square test of `counts` against the distribution `probs`.

    **Arguments:**

    - `counts`: how many draws fell in each cell.
    - `probs`: the claimed probability of each cell (sums to 1).
    - `false_alarm`: the probability of rejecting when `counts` really come from `probs`.

    **Returns:**

    A `GoodnessOfFit`; `.passed` is the verdict.

    **Raises:** `ValueError` if there are too few draws for the test to say anything.
    """
    # n probabilities, each rounded a few times, summed: within a few n u of 1 (u of the dtype they came in,
    # eps = 2u); 4 n u allows for each cell's own rounding and the sum's (Higham, Lemma 3.1)
    sum_tolerance = 2 * probs.numel() * torch.finfo(probs.dtype).eps
    counts = counts.double().flatten().cpu()
    probs = probs.double().flatten().cpu()
    if counts.shape != probs.shape:
        raise ValueError(f"counts has {counts.numel()} cells but probs has {probs.numel()}")
    if not abs(float(probs.sum()) - 1.0) <= sum_tolerance:
        raise ValueError(f"probs must sum to 1, got {probs.sum().item():.8f}")
    total = counts.sum()
    impossible = int(counts[probs <= 0].sum())
    expected = probs * total
    big = expected >= MIN_EXPECTED
    # pool the small cells into one, so that every cell expects enough draws
    obs = torch.cat([counts[big], counts[~big].sum()[None]])
    exp = torch.cat([expected[big], expected[~big].sum()[None]])
    if exp[-1] < MIN_EXPECTED:  # the pooled cell is itself too small: fold it into the smallest big cell
        if big.any():
            smallest = int(torch.argmin(exp[:-1]))
            obs[smallest] += obs[-1]
            exp[smallest] += exp[-1]
        obs, exp = obs[:-1], exp[:-1]
    keep = exp > 0
    obs, exp = obs[keep], exp[keep]
    if obs.numel() < 2:
        raise ValueError(
            f"{int(total)} draws are too few to test: fewer than two cells expect {MIN_EXPECTED:g} or more draws"
        )
    statistic = float(((obs - exp) ** 2 / exp).sum())
    dof = int(obs.numel()) - 1
    return GoodnessOfFit(statistic, dof, chi_square_sf(statistic, dof), false_alarm, impossible)


def assert_matches(
    counts: Int[Tensor, " cells"] | Float[Tensor, " cells"],
    probs: Float[Tensor, " cells"],
    *,
    false_alarm: float = 1e-3,
) -> GoodnessOfFit:
    """Assert that `counts` pass `chi_square_test` against `probs`; return the result."""
    result = chi_square_test(counts, probs, false_alarm=false_alarm)
    assert result.passed, f"sampled counts do not match the distribution: {result}"
    return result


def chi_square_sf(statistic: float, dof: int) -> float:
    """P(X > statistic) for X ~ chi-square(dof): the regularised upper incomplete gamma function."""
    return float(
        torch.special.gammaincc(
            torch.tensor(dof / 2.0, dtype=torch.float64), torch.tensor(statistic / 2.0, dtype=torch.float64)
        )
    )


def chi_square_critical(dof: int, false_alarm: float) -> float:
    """The statistic above which a chi-square(dof) test at `false_alarm` rejects (by bisection)."""
    low, high = 0.0, float(dof) + 100.0 * (dof + 10) ** 0.5 + 1000.0
    for _ in range(200):
        middle = (low + high) / 2
        low, high = (middle, high) if chi_square_sf(middle, dof) > false_alarm else (low, middle)
    return high


def noncentral_chi_square_sf(x: float, dof: int, noncentrality: float) -> float:
    """P(X > x) for X ~ noncentral chi-square(dof, noncentrality): a Poisson(noncentrality / 2) mixture of
    central chi-squares with dof + 2j degrees of freedom."""
    half = noncentrality / 2.0
    j = torch.arange(0, int(half + 12 * half**0.5 + 60), dtype=torch.float64)
    log_weights = -half + j * torch.log(torch.tensor(max(half, 1e-300), dtype=torch.float64)) - torch.lgamma(j + 1)
    tails = torch.special.gammaincc((dof + 2 * j) / 2.0, torch.tensor(x / 2.0, dtype=torch.float64))
    return float((log_weights.exp() * tails).sum())


def detectable_tv(samples: int, dof: int, false_alarm: float, power: float = 0.99) -> float:
    """The smallest total-variation distance a chi-square test on `samples` draws detects with probability `power`.

    Against a law p' at chi-square divergence D from the claimed p, Pearson's statistic is close to
    a noncentral chi-square with noncentrality samples x D (the standard large-sample approximation),
    and D >= 4 TV^2 (Cauchy-Schwarz). So every law at total variation >= epsilon gives a noncentrality
    of at least 4 samples epsilon^2; this returns the epsilon at which that noncentrality reaches the
    wanted power. The distance is measured on the test's cells (after pooling the small ones).
    """
    critical = chi_square_critical(dof, false_alarm)
    low, high = 0.0, 4.0 * samples  # noncentrality: at TV = 1 it is 4 x samples
    for _ in range(100):
        middle = (low + high) / 2
        low, high = (middle, high) if noncentral_chi_square_sf(critical, dof, middle) < power else (low, middle)
    return min(1.0, (high / (4 * samples)) ** 0.5)
