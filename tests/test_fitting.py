import numpy as np
import pandas as pd
import pytest

from toymodels.fitting import alpha_interval, fit_depth_exponents, fit_power_law, fit_power_law_with_floor, \
    local_slopes

DEPTHS = np.array([2, 4, 8, 16, 32, 64])


def synthetic_metrics(alpha, replicates=3, noise=0.05, floor=0.0, steps=(100, 900, 1000), seed=0):
    """Tidy metrics of a fake run whose final losses follow c·ℓ^(−α)·noise (+ floor)."""
    rng = np.random.default_rng(seed)
    rows = []
    for replicate in range(replicates):
        for depth in DEPTHS:
            final = (2.0 * depth**-alpha + floor) * np.exp(noise * rng.standard_normal())
            for step in steps:
                rows.append(dict(teacher="tied", replicate=replicate, temperature=1.0, depth=depth, step=step,
                                 train_loss=final, test_loss=final * (4 if step < 0.9 * steps[-1] else 1)))
    return pd.DataFrame(rows)


@pytest.mark.parametrize("alpha", [0.8, 1.0, 2.0, 3.0])
def test_fit_recovers_a_known_exponent(alpha):
    (fit,) = fit_depth_exponents(synthetic_metrics(alpha))
    assert fit.alpha == pytest.approx(alpha, abs=0.05)
    assert fit.alpha_low < alpha < fit.alpha_high
    assert fit.replicates == 3 and fit.interval.startswith("bootstrap")
    assert fit.converged


def test_interval_narrows_with_less_noise():
    noisy, = fit_depth_exponents(synthetic_metrics(1.0, noise=0.2))
    clean, = fit_depth_exponents(synthetic_metrics(1.0, noise=0.01))
    assert clean.alpha_high - clean.alpha_low < noisy.alpha_high - noisy.alpha_low


def test_one_replicate_falls_back_to_the_regression_interval():
    log_losses = np.log(2.0 * DEPTHS**-1.5 * np.exp(0.05 * np.random.default_rng(0).standard_normal(6)))
    low, high, method = alpha_interval(DEPTHS, log_losses[None, :])
    assert method.startswith("regression") and low < 1.5 < high


def test_local_slopes_show_a_bend():
    losses = np.where(DEPTHS < 10, 1.0 * DEPTHS**-3.0, 1.0 * 8**-2.0 * DEPTHS**-1.0)
    slopes = local_slopes(DEPTHS, losses)
    assert slopes[0] == pytest.approx(3.0) and slopes[-1] == pytest.approx(1.0)


def test_fit_with_floor_recovers_exponent_and_floor():
    losses = 2.0 * DEPTHS**-2.0 + 1e-3
    result = fit_power_law_with_floor(DEPTHS, losses)
    assert result["alpha"] == pytest.approx(2.0, abs=0.05)
    assert result["floor"] == pytest.approx(1e-3, rel=0.05)
    assert fit_power_law(DEPTHS, losses)[0] < 1.9  # the plain fit is biased low by the floor


def test_still_falling_losses_are_flagged():
    metrics = synthetic_metrics(1.0, steps=(100, 500, 1000))  # test loss 4× higher at step 500...
    metrics.loc[metrics.step == 500, "step"] = 900  # ...moved to 90 %: still falling fast at the end
    (fit,) = fit_depth_exponents(metrics)
    assert not fit.converged and fit.not_converged_depths == DEPTHS.tolist()


def test_alpha_over_training_is_reported_per_step():
    (fit,) = fit_depth_exponents(synthetic_metrics(2.0, noise=0.0))
    assert [step for step, _ in fit.alpha_over_training] == [100, 900, 1000]
    assert fit.alpha_over_training[-1][1] == pytest.approx(2.0)


def test_depth_range_restricts_the_fit():
    (fit,) = fit_depth_exponents(synthetic_metrics(1.0), min_depth=8, max_depth=32)
    assert fit.depths == [8, 16, 32]
