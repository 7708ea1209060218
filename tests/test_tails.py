import numpy as np
import pandas as pd
import pytest

from toymodels.results import ladder as ladder_maths
from toymodels.results import tails
from toymodels.results.ladder import correlation_matrices, extrapolate
from toymodels.results.tails import ALPHA_SERIES, GEOMETRIC, POWER_LAW, SPAN, fit_tail, tail_families

RUNGS = (1, 2, 4, 8, 16)
DEPTHS = (6, 12, 24)
TRUE_ALPHA = 3.0


def rung_correlations(rho: float, rungs=RUNGS) -> np.ndarray:
    """ρ^g between rungs g doublings apart: how the shared test set ties their noise together."""
    gaps = np.abs(np.log2(rungs)[:, None] - np.log2(rungs)[None, :])
    return rho**gaps


def synthetic_ladder(rng, losses_of, noise=0.005, rho=0.95, depths=DEPTHS, replicates=3, with_correlations=True):
    """A ladder table of `replicates` teachers × `depths`, each student's rungs `losses_of(depth,
    scale)` (one per rung) seen through the shared test set's noise: relative `noise`, correlated
    `rho`^gap across the rungs; `extrapolate` then reads it as `toymodels ladder` does."""
    factor = np.linalg.cholesky(rung_correlations(rho))
    rows, correlations = [], []
    for replicate in range(replicates):
        for depth in depths:
            losses = losses_of(depth, np.exp(rng.normal(0, 0.2)))
            seen = losses * (1 + noise * factor @ rng.standard_normal(len(RUNGS)))
            keys = {"teacher": "tied", "temperature": np.nan, "replicate": replicate, "depth": depth}
            rows += [
                {**keys, "rung": rung, "test_loss": loss, "relative_noise": noise, "steps": 3000 * rung}
                for rung, loss in zip(RUNGS, seen)
            ]
            matrix = rung_correlations(rho)
            correlations.append(
                {
                    **keys,
                    **{
                        f"corr_x{a}_x{b}": matrix[i, j]
                        for i, a in enumerate(RUNGS)
                        for j, b in enumerate(RUNGS)
                        if i < j
                    },
                }
            )
    return extrapolate(pd.DataFrame(rows), pd.DataFrame(correlations) if with_correlations else None, rng)


def geometric_tail(depth, scale):
    """Converged at c·ℓ^−3, each doubling of the budget shrinking the excess by 0.6, deeper
    students further from it (so α rises with the budget toward 3, as on the tied ladder)."""
    return scale * 0.5 * depth**-TRUE_ALPHA * (1 + 0.3 * (depth / 6) ** 0.5 * 0.6 ** np.arange(len(RUNGS)))


def power_law_tail(depth, scale):
    """L∞ + A·B^−β in the budget B (β = 0.7)."""
    return scale * 0.5 * depth**-TRUE_ALPHA * (1 + 0.4 * (depth / 6) ** 0.5 * np.asarray(RUNGS, float) ** -0.7)


def logarithmic_series(depth, scale):
    """α rising by 0.15 a doubling for ever: no limit."""
    return scale * 0.5 * depth ** -(2.0 + 0.15 * np.arange(len(RUNGS)))


def falling_like_a_logarithm(depth, scale):
    """Each doubling of the budget takes off the same amount: L linear in log B, no tail."""
    return scale * 0.5 * depth**-TRUE_ALPHA * (1.6 - 0.12 * np.arange(len(RUNGS)))


def families(ladder, rng):
    return tail_families(ladder, 1, 128, rng)


@pytest.fixture
def few_draws(monkeypatch):
    """250 resamples instead of 4 000: the intervals' ends move by a few percent, the coverage not."""
    for module in (ladder_maths, tails):
        monkeypatch.setattr(module, "DRAWS", 250)


def test_fit_tail_recovers_a_geometric_tail_and_its_chi2_is_zero_there():
    values = 2.0 + 3.0 * 0.6 ** (np.arange(4) - 3.0)
    limit, amplitude, q, chi2 = fit_tail(values, np.eye(4) * 1e-4)
    assert limit == pytest.approx(2.0, abs=1e-3) and amplitude == pytest.approx(3.0, rel=1e-3)
    assert q == pytest.approx(0.6, abs=0.005) and chi2 < 1e-3


@pytest.mark.slow
def test_the_span_of_the_passing_families_covers_a_known_tail(few_draws):
    """200 synthetic ladders (three teachers, ℓ 6–24, rungs ×1–×16, 0.5 % test noise correlated 0.95
    from rung to rung), half a geometric tail and half a power law in the budget, both converging to
    α = 3: the span of the families that pass covers 3 in at least 90 % of them."""
    rng = np.random.default_rng(7)
    covered, passing = 0, {GEOMETRIC: 0, POWER_LAW: 0, ALPHA_SERIES: 0}
    for draw in range(200):
        found = families(synthetic_ladder(rng, geometric_tail if draw % 2 else power_law_tail), rng)
        joined = found[(found.replicate == "joined") & (found.measure == "alpha") & (found.window == "6–24")]
        span = joined[joined.family == SPAN].iloc[0]
        covered += bool(span.low <= TRUE_ALPHA <= span.high)
        for family in passing:
            passing[family] += (joined[joined.family == family].failure == "").all()
    print(f"covered {covered} of 200; passing {passing}")
    assert covered >= 180, (covered, passing)
    assert passing[POWER_LAW] >= 150 and passing[GEOMETRIC] >= 100  # the families that are the truth pass


@pytest.mark.parametrize("series", [logarithmic_series, falling_like_a_logarithm])
def test_no_family_passes_a_series_that_decays_like_a_logarithm(series, few_draws):
    rng = np.random.default_rng(11)
    for _ in range(3):
        found = families(synthetic_ladder(rng, series), rng)
        joined = found[(found.replicate == "joined") & (found.measure == "alpha") & (found.window == "6–24")]
        assert (joined[joined.family != SPAN].failure != "").all(), joined[["family", "value", "failure"]]
        span = joined[joined.family == SPAN].iloc[0]
        assert span.failure == "no family passes" and np.isnan(span.low)
        assert span.lower_bound_rung == "x16" and span.lower_bound > 2  # the last rung's α, a lower bound


@pytest.mark.slow
def test_rungs_that_share_a_test_set_get_narrower_ratios_that_still_cover_the_truth(few_draws):
    """One student's rungs at 1 % noise correlated 0.95: its r from the paired noise is several times
    narrower than from the noise taken as independent, and covers the true r (0.6) as often as it
    claims."""
    rng = np.random.default_rng(3)
    widths, covered = [], 0
    for _ in range(200):
        paired = synthetic_ladder(rng, geometric_tail, noise=0.01, depths=(12,), replicates=1)
        alone = synthetic_ladder(
            np.random.default_rng(rng.integers(1 << 30)),
            geometric_tail,
            noise=0.01,
            depths=(12,),
            replicates=1,
            with_correlations=False,
        )
        widths.append((alone.r_high - alone.r_low).iloc[0] / (paired.r_high - paired.r_low).iloc[0])
        covered += bool(paired.r_low.iloc[0] <= 0.6 <= paired.r_high.iloc[0])
    assert np.median(widths) > 2.5
    assert covered >= 180


def test_a_rung_grown_after_the_others_is_correlated_as_the_measured_rungs_fall_with_distance():
    table = pd.DataFrame([{"corr_x1_x2": 0.96, "corr_x1_x4": 0.90, "corr_x2_x4": 0.94}])  # ×8 grown later
    matrix = correlation_matrices(table, [1, 2, 4, 8])[0]
    rho = (0.96 + 0.94) / 2  # the mean between neighbouring rungs
    assert matrix[2, 3] == pytest.approx(rho, abs=1e-3) and matrix[0, 3] == pytest.approx(rho**3, abs=1e-3)
    assert matrix[0, 1] == pytest.approx(0.96, abs=1e-3)  # the measured ones stay
    assert np.linalg.eigvalsh(matrix).min() > 0
    assert (correlation_matrices(pd.DataFrame([{}]), [1, 2, 4]) == np.eye(3)).all()  # nothing measured: independent
