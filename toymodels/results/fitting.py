"""Depth exponents fitted from a run's tidy metrics, one `DepthFit` per (teacher, temperature).

Everything here reads the metrics table (one row per student × evaluation) and returns plain
numbers and DataFrames; nothing trains. α is fitted on the best trained student of each
(replicate, depth) among its starts, certified or not (results/certification.py says which);
results/exponents.py does the maths.
"""

import numpy as np
import pandas as pd

from ..columns import GROUP, SLOT, SLOT_IN_GROUP, START_IN_GROUP, with_race_columns
from .certification import GAP_TOLERANCE, certify, last_evaluation, marked_students, with_starts
from .depth_fit import DepthFit
from .exponents import (
    alpha_interval,
    deep_end_flattening,
    depth_window_range,
    fit_power_law_with_floor,
    local_slopes,
    log_log_slopes,
    regime_verdict,
    step_mismatch,
)


def _largest(values: pd.Series) -> float | None:
    return None if values.isna().all() else float(values.max())


def _start_label(starts: pd.Series) -> str:
    """ "discretised", or "zero 2/3" when the replicates' best students came from different starts."""
    counts = starts.value_counts()
    return counts.index[0] if len(counts) == 1 else f"{counts.index[0]} {counts.iloc[0]}/{len(starts)}"


def select_depths(metrics: pd.DataFrame, min_depth=1, max_depth=None) -> pd.DataFrame:
    return metrics[(metrics.depth >= min_depth) & (metrics.depth <= (max_depth or np.inf))]


def _mismatch_fit(depths, log_losses, teacher_depth) -> dict:
    """α in the step mismatch 1/ℓ − 1/ℓ*, with its interval: the log–log fit on the effective
    depth 1/(1/ℓ − 1/ℓ*). Empty without a teacher depth, or with a student as deep as it."""
    if teacher_depth is None or max(depths) >= teacher_depth:
        return {}
    effective = 1 / step_mismatch(depths, teacher_depth)
    estimate = alpha_interval(effective, log_losses)
    return {
        "mismatch_alpha": float(estimate.alpha),
        "mismatch_alpha_low": float(estimate.low),
        "mismatch_alpha_high": float(estimate.high),
        "teacher_depth": int(teacher_depth),
    }


def _reference_fit(depths, reference: pd.DataFrame) -> dict:
    """The references' geometric means per depth and their exponent (None where a run has none)."""
    if reference.isna().any().any() or (reference <= 0).any().any():  # none, or ℓ = ℓ*: the teacher itself
        means = np.exp(np.log(reference.where(reference > 0)).mean()).where(reference.min() > 0, reference.min())
        return {"reference_losses": [None if np.isnan(v) else float(v) for v in means]}
    log_reference = np.log(reference.to_numpy())
    return {
        "reference_losses": np.exp(log_reference.mean(axis=0)).tolist(),
        "reference_alpha": float(log_log_slopes(depths, log_reference).mean()),
    }


STUDENT_FIELDS = [
    "replicate",
    "depth",
    "start",
    "train_loss",
    "test_loss",
    "reference_loss",
    "best_loss",
    "gap",
    "flattened",
    "fits_its_data",
    "budget_certified",
    "certified",
    "fitted",
    "stopped_at_step",
    "behind_by",
]


def fit_depth_exponents(
    metrics: pd.DataFrame,
    min_depth=1,
    max_depth=None,
    teacher_depth: int | None = None,
    order: int = 1,
    gap_tolerance: float = GAP_TOLERANCE,
    reused_samples: bool = True,
    budget: pd.DataFrame | None = None,
) -> list[DepthFit]:
    """One DepthFit per (teacher, temperature), over depths in [min_depth, max_depth], on the best
    trained student of each (replicate, depth) among its starts (`certify`). Diverged students
    are left out, and so are depths that some replicate lacks after that. `teacher_depth` (ℓ*)
    adds the fit in the step mismatch; `order`, the students' integrator order, places the
    regime verdict's boundary (see `regime_verdict`); `reused_samples` (students trained on a pool)
    lets test/train above 1 + FIT_TOLERANCE withhold a certificate, and `budget` (the run's budget
    certificate per SLOT, `runs.certificates.budget_table`) a doubled budget that moved the loss."""
    fits = []
    for (teacher, temperature), history in select_depths(with_starts(metrics), min_depth, max_depth).groupby(
        GROUP, dropna=False, sort=True
    ):
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
        fits.append(
            DepthFit(
                teacher=teacher,
                temperature=float(temperature),
                alpha=alpha,
                alpha_low=low,
                alpha_high=high,
                interval=estimate.method,
                replicates=len(table),
                steps=int(history.step.max()),
                depths=depths.astype(int).tolist(),
                losses=losses.tolist(),
                local_slopes=local_slopes(depths, losses),
                floor_fit=fit_power_law_with_floor(depths, losses),
                certified=not uncertified,
                uncertified_depths=uncertified,
                alpha_over_training=alpha_over_training(history),
                diverged=[
                    {"replicate": int(r), "depth": int(d), "start": start, "step": int(step)}
                    for (r, d, start), step in diverged.items()
                ],
                stopped=[
                    {
                        "replicate": int(row.replicate),
                        "depth": int(row.depth),
                        "start": row.start,
                        "step": int(row.stopped_at_step),
                        "behind_by": float(row.behind_by),
                    }
                    for row in last[last.stopped_at_step.notna()].sort_values(START_IN_GROUP).itertuples()
                ],
                excluded_depths=excluded,
                replicate_alphas=estimate.replicate_alphas.tolist(),
                window_alpha_min=window_range[0],
                window_alpha_max=window_range[1],
                regime=regime_verdict(
                    alpha,
                    low,
                    high,
                    certified=not uncertified,
                    flattening=deep_end_flattening(depths, log_losses),
                    order=order,
                ),
                best_starts=[_start_label(best.start[best.depth == d]) for d in depths],
                max_gap=float(best.gap.fillna(0).max()),
                test_over_train=[
                    _largest(best.test_loss[best.depth == d] / best.train_loss[best.depth == d]) for d in depths
                ],
                students=[
                    {k: (v.item() if hasattr(v, "item") else v) for k, v in row.items()}
                    for row in last[STUDENT_FIELDS]
                    .replace({np.nan: None})
                    .sort_values(START_IN_GROUP)
                    .to_dict("records")
                ],
                start_alphas_over_training=(
                    {
                        start: alpha_over_training(history[history.start == start])
                        for start in sorted(history.start.unique())
                    }
                    if history.start.nunique() > 1
                    else {}
                ),
                **_reference_fit(depths, reference),
                **_mismatch_fit(depths, log_losses, teacher_depth),
            )
        )
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
    by_replicate = np.stack(
        [
            log_losses.xs(replicate, axis=1, level="replicate")[depths].to_numpy()
            for replicate in sorted(log_losses.columns.get_level_values("replicate").unique())
        ],
        axis=1,
    )  # steps × replicates × depths
    estimate = alpha_interval(depths, by_replicate)
    return [
        (int(step), float(alpha), float(low), float(high))
        for step, alpha, low, high in zip(log_losses.index, estimate.alpha, estimate.low, estimate.high)
    ]


# What decides a teacher instance and its test set: two runs that agree on these train on the same teachers
# (and students of the same architecture); the temperatures are matched student by student.
TEACHER_FIELDS = ("student", "loss", "teacher_depth", "width", "vocab", "seed", "test_batches", "test_batch_size")


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
                rows.append(
                    {
                        "teacher": fit.teacher,
                        "temperature": fit.temperature,
                        "replicate": student["replicate"],
                        "depth": student["depth"],
                        "test_loss": student["test_loss"],
                        "optimum_loss": optimum["test_loss"],
                        "optimum_start": optimum["start"],
                        "optimum_certified": optimum["certified"],
                        "gap": student["test_loss"] / optimum["test_loss"] - 1,
                    }
                )
    columns = [*SLOT, "test_loss", "optimum_loss", "optimum_start", "optimum_certified", "gap"]
    return pd.DataFrame(rows, columns=columns).sort_values(SLOT, ignore_index=True)
