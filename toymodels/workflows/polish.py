"""The polish: a second, quieter descent of every student after its starts (`polish_batch`).

A student's certified loss is the best of its starts, each trained until the plateau test says a
further rate decay buys nothing. At the sweeps' batch of 256 the gradient noise sets where that
test sees a plateau: the paper's own loop (batch 1024, 40 000 steps) ended 25–33 % below certified
tied students at ℓ 12–24. With `polish_batch`, once every start has finished, each student's best
start (its lowest test loss) trains on from its weights at that batch, on fresh samples, from its
depth's rate × lr_decay^`trained_decays_spent`, under the same plateau test, to convergence.

The polish is one more start of the student, `polished`: its rows continue the curve of the start
it took (its steps counted on from that start's last), so the certificate, the fit and every
figure take the best of the starts and the polish, and the starts' gaps say what it bought.

It runs as a run of its own (stages.py), the `trained` start from this run, in the run's
`polish/` folder: resumable like any run, and merged into the run's metrics.csv when it ends.

A polished loss is the best *that schedule* reached. With `budget_doubling` the polish runs again
from the same start with twice its budget (every plateau window and the step cap twice as long),
in `polish_doubled/`, one more start `doubled`. A student whose loss moves by no more than its
test set's noise plus DOUBLING_MARGIN is budget-certified; otherwise its best loss lies below what
either reached (`budget_table`): it is not certified, so the run's α is a lower bound, and a fit of
each says how far α moved.
"""

from pathlib import Path

import numpy as np
import pandas as pd

from ..columns import (  # SLOT: one student, whose starts the polish takes the best of
    SLOT,
    STUDENT,
)
from ..results.certification import optimisation_gaps
from ..results.storage import RunFolder

POLISHED_START = "polished"  # the start the polish's rows are recorded as
POLISH_FOLDER = "polish"  # the polish's own run, inside the run's folder
DOUBLED_START, DOUBLED_FOLDER = "doubled", "polish_doubled"  # the polish again, with twice its budget
SECOND_DESCENTS = {POLISHED_START: POLISH_FOLDER, DOUBLED_START: DOUBLED_FOLDER}  # trained on from a best start
STEP_COLUMNS = ("step", "diverged_at_step", "converged_at_step")  # counted on from the parent's last step


def polish_folder(run: RunFolder, start: str = POLISHED_START) -> Path:
    return run.path / SECOND_DESCENTS[start]


def polished(run: RunFolder, start: str = POLISHED_START) -> bool:
    """Whether the run's metrics hold its polish (or its doubled polish, `start`): merged last."""
    return run.finished() and start in set(run.metrics().start)


def parent_steps(metrics: pd.DataFrame) -> pd.DataFrame:
    """Per student (SLOT), the last step of its best start: the weights the polish took
    (`training.trained_runs.trained_students`: the start with the lowest last test loss)."""
    last = metrics[metrics.step == metrics.groupby(STUDENT, dropna=False).step.transform("max")]
    best = last.loc[last.groupby(SLOT, dropna=False).test_loss.idxmin()]
    return best[SLOT + ["step"]].rename(columns={"step": "parent_step"})


def merge_polish(metrics: pd.DataFrame, polish: pd.DataFrame, start: str = POLISHED_START) -> pd.DataFrame:
    """The run's `metrics` (without any rows of `start` merged before) with the rows of a polish
    run (`start`: polished, or doubled): steps counted on from the parent's last step, each row's
    gap taken anew."""
    kept = metrics[metrics.start != start].drop(columns="gap", errors="ignore")
    rows = polish.drop(columns="gap", errors="ignore").assign(start=start)
    rows = rows.merge(parent_steps(kept[~kept.start.isin(list(SECOND_DESCENTS))]), on=SLOT, how="left")
    for column in STEP_COLUMNS:
        if column in rows:
            rows[column] = rows[column] + rows.parent_step
    merged = pd.concat([kept, rows.drop(columns="parent_step")], ignore_index=True)
    merged["step"] = merged.step.astype(np.int64)
    return merged.assign(gap=optimisation_gaps(merged))
