"""α's 95 % interval covers the true exponent about 95 % of the time with a few teacher replicates,
on simulated sweeps run through the fit's own interval code; the percentile bootstrap over
replicates it replaced does not."""

import itertools

import numpy as np
import pytest

from toymodels.results.exponents import alpha_interval

DEPTHS = np.array([6, 12, 16, 24, 32, 48])
TRUE_ALPHA, TEACHER_SCATTER, POINT_NOISE = 1.0, 0.1, 0.05
SWEEPS = 4000


def simulated_log_losses(replicates: int, seed=0) -> np.ndarray:
    """(sweeps, replicates, depths): each teacher has its own exponent α + N(0, 0.1²), and each
    final loss its own log-normal noise."""
    rng = np.random.default_rng(seed)
    alphas = TRUE_ALPHA + TEACHER_SCATTER * rng.standard_normal((SWEEPS, replicates, 1))
    return np.log(2.0) - alphas * np.log(DEPTHS) + POINT_NOISE * rng.standard_normal((SWEEPS, replicates, len(DEPTHS)))


def percentile_bootstrap(replicate_alphas: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The old interval at infinitely many resamples: percentiles of α over every resample of
    the replicates (a slope of averaged log losses is the average of the replicates' slopes)."""
    replicates = replicate_alphas.shape[-1]
    resamples = np.array(list(itertools.product(range(replicates), repeat=replicates)))
    alphas = replicate_alphas[:, resamples].mean(axis=-1)
    return np.percentile(alphas, 2.5, axis=1), np.percentile(alphas, 97.5, axis=1)


def coverage(low, high) -> float:
    return float(np.mean((low < TRUE_ALPHA) & (TRUE_ALPHA < high)))


@pytest.mark.parametrize("replicates", [2, 3])
def test_t_interval_covers_the_true_exponent_95_percent_of_the_time(replicates):
    estimate = alpha_interval(DEPTHS, simulated_log_losses(replicates))
    assert estimate.method == f"t over {replicates} teacher replicates"
    assert 0.90 <= coverage(estimate.low, estimate.high) <= 0.98


@pytest.mark.parametrize("replicates, expected", [(2, 0.5), (3, 0.75)])
def test_percentile_bootstrap_over_few_replicates_covers_far_less(replicates, expected):
    estimate = alpha_interval(DEPTHS, simulated_log_losses(replicates))
    bootstrap_coverage = coverage(*percentile_bootstrap(estimate.replicate_alphas))
    assert bootstrap_coverage < 0.85
    assert bootstrap_coverage <= expected + 0.02  # at most 1 − 2·2^(−R): the extreme slopes bound it


def test_one_replicate_regression_interval_misses_the_teacher_scatter():
    """Why the table labels it: it sees only the scatter of the points about one teacher's line."""
    estimate = alpha_interval(DEPTHS, simulated_log_losses(1))
    assert "excludes teacher-to-teacher scatter" in estimate.method
    assert coverage(estimate.low, estimate.high) < 0.85
