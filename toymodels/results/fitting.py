"""Depth exponents from a run's tidy metrics: L(ℓ) ≈ c·ℓ^(−α) (+ L₀).

Everything here reads the metrics table (one row per student × evaluation) and returns plain
numbers and DataFrames; nothing trains. A teacher replicate is the sampling unit of α's
uncertainty: each replicate's log–log slope is one draw, α is their mean and its 95 % interval a
Student-t interval over them (with one replicate, the regression's, which says so).

Certificates (`certify`): a student's own curve cannot tell whether it reached the best loss of
its architecture. Every (teacher instance, depth) is trained from one or more starts and has a
reference, the untrained `discretised` student; the best of all of them bounds the best loss
from above. A student's *optimisation gap* is its loss over that best − 1. A depth is certified
when its best trained student flattened (the plateau test), its gap is at most GAP_TOLERANCE
and its test loss is within FIT_TOLERANCE of its training loss; α is fitted on those best students.
"""

from dataclasses import asdict, dataclass, field
from typing import NamedTuple

import numpy as np
import pandas as pd
from scipy import optimize, stats

from ..vocabulary import (  # GROUP: one α
    GROUP,
    SLOT,
    SLOT_IN_GROUP,
    START_IN_GROUP,
    STUDENT,
    with_race_columns,
)


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
            model, np.log(depths), np.log(losses), p0=[max(alpha0, 0.1), np.log(c0), 0.0],
            bounds=([0, -np.inf, 0], [20, np.inf, losses.min()]), maxfev=20_000)
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
    alphas = [log_log_slopes(depths[first:stop], log_losses[:, first:stop]).mean()
              for first in range(n_depths) for stop in range(first + smallest, n_depths + 1)]
    return (float(min(alphas)), float(max(alphas))) if alphas else None


ENSEMBLE_ALPHA = 1.0  # of converged students of a random-walk teacher (science.md §1, §5)
GAP_TOLERANCE = 0.10  # a certified student is within 10 % of the best loss any start reached
FIT_TOLERANCE = 0.05  # … and tests within 5 % of its training loss (above that it fits its samples)


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


def regime_verdict(alpha: float, low: float, high: float, certified: bool,
                   flattening: tuple[float, float] | None = None, order: int = 1) -> str:
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
        return (f"undetermined (the deep end flattens: local slopes {flattening[0]:.2f} → {flattening[1]:.2f}, "
                f"as an optimisation floor makes it)")
    if high < midpoint:
        return "ensemble"
    if low > midpoint:
        return "procedural"
    if not (low > ENSEMBLE_ALPHA or high < procedural):
        return "undetermined (interval too wide)"
    return "undetermined (between regimes)"


@dataclass
class DepthFit:
    """The exponent of one (teacher, temperature) group and everything needed to judge it.
    Fields with defaults are absent from older fit.json files."""

    teacher: str
    temperature: float
    alpha: float  # mean of replicate_alphas
    alpha_low: float
    alpha_high: float
    interval: str  # how alpha_low and alpha_high were found
    replicates: int
    steps: int
    depths: list[int]
    losses: list[float]  # geometric mean over replicates, per depth
    local_slopes: list[float]
    floor_fit: dict | None
    certified: bool  # every fitted student certified (fitting.certify): else α is a lower bound
    uncertified_depths: list[int]
    alpha_over_training: list[tuple]  # (step, α, low, high); older fit.json files: (step, α)
    diverged: list[dict] = field(default_factory=list)  # {replicate, depth, step}: left out of the fit
    excluded_depths: list[int] = field(default_factory=list)  # depths some replicate lacks (diverged, missing) or
    # where the untrained discretisation is the teacher itself (as deep as it: loss 0, no power law)
    replicate_alphas: list[float] = field(default_factory=list)  # one log–log slope per teacher replicate
    window_alpha_min: float | None = None  # α over contiguous windows of ≥ 3 depths (None: fewer depths)
    window_alpha_max: float | None = None
    regime: str = "undetermined (fit predates the regime verdict)"
    # The certificate (fits older than it have none): per depth, which start gave the fitted loss
    # ("zero", or "zero 2/3" when replicates differ) and the reference's geometric mean.
    best_starts: list[str] = field(default_factory=list)
    reference_losses: list[float | None] = field(default_factory=list)
    reference_alpha: float | None = None  # the untrained discretisation's exponent over the same depths
    max_gap: float | None = None  # the largest optimisation gap of a fitted student
    test_over_train: list[float | None] = field(default_factory=list)  # per depth, the fitted students' largest
    students: list[dict] = field(default_factory=list)  # every student: replicate, depth, start, losses, gap, …
    # α in the step mismatch u = 1/ℓ − 1/ℓ*: L ∝ u^α, which a finite teacher's map makes exact for
    # a pure discretisation error (the log–log α rises toward ℓ* instead)
    mismatch_alpha: float | None = None
    mismatch_alpha_low: float | None = None
    mismatch_alpha_high: float | None = None
    teacher_depth: int | None = None
    # α against step of each start's students alone, when a run has several: the zero start's is the
    # paper's curve, whose trap the certified α shows (the best start's is `alpha_over_training`)
    start_alphas_over_training: dict[str, list[tuple]] = field(default_factory=dict)
    # starts that raced and fell behind their student's leader (training/racing.py): {replicate,
    # depth, start, step, behind_by}, behind_by their gap then; never a fitted student
    stopped: list[dict] = field(default_factory=list)

    @property
    def group(self) -> tuple[str, float | None]:
        """(teacher, temperature) as a key that compares equal: NaN (no temperature) never equals itself."""
        return self.teacher, None if np.isnan(self.temperature) else self.temperature

    @classmethod
    def from_dict(cls, data: dict) -> "DepthFit":
        """The fit `as_dict` wrote: its nulls that stand for a number not there (no temperature, no
        interval over one teacher) read as NaN again, as the fit made them."""
        data = {RENAMED.get(key, key): value for key, value in data.items()}  # a fit.json written before
        data = {**data, **{name: _nan_for_null(data.get(name)) for name in NUMBERS_OR_NAN}}
        if data.get("mismatch_alpha") is not None:  # fitted, perhaps without an interval
            data |= {name: _nan_for_null(data[name]) for name in ("mismatch_alpha_low", "mismatch_alpha_high")}
        data["alpha_over_training"] = [list(map(_nan_for_null, row)) for row in data["alpha_over_training"]]
        data["start_alphas_over_training"] = {start: [list(map(_nan_for_null, row)) for row in rows]
                                              for start, rows in data.get("start_alphas_over_training", {}).items()}
        return cls(**data)

    def as_dict(self) -> dict:
        """JSON-ready for a strict reader: every NaN or infinity written as null (a loss without
        temperature, MSE, has `temperature: null`; one teacher gives no interval)."""
        return _null_for_nan(asdict(self))


NUMBERS_OR_NAN = ("temperature", "alpha", "alpha_low", "alpha_high")  # DepthFit's floats that may be NaN
RENAMED = {"converged": "certified", "not_converged_depths": "uncertified_depths"}  # one word, as the CLI and pages say


def _null_for_nan(value):
    """`value` with every non-finite float, however nested, as None: JSON has no NaN."""
    if isinstance(value, dict):
        return {key: _null_for_nan(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_null_for_nan(item) for item in value]
    if isinstance(value, float) and not np.isfinite(value):
        return None
    return value


def _nan_for_null(value):
    return np.nan if value is None else value




def with_starts(metrics: pd.DataFrame) -> pd.DataFrame:
    """`metrics` with the start columns (tables from before starts: zero starts, no reference)."""
    return metrics if "start" in metrics else metrics.assign(start="zero", reference_loss=np.nan)


def last_evaluation(history: pd.DataFrame) -> pd.DataFrame:
    """The rows of each student's last evaluation, within one group."""
    return history[history.step == history.groupby(START_IN_GROUP)["step"].transform("max")]


def optimisation_gaps(metrics: pd.DataFrame) -> pd.Series:
    """Every row's optimisation gap: its test loss over the best loss of its (teacher,
    temperature, replicate, depth) at the end — any start's last evaluation, or the untrained
    discretised reference — minus 1. The run's metrics.csv carries it as the column `gap`."""
    metrics = with_starts(metrics)
    final = metrics[metrics.step == metrics.groupby(STUDENT, dropna=False).step.transform("max")]
    best = final.groupby(SLOT, dropna=False).test_loss.min().rename("best").reset_index()
    best = metrics[SLOT].reset_index().merge(best, on=SLOT, how="left").set_index("index").best
    return metrics.test_loss / np.fmin(best, metrics.reference_loss) - 1


def certify(last: pd.DataFrame, tolerance: float = GAP_TOLERANCE, reused_samples: bool = True,
            budget: pd.DataFrame | None = None) -> pd.DataFrame:
    """The last evaluations of one group's students with their certificate: `best_loss` (the best
    test loss any start reached on that teacher at that depth, the untrained discretised
    reference included), `gap` (test loss / best − 1), `flattened` (the plateau test converged
    it), `fits_its_data` (it trained on `reused_samples`, a pool, and tests above 1 + FIT_TOLERANCE
    times its training loss: a fitted pool raises the test loss, so its α is a lower bound; on
    fresh samples a student never sees one twice, and test/train is the test set's noise),
    `budget_certified` (from `budget`, the run's budget certificate per SLOT where its polish ran
    twice: a doubled budget that moved the loss beyond the test noise says the schedule stopped it,
    not the student's best; True for a slot with none), `certified` (flattened, gap ≤ tolerance,
    not fitting its data and budget-certified) and `fitted` (the best trained student of its slot,
    the one α is fitted on)."""
    last = last.reset_index(drop=True)
    budget_certified = pd.Series(True, last.index)
    if budget is not None:  # a left merge keeps last's order; NaN temperatures match as keys
        merged = last[SLOT].merge(budget[[*SLOT, "budget_certified"]], on=SLOT, how="left")
        budget_certified = merged.budget_certified.fillna(True).astype(bool)
    best = last.groupby(SLOT_IN_GROUP).test_loss.transform("min")
    reference = last.reference_loss if "reference_loss" in last else np.nan
    best = np.fmin(best, reference)
    flattened = last.converged_at_step.notna() if "converged_at_step" in last else pd.Series(False, last.index)
    gap = last.test_loss / best - 1
    # NaN (no training loss) compares False
    fits_its_data = reused_samples & (last.test_loss / last.train_loss - 1 > FIT_TOLERANCE)
    fitted = last.index.isin(last.groupby(SLOT_IN_GROUP).test_loss.idxmin())
    return last.assign(best_loss=best, gap=gap, flattened=flattened, fits_its_data=fits_its_data,
                       budget_certified=budget_certified,
                       certified=flattened & (gap <= tolerance) & ~fits_its_data & budget_certified, fitted=fitted)


def _largest(values: pd.Series) -> float | None:
    return None if values.isna().all() else float(values.max())


def _start_label(starts: pd.Series) -> str:
    """"discretised", or "zero 2/3" when the replicates' best students came from different starts."""
    counts = starts.value_counts()
    return counts.index[0] if len(counts) == 1 else f"{counts.index[0]} {counts.iloc[0]}/{len(starts)}"


def select_depths(metrics: pd.DataFrame, min_depth=1, max_depth=None) -> pd.DataFrame:
    return metrics[(metrics.depth >= min_depth) & (metrics.depth <= (max_depth or np.inf))]


def marked_students(history: pd.DataFrame, column: str) -> pd.Series:
    """Per student of one group whose `column` (diverged_at_step, converged_at_step) is set:
    that step. Runs written before the engine recorded the column have none."""
    if column not in history:
        return pd.Series(dtype=float)
    return history.groupby(START_IN_GROUP)[column].min().dropna()


def completed(metrics: pd.DataFrame, steps: int) -> pd.DataFrame:
    """The rows of students that finished: trained for `steps`, or stopped earlier because they
    converged, diverged or fell behind another start (a partial run has others)."""
    metrics = with_starts(metrics)
    students = metrics.groupby(STUDENT, dropna=False)
    finished = students.step.transform("max") >= steps
    for stopped_early in ("converged_at_step", "diverged_at_step", "stopped_at_step"):
        if stopped_early in metrics:
            finished |= students[stopped_early].transform("max").notna()
    return metrics[finished]


def _mismatch_fit(depths, log_losses, teacher_depth) -> dict:
    """α in the step mismatch 1/ℓ − 1/ℓ*, with its interval: the log–log fit on the effective
    depth 1/(1/ℓ − 1/ℓ*). Empty without a teacher depth, or with a student as deep as it."""
    if teacher_depth is None or max(depths) >= teacher_depth:
        return {}
    effective = 1 / step_mismatch(depths, teacher_depth)
    estimate = alpha_interval(effective, log_losses)
    return {"mismatch_alpha": float(estimate.alpha), "mismatch_alpha_low": float(estimate.low),
            "mismatch_alpha_high": float(estimate.high), "teacher_depth": int(teacher_depth)}


def _reference_fit(depths, reference: pd.DataFrame) -> dict:
    """The references' geometric means per depth and their exponent (None where a run has none)."""
    if reference.isna().any().any() or (reference <= 0).any().any():  # none, or ℓ = ℓ*: the teacher itself
        means = np.exp(np.log(reference.where(reference > 0)).mean()).where(reference.min() > 0, reference.min())
        return {"reference_losses": [None if np.isnan(v) else float(v) for v in means]}
    log_reference = np.log(reference.to_numpy())
    return {"reference_losses": np.exp(log_reference.mean(axis=0)).tolist(),
            "reference_alpha": float(log_log_slopes(depths, log_reference).mean())}


STUDENT_FIELDS = ["replicate", "depth", "start", "train_loss", "test_loss", "reference_loss", "best_loss", "gap",
                  "flattened", "fits_its_data", "budget_certified", "certified", "fitted", "stopped_at_step", "behind_by"]


def fit_depth_exponents(metrics: pd.DataFrame, min_depth=1, max_depth=None, teacher_depth: int | None = None,
                        order: int = 1, gap_tolerance: float = GAP_TOLERANCE,
                        reused_samples: bool = True, budget: pd.DataFrame | None = None) -> list[DepthFit]:
    """One DepthFit per (teacher, temperature), over depths in [min_depth, max_depth], on the best
    trained student of each (replicate, depth) among its starts (`certify`). Diverged students
    are left out, and so are depths that some replicate lacks after that. `teacher_depth` (ℓ*)
    adds the fit in the step mismatch; `order`, the students' integrator order, places the
    regime verdict's boundary (see `regime_verdict`); `reused_samples` (students trained on a pool)
    lets test/train above 1 + FIT_TOLERANCE withhold a certificate, and `budget` (the run's budget
    certificate per SLOT, `runs.certificates.budget_table`) a doubled budget that moved the loss."""
    fits = []
    for (teacher, temperature), history in select_depths(with_starts(metrics), min_depth, max_depth).groupby(
            GROUP, dropna=False, sort=True):
        diverged = marked_students(history, "diverged_at_step")
        history = history[~history.set_index(START_IN_GROUP).index.isin(diverged.index)]
        last = certify(with_race_columns(last_evaluation(history)), gap_tolerance, reused_samples, budget)
        best = last[last.fitted]
        table = best.pivot(index="replicate", columns="depth", values="test_loss")
        # ℓ = ℓ*: the untrained discretisation is the teacher itself (loss 0), and a trained one sits at
        # rounding error: no power law there
        the_teacher = best.loc[best["reference_loss"] <= 0, "depth"].astype(int)
        excluded = sorted(set(table.columns[table.isna().any() | (table <= 0).any()].astype(int)) | set(the_teacher))
        table = table.drop(columns=excluded)
        history = history[~history.depth.isin(excluded)]
        best, last = best[~best.depth.isin(excluded)], last[~last.depth.isin(excluded)]
        depths = table.columns.to_numpy()
        if len(depths) < 2:
            continue
        log_losses = np.log(table.to_numpy())
        losses = np.exp(log_losses.mean(axis=0))
        estimate = alpha_interval(depths, log_losses)
        window_range = depth_window_range(depths, log_losses) or (None, None)
        uncertified = sorted({int(depth) for depth in best.depth[~best.certified]})
        alpha, low, high = float(estimate.alpha), float(estimate.low), float(estimate.high)
        reference = best.pivot(index="replicate", columns="depth", values="reference_loss")[depths]
        fits.append(DepthFit(
            teacher=teacher, temperature=float(temperature), alpha=alpha, alpha_low=low, alpha_high=high,
            interval=estimate.method, replicates=len(table), steps=int(history.step.max()),
            depths=depths.astype(int).tolist(), losses=losses.tolist(), local_slopes=local_slopes(depths, losses),
            floor_fit=fit_power_law_with_floor(depths, losses), certified=not uncertified,
            uncertified_depths=uncertified, alpha_over_training=alpha_over_training(history),
            diverged=[{"replicate": int(r), "depth": int(d), "start": start, "step": int(step)}
                      for (r, d, start), step in diverged.items()],
            stopped=[{"replicate": int(row.replicate), "depth": int(row.depth), "start": row.start,
                      "step": int(row.stopped_at_step), "behind_by": float(row.behind_by)}
                     for row in last[last.stopped_at_step.notna()].sort_values(START_IN_GROUP).itertuples()],
            excluded_depths=excluded, replicate_alphas=estimate.replicate_alphas.tolist(),
            window_alpha_min=window_range[0], window_alpha_max=window_range[1],
            regime=regime_verdict(alpha, low, high, certified=not uncertified,
                                  flattening=deep_end_flattening(depths, log_losses), order=order),
            best_starts=[_start_label(best.start[best.depth == d]) for d in depths],
            max_gap=float(best.gap.fillna(0).max()),
            test_over_train=[_largest(best.test_loss[best.depth == d] / best.train_loss[best.depth == d])
                             for d in depths],
            students=[{k: (v.item() if hasattr(v, "item") else v) for k, v in row.items()} for row in
                      last[STUDENT_FIELDS].replace({np.nan: None}).sort_values(START_IN_GROUP).to_dict("records")],
            start_alphas_over_training=({start: alpha_over_training(history[history.start == start])
                                         for start in sorted(history.start.unique())}
                                        if history.start.nunique() > 1 else {}),
            **_reference_fit(depths, reference), **_mismatch_fit(depths, log_losses, teacher_depth)))
    return fits


def alpha_over_training(history: pd.DataFrame) -> list[tuple[int, float, float, float]]:
    """(step, α, low, high) at every evaluation of one group: α and its 95 % interval over the
    teacher replicates, of the best start (among those in `history`) of each student at that step.
    The trap of an undertrained sweep that looks like α ≈ 1 is visible only on this curve. A
    student that converged left training: its last loss stands for it at later steps, as it would
    in a run capped there (see `plot_alpha_vs_budget`)."""
    every_start = np.log(history.pivot(index="step", columns=START_IN_GROUP, values="test_loss")).ffill()
    log_losses = every_start.T.groupby(level=SLOT_IN_GROUP).min().T.dropna()  # the best start so far of each student
    depths = sorted(log_losses.columns.get_level_values("depth").unique())
    if len(depths) < 2:
        return []
    by_replicate = np.stack([log_losses.xs(replicate, axis=1, level="replicate")[depths].to_numpy()
                             for replicate in sorted(log_losses.columns.get_level_values("replicate").unique())],
                            axis=1)  # steps × replicates × depths
    estimate = alpha_interval(depths, by_replicate)
    return [(int(step), float(alpha), float(low), float(high))
            for step, alpha, low, high in zip(log_losses.index, estimate.alpha, estimate.low, estimate.high)]


# What decides a teacher instance and its test set: two runs that agree on these train on the same teachers
# (and students of the same architecture); the temperatures are matched student by student.
TEACHER_FIELDS = ("student", "loss", "teacher_depth", "width", "vocab", "seed", "test_batches",
                  "test_batch_size")


def gaps_to_optimum(fits: list[DepthFit], optima: list[DepthFit]) -> pd.DataFrame:
    """Each fitted student of `fits` beside the fitted (best) student of the same teacher,
    temperature, replicate and depth in `optima`, a certified run on the same teachers: how far
    above that optimum the student ends (gap = loss / optimum − 1). One row per pair."""
    best = {(*fit.group, s["replicate"], s["depth"]): s for fit in optima for s in fit.students if s["fitted"]}
    rows = []
    for fit in fits:
        for student in (s for s in fit.students if s["fitted"]):
            optimum = best.get((*fit.group, student["replicate"], student["depth"]))
            if optimum is not None:
                rows.append({"teacher": fit.teacher, "temperature": fit.temperature, "replicate": student["replicate"],
                             "depth": student["depth"], "test_loss": student["test_loss"],
                             "optimum_loss": optimum["test_loss"], "optimum_start": optimum["start"],
                             "optimum_certified": optimum["certified"],
                             "gap": student["test_loss"] / optimum["test_loss"] - 1})
    columns = [*SLOT, "test_loss", "optimum_loss", "optimum_start", "optimum_certified", "gap"]
    return pd.DataFrame(rows, columns=columns).sort_values(SLOT, ignore_index=True)
