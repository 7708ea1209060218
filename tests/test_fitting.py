import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from toymodels.config import SweepConfig
from toymodels.results.certification import completed
from toymodels.results.depth_fit import DepthFit
from toymodels.results.exponents import (
    alpha_interval,
    deep_end_flattening,
    fit_power_law,
    fit_power_law_with_floor,
    local_slopes,
    regime_verdict,
)
from toymodels.results.fitting import fit_depth_exponents
from toymodels.results.report import (
    Crossing,
    comparison_table,
    crossing_values,
    format_table,
    midway_slope,
)
from toymodels.training.protocol import Protocol

DEPTHS = np.array([2, 4, 8, 16, 32, 64])
STEPS = (100, 900, 1000)


def synthetic_metrics(alpha, replicates=3, noise=0.05, floor=0.0, steps=STEPS, converged=True, seed=0):
    """Tidy metrics of a fake run whose final losses follow c·ℓ^(−α)·noise (+ floor); every
    student converged at its last step, or (converged=False) none did."""
    rng = np.random.default_rng(seed)
    rows = []
    for replicate in range(replicates):
        for depth in DEPTHS:
            final = (2.0 * depth**-alpha + floor) * np.exp(noise * rng.standard_normal())
            for step in steps:
                rows.append(
                    dict(
                        teacher="tied",
                        replicate=replicate,
                        temperature=1.0,
                        depth=depth,
                        step=step,
                        train_loss=final,
                        test_loss=final * (4 if step < 0.9 * steps[-1] else 1),
                        diverged_at_step=np.nan,
                        converged_at_step=steps[-1] if converged else np.nan,
                    )
                )
    return pd.DataFrame(rows)


@pytest.mark.parametrize("alpha", [0.8, 1.0, 2.0, 3.0])
def test_fit_recovers_a_known_exponent(alpha):
    (fit,) = fit_depth_exponents(synthetic_metrics(alpha))
    assert fit.alpha == pytest.approx(alpha, abs=0.05)
    assert fit.alpha_low < alpha < fit.alpha_high
    assert fit.replicates == 3 and fit.interval == "t over 3 teacher replicates"
    assert fit.certified and fit.uncertified_depths == []


def test_alpha_is_the_mean_of_the_replicate_slopes_and_the_slope_of_the_mean():
    (fit,) = fit_depth_exponents(synthetic_metrics(1.5, noise=0.2))
    assert len(fit.replicate_alphas) == 3 and len(set(fit.replicate_alphas)) == 3
    assert fit.alpha == pytest.approx(np.mean(fit.replicate_alphas))
    assert fit.alpha == pytest.approx(fit_power_law(fit.depths, fit.losses)[0])


def test_interval_is_t_over_the_replicate_slopes():
    (fit,) = fit_depth_exponents(synthetic_metrics(1.0, noise=0.2))
    half = 4.302653 * np.std(fit.replicate_alphas, ddof=1) / np.sqrt(3)  # t_{0.975, 2}
    assert (fit.alpha_low, fit.alpha_high) == pytest.approx((fit.alpha - half, fit.alpha + half))


def test_interval_narrows_with_less_noise():
    (noisy,) = fit_depth_exponents(synthetic_metrics(1.0, noise=0.2))
    (clean,) = fit_depth_exponents(synthetic_metrics(1.0, noise=0.01))
    assert clean.alpha_high - clean.alpha_low < noisy.alpha_high - noisy.alpha_low


def test_one_replicate_falls_back_to_the_regression_interval():
    log_losses = np.log(2.0 * DEPTHS**-1.5 * np.exp(0.05 * np.random.default_rng(0).standard_normal(6)))
    estimate = alpha_interval(DEPTHS, log_losses[None, :])
    assert estimate.method.startswith("regression") and "excludes teacher-to-teacher scatter" in estimate.method
    assert estimate.low < 1.5 < estimate.high
    assert estimate.high - estimate.low < 0.5  # the regression's error, not a NaN or an infinite interval


def test_one_replicate_at_two_depths_has_no_interval():
    estimate = alpha_interval(DEPTHS[:2], np.log(DEPTHS[:2] ** -1.0)[None, :])
    assert estimate.alpha == pytest.approx(1.0) and np.isnan(estimate.low) and np.isnan(estimate.high)


def test_local_slopes_show_a_bend():
    losses = np.where(DEPTHS < 10, 1.0 * DEPTHS**-3.0, 1.0 * 8**-2.0 * DEPTHS**-1.0)
    slopes = local_slopes(DEPTHS, losses)
    assert slopes[0] == pytest.approx(3.0) and slopes[-1] == pytest.approx(1.0)


def bent_metrics():
    """Noiseless losses with α = 3 up to ℓ = 8 and α = 1 from there on."""
    metrics = synthetic_metrics(1.0, noise=0.0)
    shallow = metrics.depth < 8
    metrics.loc[shallow, "test_loss"] *= (metrics.depth[shallow] / 8.0) ** -2.0
    return metrics.assign(train_loss=metrics.test_loss)  # students that test as they train


def test_depth_windows_show_a_bend():
    (fit,) = fit_depth_exponents(bent_metrics())
    assert fit.window_alpha_min == pytest.approx(1.0) and fit.window_alpha_max == pytest.approx(3.0)
    assert fit.window_alpha_min < fit.alpha < fit.window_alpha_max


def flattening_metrics(noise=0.05):
    """Losses whose local slope falls from 2 to about 0.5 at the deep end, as a floor makes it:
    α over all depths lands below 2, where a straight law would read as the ensemble regime."""
    metrics = synthetic_metrics(2.0, noise=noise)
    metrics["test_loss"] += 2.0 * 16.0**-2.0  # a floor reached near ℓ = 16
    return metrics.assign(train_loss=metrics.test_loss)


def test_a_curve_flattening_at_the_deep_end_is_not_called_ensemble():
    (fit,) = fit_depth_exponents(flattening_metrics())
    assert fit.certified and fit.alpha_high < 2
    assert fit.regime.startswith("undetermined (the deep end flattens: local slopes")
    (straight,) = fit_depth_exponents(synthetic_metrics(1.0))
    assert straight.regime == "ensemble"


def test_flattening_is_read_only_beyond_the_replicates_scatter():
    log_losses = np.log([[1.0, 0.25, 0.0625], [1.0, 0.25, 0.0625]])  # one straight law, twice
    assert deep_end_flattening([2, 4, 8], log_losses) is None
    noisy = np.log([[1.0, 0.25, 0.2], [1.0, 0.3, 0.05], [1.0, 0.25, 0.07]])  # one flattens, one steepens
    assert deep_end_flattening([2, 4, 8], noisy) is None
    floored = np.log([[1.0, 0.25, 0.2], [1.0, 0.26, 0.21], [1.0, 0.24, 0.19]])
    first, last = deep_end_flattening([2, 4, 8], floored)
    assert first == pytest.approx(2.0, abs=0.1) and last < 0.5


def test_depth_windows_need_three_depths():
    (three,) = fit_depth_exponents(synthetic_metrics(2.0, noise=0.0), max_depth=8)
    assert three.window_alpha_min == pytest.approx(2.0) and three.window_alpha_max == pytest.approx(2.0)
    (two,) = fit_depth_exponents(synthetic_metrics(2.0), max_depth=4)
    assert two.window_alpha_min is None and two.window_alpha_max is None


def test_fit_with_floor_recovers_exponent_and_floor():
    losses = 2.0 * DEPTHS**-2.0 + 1e-3
    result = fit_power_law_with_floor(DEPTHS, losses)
    assert result["alpha"] == pytest.approx(2.0, abs=0.05)
    assert result["floor"] == pytest.approx(1e-3, rel=0.05)
    assert fit_power_law(DEPTHS, losses)[0] < 1.9  # the plain fit is biased low by the floor


def test_students_without_a_convergence_step_are_not_converged():
    metrics = synthetic_metrics(1.0)
    unconverged = metrics.depth.isin([16, 64]) & (metrics.replicate == 1)
    metrics.loc[unconverged, "converged_at_step"] = np.nan
    (fit,) = fit_depth_exponents(metrics)
    assert not fit.certified and fit.uncertified_depths == [16, 64]
    assert fit.regime == "undetermined (not certified: α is a lower bound)"


def test_a_run_without_the_convergence_column_converged_nowhere():
    (fit,) = fit_depth_exponents(synthetic_metrics(1.0).drop(columns="converged_at_step"))
    assert not fit.certified and fit.uncertified_depths == DEPTHS.tolist()


def test_a_falling_loss_does_not_matter_only_the_engines_verdict():
    metrics = synthetic_metrics(1.0, steps=(100, 500, 1000))  # test loss 4× higher at step 500...
    metrics.loc[metrics.step == 500, "step"] = 900  # ...moved to 90 %: fell 75 % over the last 10 %
    (fit,) = fit_depth_exponents(metrics)
    assert fit.certified and fit.regime == "ensemble"


def test_completed_keeps_students_that_stopped_early_because_they_converged_or_diverged():
    metrics = synthetic_metrics(1.0, converged=False)
    stopped = metrics.depth.isin([2, 4]) & (metrics.replicate == 0)
    metrics = metrics[~(stopped & (metrics.step == 1000))].copy()  # last evaluation at step 900
    metrics.loc[stopped & (metrics.depth == 2), "converged_at_step"] = 900
    metrics.loc[stopped & (metrics.depth == 4), "diverged_at_step"] = 900
    kept = completed(metrics, 1000)
    assert len(kept) == len(metrics)
    unfinished = completed(metrics.assign(converged_at_step=np.nan, diverged_at_step=np.nan), 1000)
    assert set(unfinished[unfinished.replicate == 0].depth) == set(DEPTHS) - {2, 4}


@pytest.mark.parametrize(
    "alpha, low, high, converged, order, verdict",
    [
        (1.0, 0.8, 1.2, True, 1, "ensemble"),
        (0.77, 0.72, 0.82, True, 1, "ensemble"),
        (1.2, 1.0, 1.4, True, 1, "ensemble"),
        (3.0, 2.6, 3.4, True, 1, "procedural"),
        (2.4, 2.1, 2.7, True, 1, "procedural"),
        (2.0, 1.9, 2.1, True, 1, "procedural"),  # an Euler student's coherent-error law, certified
        (1.9, 1.45, 2.35, True, 1, "undetermined (between regimes)"),
        (1.9, 0.9, 2.9, True, 1, "undetermined (interval too wide)"),
        (1.0, 0.8, 1.2, False, 1, "undetermined (not certified: α is a lower bound)"),
        (2.0, 0.5, 3.5, True, 1, "undetermined (interval too wide)"),
        (1.0, float("nan"), float("nan"), True, 1, "undetermined (interval too wide)"),
        (1.5, 1.1, 3.2, True, 1, "undetermined (between regimes)"),
        (3.0, 2.6, 3.4, True, 2, "procedural"),  # midpoint rule: the boundary sits at (1 + 4) / 2
        (2.29, 1.96, 2.62, True, 2, "undetermined (between regimes)"),
        (2.0, 1.8, 2.2, True, 2, "ensemble"),
    ],
)
def test_regime_verdict(alpha, low, high, converged, order, verdict):
    assert regime_verdict(alpha, low, high, converged, order=order) == verdict


@pytest.mark.parametrize("alpha, regime", [(1.0, "ensemble"), (3.0, "procedural")])
def test_fit_names_the_regime_of_a_converged_sweep(alpha, regime):
    (fit,) = fit_depth_exponents(synthetic_metrics(alpha))
    assert fit.regime == regime


def test_alpha_over_training_is_reported_per_step():
    (fit,) = fit_depth_exponents(synthetic_metrics(2.0, noise=0.0))
    assert [step for step, *_ in fit.alpha_over_training] == list(STEPS)
    assert fit.alpha_over_training[-1][1] == pytest.approx(2.0)


def test_alpha_over_training_carries_the_final_fits_interval_at_the_end():
    (fit,) = fit_depth_exponents(synthetic_metrics(1.0))
    step, alpha, low, high = fit.alpha_over_training[-1]
    assert (alpha, low, high) == pytest.approx((fit.alpha, fit.alpha_low, fit.alpha_high))
    assert low < alpha < high


def test_alpha_over_training_keeps_students_that_converged_early_at_their_last_loss():
    metrics = bent_metrics()
    deep = metrics.depth >= 16
    metrics.loc[deep, "converged_at_step"] = 900
    metrics = metrics[~(deep & (metrics.step == 1000))]  # they left training at step 900
    (fit,) = fit_depth_exponents(metrics)
    assert fit.certified and fit.alpha < 2.5  # the shallow depths alone would say α = 3
    assert fit.alpha_over_training[-1] == pytest.approx((1000, fit.alpha, fit.alpha_low, fit.alpha_high))


def test_each_start_has_its_own_alpha_over_training_beside_the_best_starts():
    """A zero start trapped at α = 1 while the discretised start reaches α = 3: the fit is the
    best start's, and the zero start's own curve shows the trap."""
    starts = {"zero": 1.0, "discretised": 3.0}
    metrics = pd.concat(
        [
            synthetic_metrics(alpha, noise=0.0).assign(start=start, reference_loss=np.nan)
            for start, alpha in starts.items()
        ]
    )
    (fit,) = fit_depth_exponents(metrics)
    assert fit.alpha == pytest.approx(3.0) and set(fit.best_starts) == {"discretised"}
    assert set(fit.start_alphas_over_training) == set(starts)
    for start, alpha in starts.items():
        assert [step for step, *_ in fit.start_alphas_over_training[start]] == list(STEPS)
        assert fit.start_alphas_over_training[start][-1][1] == pytest.approx(alpha)
    (single,) = fit_depth_exponents(synthetic_metrics(1.0))
    assert single.start_alphas_over_training == {}  # one start: its curve is alpha_over_training


def test_depth_range_restricts_the_fit():
    (fit,) = fit_depth_exponents(synthetic_metrics(1.0), min_depth=8, max_depth=32)
    assert fit.depths == [8, 16, 32]


NEW_FIELDS = ("replicate_alphas", "window_alpha_min", "window_alpha_max", "regime")


def test_fit_json_round_trips_and_old_files_still_load():
    (fit,) = fit_depth_exponents(synthetic_metrics(1.0))
    document = json.loads(json.dumps(fit.as_dict()))
    assert DepthFit.from_dict(document).as_dict() == document
    old = DepthFit.from_dict({key: value for key, value in document.items() if key not in NEW_FIELDS})
    assert old.replicate_alphas == [] and old.window_alpha_min is None and old.regime.startswith("undetermined")
    committed = sorted(Path(__file__).parents[1].glob("figures/*/cpu/fit.json"))
    assert committed and all(
        DepthFit.from_dict(data).alpha == data["alpha"]
        for path in committed
        for data in json.loads(path.read_text())["fits"]
    )


def test_a_fit_without_an_interval_writes_strict_json_and_reads_its_nans_back():
    """One teacher gives no interval (NaN); fit.json holds null there, which a strict reader takes,
    and the fit read back has its NaN again."""
    (fit,) = fit_depth_exponents(synthetic_metrics(1.0))
    fit.alpha_low = fit.alpha_high = fit.mismatch_alpha_low = fit.mismatch_alpha_high = math.nan
    fit.mismatch_alpha = 2.0  # fitted in the step mismatch, without an interval either
    fit.alpha_over_training = [(10, 0.5, math.nan, math.nan)]
    document = json.loads(json.dumps(fit.as_dict(), allow_nan=False))
    assert document["alpha_low"] is None and document["alpha_over_training"] == [[10, 0.5, None, None]]
    back = DepthFit.from_dict(document)
    assert math.isnan(back.alpha_low) and math.isnan(back.alpha_over_training[0][2])
    assert math.isnan(back.mismatch_alpha_low) and back.mismatch_alpha == 2.0


def test_table_shows_regime_windows_and_interval_method():
    fits = fit_depth_exponents(
        pd.concat([synthetic_metrics(1.0), synthetic_metrics(1.0, converged=False).assign(teacher="independent")])
    )
    lines = format_table(fits, Protocol.of(SweepConfig())).splitlines()
    independent = next(i for i, line in enumerate(lines) if line.startswith("independent"))
    assert lines[independent].endswith("undetermined")
    assert lines[independent + 1].strip() == "regime undetermined (not certified: α is a lower bound)"
    tied = next(line for line in lines if line.startswith("tied"))
    assert tied.endswith("ensemble") and f"{fits[1].window_alpha_min:.2f}–{fits[1].window_alpha_max:.2f}" in tied
    assert any(line.startswith("95% interval: t over 3 teacher replicates") for line in lines)


def test_two_architectures_on_the_same_teachers_are_compared_teacher_by_teacher():
    (euler,) = fit_depth_exponents(synthetic_metrics(1.0, noise=0.1, seed=1))
    (other,) = fit_depth_exponents(synthetic_metrics(1.5, noise=0.1, seed=2))
    lines = comparison_table(
        {"regimes (euler)": [euler], "lns (lns)": [other]}, Protocol.of(SweepConfig())
    ).splitlines()
    assert [line.split()[2] for line in lines[1:3]] == ["regimes", "lns"] and "yes" in lines[1]
    differences = np.subtract(other.replicate_alphas, euler.replicate_alphas)
    half = 4.303 * differences.std(ddof=1) / np.sqrt(3)  # t(0.975, 2 degrees of freedom)
    assert (
        f"Δα: lns (lns) − regimes (euler)  {differences.mean():+.2f}  "
        f"[{differences.mean() - half:+.2f}, {differences.mean() + half:+.2f}]" in lines[3]
    )
    (bound,) = fit_depth_exponents(synthetic_metrics(1.5, converged=False))
    lines = comparison_table({"a": [euler], "b": [bound]}, Protocol.of(SweepConfig())).splitlines()
    assert "no: a lower bound" in lines[2] and lines[3].rstrip().endswith("no: bounds only")


@pytest.mark.parametrize(
    "loss, converge, starts, remedy",
    [
        (
            "mse",
            False,
            ("zero",),
            "`toymodels run --config RUN/config.json --converge --steps 400000 --start "
            "zero,discretised` (a budget: students stop as they converge)",
        ),
        (
            "mse",
            True,
            ("zero",),
            "train from the teacher's discretised flow too: `toymodels run --config "
            "RUN/config.json --start zero,discretised`",
        ),
        ("mse", True, ("zero", "discretised"), "raise it: `toymodels run --config RUN/config.json --steps 80000`"),
        (
            "kl",
            True,
            ("zero", "discretised"),
            "from there (the certified preset's protocol): `toymodels run --config "
            "RUN/config.json --converge --steps 40000 --pretrain-loss mse --start trained`",
        ),
        ("kl", True, ("zero", "trained"), "raise it: `toymodels run --config RUN/config.json --steps 80000`"),
    ],
)
def test_table_footer_says_uncertified_alphas_are_lower_bounds_and_how_to_fix_it(loss, converge, starts, remedy):
    fits = fit_depth_exponents(synthetic_metrics(1.0, converged=False))
    config = SweepConfig(
        loss=loss, converge=converge, starts=starts, start_from="elsewhere" if "trained" in starts else None
    )
    footer = [
        line for line in format_table(fits, Protocol.of(config)).splitlines() if line.startswith("not certified:")
    ]
    assert len(footer) == 1 and "lower bounds" in footer[0] and footer[0].endswith(remedy)
    converged = format_table(fit_depth_exponents(synthetic_metrics(1.0)), Protocol.of(config))
    assert "not certified" not in converged


def test_the_crossing_of_a_local_slope_is_linear_between_measured_values_and_a_bound_outside_them():
    table = pd.DataFrame(
        {
            "rho": [0.5, 0.6, 0.8, 1.0],
            "slope 4→8": [1.0, 1.2, 1.8, 2.2],
            "slope 8→16": [1.6, 1.9, 2.0, 2.1],
            "slope 16→32": [1.0, np.nan, 1.1, 1.4],
            "slope 32→64": [np.nan] * 4,
        }
    )
    crossings = crossing_values(table, "rho", midway_slope(1))
    assert midway_slope(1) == 1.5 and midway_slope(2) == 2.5
    between = crossings["slope 4→8"]  # between 0.6 (1.2) and 0.8 (1.8)
    assert (between.value, between.bound) == (pytest.approx(0.6 + 0.2 * 0.3 / 0.6), "at") and str(between) == "at 0.70"
    assert crossings["slope 8→16"] == Crossing(0.5, "at most")  # already there at the first ρ
    assert crossings["slope 16→32"] == Crossing(1.0, "above")  # never reached; a missing ρ is skipped, not read as 0
    assert str(crossings["slope 16→32"]) == "> 1.00" and str(crossings["slope 32→64"]) == "—"  # never measured
