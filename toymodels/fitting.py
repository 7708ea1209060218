"""Depth exponents from a run's tidy metrics: L(ℓ) ≈ c·ℓ^(−α) (+ L₀).

Everything here reads the metrics table (one row per student × evaluation) and returns plain
numbers and DataFrames; nothing trains. Losses of replicates are averaged in log space
(the fit is in log space), and α's 95 % interval comes from a bootstrap over replicates, or,
with a single replicate, from the regression's standard error (the report says which).
"""

from dataclasses import asdict, dataclass, field

import numpy as np
import pandas as pd
from scipy import optimize, stats

GROUP = ["teacher", "temperature"]  # one exponent per group


def fit_power_law(depths, losses) -> tuple[float, float]:
    """Least squares of log L on log ℓ: returns (α, c) with L ≈ c·ℓ^(−α)."""
    slope, intercept = np.polyfit(np.log(depths), np.log(losses), 1)
    return -slope, float(np.exp(intercept))


def local_slopes(depths, losses) -> list[float]:
    """α between neighbouring depths, −Δlog L/Δlog ℓ: a bend in the power law shows up here."""
    return (-np.diff(np.log(losses)) / np.diff(np.log(depths))).tolist()


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
            model, np.log(depths), np.log(losses), p0=[max(alpha0, 0.1), np.log(c0), 0.0],
            bounds=([0, -np.inf, 0], [20, np.inf, losses.min()]), maxfev=20_000)
    except (RuntimeError, ValueError):
        return None
    return {"alpha": float(alpha), "c": float(np.exp(log_c)), "floor": float(floor)}


def alpha_interval(depths, log_losses: np.ndarray, n_boot=2000, seed=0) -> tuple[float, float, str]:
    """95 % interval of α from `log_losses` (replicates × depths)."""
    replicates = log_losses.shape[0]
    if replicates >= 2:
        rng = np.random.default_rng(seed)
        picks = rng.integers(0, replicates, size=(n_boot, replicates))
        means = log_losses[picks].mean(axis=1)  # (n_boot, depths)
        slopes = np.polyfit(np.log(depths), means.T, 1)[0]
        lo, hi = np.percentile(-slopes, [2.5, 97.5])
        return float(lo), float(hi), f"bootstrap over {replicates} replicates"
    if len(depths) < 3:
        return float("nan"), float("nan"), "none (one replicate, two depths)"
    regression = stats.linregress(np.log(depths), log_losses[0])
    half = stats.t.ppf(0.975, len(depths) - 2) * regression.stderr
    return float(-regression.slope - half), float(-regression.slope + half), "regression (one replicate)"


@dataclass
class DepthFit:
    """The exponent of one (teacher, temperature) group and everything needed to judge it."""

    teacher: str
    temperature: float
    alpha: float
    alpha_low: float
    alpha_high: float
    interval: str
    replicates: int
    steps: int
    depths: list[int]
    losses: list[float]  # geometric mean over replicates, per depth
    local_slopes: list[float]
    floor_fit: dict | None
    converged: bool
    not_converged_depths: list[int]
    alpha_over_training: list[tuple[int, float]]
    diverged: list[dict] = field(default_factory=list)  # {replicate, depth, step}: left out of the fit
    excluded_depths: list[int] = field(default_factory=list)  # depths some replicate lacks (diverged, missing)

    @classmethod
    def from_dict(cls, data: dict) -> "DepthFit":
        return cls(**{**data, "temperature": np.nan if data["temperature"] is None else data["temperature"]})

    def as_dict(self) -> dict:
        """JSON-ready: no NaN (a loss without temperature, MSE, has `temperature: null`)."""
        return {**asdict(self), "temperature": None if np.isnan(self.temperature) else self.temperature}


STUDENT = ["replicate", "depth"]  # one student within a group


def last_evaluation(history: pd.DataFrame) -> pd.DataFrame:
    """The rows of each student's last evaluation, within one group."""
    return history[history.step == history.groupby(STUDENT)["step"].transform("max")]


def still_falling(history: pd.DataFrame, tolerance: float) -> pd.Series:
    """Per student of one group: did the test loss fall by more than `tolerance` (relative)
    over the last 10 % of training? Then it had not converged."""
    last = last_evaluation(history).set_index(STUDENT).test_loss
    before = history[history.step <= 0.9 * history.step.max()]
    before = last_evaluation(before).set_index(STUDENT).test_loss
    return (1 - last / before) > tolerance


def select_depths(metrics: pd.DataFrame, min_depth=1, max_depth=None) -> pd.DataFrame:
    return metrics[(metrics.depth >= min_depth) & (metrics.depth <= (max_depth or np.inf))]


CONVERGENCE_TOLERANCE = 0.01


def diverged_students(history: pd.DataFrame) -> pd.Series:
    """Per student of one group that diverged: the step its loss first became NaN or infinite."""
    if "diverged_at_step" not in history:  # runs written before divergence was tracked
        return pd.Series(dtype=float)
    return history.groupby(STUDENT).diverged_at_step.min().dropna()


def completed(metrics: pd.DataFrame, steps: int) -> pd.DataFrame:
    """The rows of students whose training reached `steps` (a partial run has others)."""
    students = ["teacher", "temperature", *STUDENT]
    return metrics[metrics.groupby(students, dropna=False).step.transform("max") >= steps]


def fit_depth_exponents(metrics: pd.DataFrame, min_depth=1, max_depth=None, tolerance=CONVERGENCE_TOLERANCE,
                        n_boot=2000, seed=0) -> list[DepthFit]:
    """One DepthFit per (teacher, temperature), over depths in [min_depth, max_depth]. Diverged
    students are left out, and so are depths that some replicate lacks after that."""
    fits = []
    for (teacher, temperature), history in select_depths(metrics, min_depth, max_depth).groupby(
            GROUP, dropna=False, sort=True):
        diverged = diverged_students(history)
        history = history[~history.set_index(STUDENT).index.isin(diverged.index)]
        table = last_evaluation(history).pivot(index="replicate", columns="depth", values="test_loss")
        excluded = table.columns[table.isna().any()].astype(int).tolist()
        table = table.dropna(axis=1)
        history = history[~history.depth.isin(excluded)]
        depths = table.columns.to_numpy()
        if len(depths) < 2:
            continue
        log_losses = np.log(table.to_numpy())
        losses = np.exp(log_losses.mean(axis=0))
        alpha, _ = fit_power_law(depths, losses)
        low, high, method = alpha_interval(depths, log_losses, n_boot, seed)
        falling = still_falling(history, tolerance)
        stalled = sorted({int(depth) for _, depth in falling.index[falling]})
        fits.append(DepthFit(teacher, float(temperature), float(alpha), low, high, method, len(table),
                             int(history.step.max()), depths.astype(int).tolist(), losses.tolist(),
                             local_slopes(depths, losses), fit_power_law_with_floor(depths, losses),
                             not stalled, stalled, alpha_over_training(history),
                             [{"replicate": int(r), "depth": int(d), "step": int(step)}
                              for (r, d), step in diverged.items()], excluded))
    return fits


def alpha_over_training(history: pd.DataFrame) -> list[tuple[int, float]]:
    """(step, α) at every evaluation of one group, on replicate-averaged log losses: the trap of
    an undertrained student that looks like α ≈ 1 is visible only on this curve."""
    log_mean = history.assign(log_loss=np.log(history.test_loss)).groupby(["step", "depth"]).log_loss.mean()
    return [(int(step), float(-np.polyfit(np.log(g.index.get_level_values("depth")), g.to_numpy(), 1)[0]))
            for step, g in log_mean.groupby(level="step") if len(g) >= 2]
