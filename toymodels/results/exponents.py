"""Depth exponents from losses against depth: L(ℓ) ≈ c·ℓ^(−α) (+ L₀), and what an α says.

Numbers in, numbers out. A teacher replicate is the sampling unit of α's uncertainty: each
replicate's log–log slope is one draw, α is their mean and its 95 % interval a Student-t interval
over them (with one replicate, the regression's, which says so). The regime verdict names the
ensemble or the procedural law only where the whole interval lies on one side of their midpoint.
"""

from typing import NamedTuple

import numpy as np
from scipy import optimize, stats


def fit_power_law(depths, losses) -> tuple[float, float]:
    """Least squares of log L on log ℓ: returns (α, c) with L ≈ c·ℓ^(−α)."""
    slope, intercept = np.polyfit(np.log(depths), np.log(losses), 1)
    return -slope, float(np.exp(intercept))


def local_slopes(depths, losses) -> list[float]:
    """α between neighbouring depths, −Δlog L/Δlog ℓ: a bend in the power law shows up here."""
    return (-np.diff(np.log(losses)) / np.diff(np.log(depths))).tolist()


def step_mismatch(depths, teacher_depth: int) -> np.ndarray:
    """u = 1/ℓ − 1/ℓ*, how far an ℓ-step discretisation's step is from the teacher's own."""
    return 1 / np.asarray(depths, float) - 1 / teacher_depth


def mismatch_constant(depths, losses, teacher_depth: int, exponent: float = 2.0) -> float:
    """c of the pure step-mismatch law L = c·u^exponent (u = `step_mismatch`), fitted in log space:
    the one curve a coherent discretisation error follows all the way to ℓ* (where L = 0)."""
    u = step_mismatch(depths, teacher_depth)
    return float(np.exp(np.mean(np.log(np.asarray(losses, float)) - exponent * np.log(u))))


def fit_power_law_with_floor(depths, losses) -> dict | None:
    """L = c·ℓ^(−α) + L₀ fitted in log space (L₀ ≥ 0); None when it does not converge or is
    under-determined (fewer than four depths)."""
    depths, losses = np.asarray(depths, float), np.asarray(losses, float)
    if len(depths) < 4:
        return None
    alpha0, c0 = fit_power_law(depths, losses)

    def model(log_depth, alpha, log_c, floor):
        return np.log(np.exp(log_c - alpha * log_depth) + floor)

    try:
        (alpha, log_c, floor), _ = optimize.curve_fit(
            model,
            np.log(depths),
            np.log(losses),
            p0=[max(alpha0, 0.1), np.log(c0), 0.0],
            bounds=([0, -np.inf, 0], [20, np.inf, losses.min()]),
            maxfev=20_000,
        )
    except (RuntimeError, ValueError):
        return None
    return {"alpha": float(alpha), "c": float(np.exp(log_c)), "floor": float(floor)}


def centred_log_depths(depths) -> np.ndarray:
    log_depths = np.log(np.asarray(depths, float))
    return log_depths - log_depths.mean()


def log_log_slopes(depths, log_losses: np.ndarray) -> np.ndarray:
    """α = −slope of log L on log ℓ along the last axis of `log_losses`; any leading axes
    (replicates, simulated sweeps) are separate fits."""
    centred = centred_log_depths(depths)
    return -(log_losses @ centred) / (centred @ centred)


class AlphaEstimate(NamedTuple):
    """α with its 95 % interval; arrays over the leading axes of the log-losses it came from."""

    alpha: np.ndarray | float  # mean of the replicate slopes
    low: np.ndarray | float
    high: np.ndarray | float
    method: str
    replicate_alphas: np.ndarray  # (…, replicates)


def t_half_width(samples: np.ndarray) -> np.ndarray:
    """Half the width of the 95 % t-interval on the mean of `samples` (along the last axis, ≥ 2)."""
    n = samples.shape[-1]
    return stats.t.ppf(0.975, n - 1) * samples.std(axis=-1, ddof=1) / np.sqrt(n)


def alpha_interval(depths, log_losses: np.ndarray) -> AlphaEstimate:
    """α and its 95 % interval from `log_losses` (…, replicates, depths), every replicate at
    every depth; leading axes are independent sweeps (the coverage test simulates thousands).

    Two replicates or more: t over the replicate slopes, so teacher-to-teacher scatter counts.
    One replicate: the regression's t-interval, which knows only the scatter about the line."""
    replicates, n_depths = log_losses.shape[-2:]
    slopes = log_log_slopes(depths, log_losses)
    alpha = slopes.mean(axis=-1)
    if replicates >= 2:
        half = t_half_width(slopes)
        method = f"t over {replicates} teacher replicates"
    elif n_depths >= 3:
        centred = centred_log_depths(depths)
        line = log_losses.mean(axis=-1, keepdims=True) - slopes[..., None] * centred
        residual_var = ((log_losses - line) ** 2).sum(axis=-1) / (n_depths - 2)
        half = stats.t.ppf(0.975, n_depths - 2) * np.sqrt(residual_var[..., 0] / (centred @ centred))
        method = "regression t over depths (one replicate: excludes teacher-to-teacher scatter)"
    else:
        half = np.full_like(alpha, np.nan)
        method = "none (one replicate, two depths)"
    return AlphaEstimate(alpha, alpha - half, alpha + half, method, slopes)


def depth_window_range(depths, log_losses: np.ndarray, smallest=3) -> tuple[float, float] | None:
    """(min, max) of α over every contiguous window of at least `smallest` depths: how much α
    depends on where the fit starts and stops. None with fewer depths than that."""
    n_depths = len(depths)
    alphas = [
        log_log_slopes(depths[first:stop], log_losses[:, first:stop]).mean()
        for first in range(n_depths)
        for stop in range(first + smallest, n_depths + 1)
    ]
    return (float(min(alphas)), float(max(alphas))) if alphas else None


ENSEMBLE_ALPHA = 1.0  # of converged students of a random-walk teacher (science.md §1, §5)


def procedural_alpha(order: int) -> float:
    """The smallest exponent of an order-p integrator's converged students: global error ∝ ℓ^−p,
    so MSE ∝ ℓ^−2p when the layers' errors add coherently (science.md §8); typical-case
    addition gives 2p + 1 (the paper's 3 for Euler)."""
    return 2.0 * order


def deep_end_flattening(depths, log_losses: np.ndarray) -> tuple[float, float] | None:
    """(first, last) local slope, replicate means, when the last is below the first beyond doubt
    (a t-interval over the replicates' differences lies below 0): the curve flattens at the deep
    end, as an optimisation floor makes it (science.md §5). None otherwise, or with fewer than 3
    depths or 2 replicates."""
    replicates, n_depths = log_losses.shape
    if n_depths < 3 or replicates < 2:
        return None
    log_depths = np.log(np.asarray(depths, float))
    slopes = -np.diff(log_losses, axis=1) / np.diff(log_depths)  # replicates × neighbouring pairs
    change = slopes[:, -1] - slopes[:, 0]
    half = stats.t.ppf(0.975, replicates - 1) * change.std(ddof=1) / np.sqrt(replicates)
    return (float(slopes[:, 0].mean()), float(slopes[:, -1].mean())) if change.mean() + half < 0 else None


def regime_verdict(
    alpha: float,
    low: float,
    high: float,
    certified: bool,
    flattening: tuple[float, float] | None = None,
    order: int = 1,
) -> str:
    """The regime a fit shows, named only when the evidence allows it: every fitted student
    certified (before that α is only a lower bound), and the whole interval lies on the named
    regime's side of the midpoint between the ensemble law (α = 1) and the smallest exponent a
    converged order-`order` integrator shows (2·order: Euler 2, midpoint 4), so that it excludes
    the other regime's exponent with a margin. A NaN interval counts as too wide.
    A curve that flattens at the deep end (`flattening`, see `deep_end_flattening`) is not called
    ensemble: an optimisation floor reads as a low exponent."""
    procedural = procedural_alpha(order)
    midpoint = (ENSEMBLE_ALPHA + procedural) / 2
    if not certified:
        return "undetermined (not certified: α is a lower bound)"
    if high < midpoint and flattening:
        return (
            f"undetermined (the deep end flattens: local slopes {flattening[0]:.2f} → {flattening[1]:.2f}, "
            f"as an optimisation floor makes it)"
        )
    if high < midpoint:
        return "ensemble"
    if low > midpoint:
        return "procedural"
    if not (low > ENSEMBLE_ALPHA or high < procedural):
        return "undetermined (interval too wide)"
    return "undetermined (between regimes)"
