"""Certificates: whether a student reached the best loss of its architecture.

A student's own curve cannot tell. Every (teacher instance, depth) is trained from one or more
starts and has a reference, the untrained `discretised` student; the best of all of them bounds
the best loss from above. A student's *optimisation gap* is its loss over that best − 1. A depth is
certified when its best trained student flattened (the plateau test), its gap is at most
GAP_TOLERANCE and its test loss is within FIT_TOLERANCE of its training loss.
"""

import numpy as np
import pandas as pd

from ..columns import SLOT, SLOT_IN_GROUP, START_IN_GROUP, STUDENT

GAP_TOLERANCE = 0.10  # a certified student is within 10 % of the best loss any start reached


FIT_TOLERANCE = 0.05  # … and tests within 5 % of its training loss (above that it fits its samples)


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


def certify(
    last: pd.DataFrame,
    tolerance: float = GAP_TOLERANCE,
    reused_samples: bool = True,
    budget: pd.DataFrame | None = None,
) -> pd.DataFrame:
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
    return last.assign(
        best_loss=best,
        gap=gap,
        flattened=flattened,
        fits_its_data=fits_its_data,
        budget_certified=budget_certified,
        certified=flattened & (gap <= tolerance) & ~fits_its_data & budget_certified,
        fitted=fitted,
    )


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
