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

It runs as a run of its own, the `trained` start from this run, in the run's `polish/` folder:
resumable like any run, and merged into the run's metrics.csv when it ends.
"""

from pathlib import Path

import numpy as np
import pandas as pd

from .config import SweepConfig
from .models.starts import TRAINED_START
from .results.fitting import optimisation_gaps
from .results.storage import RunFolder
from .training.racing import SLOT, STUDENT  # SLOT: one student, whose starts the polish takes the best of

POLISHED_START = "polished"  # the start the polish's rows are recorded as
POLISH_FOLDER = "polish"  # the polish's own run, inside the run's folder
STEP_COLUMNS = ("step", "diverged_at_step", "converged_at_step")  # counted on from the parent's last step


def polish_config(config: SweepConfig, run: Path) -> SweepConfig:
    """The polish of the sweep `config` run in folder `run`: the trained start from its students, at
    the polish batch, kept (a later sweep may start from them)."""
    return config.replace(starts=(TRAINED_START,), start_from=str(Path(run).resolve()), batch=config.polish_batch,
                          polish_batch=0, save_students=True)


def polish_folder(run: RunFolder) -> Path:
    return run.path / POLISH_FOLDER


def polished(run: RunFolder) -> bool:
    """Whether the run's metrics hold its polish (a finished run; merged last)."""
    return run.finished() and POLISHED_START in set(run.metrics().start)


def parent_steps(metrics: pd.DataFrame) -> pd.DataFrame:
    """Per student (SLOT), the last step of its best start: the weights the polish took
    (`starts.trained_students`: the start with the lowest last test loss)."""
    last = metrics[metrics.step == metrics.groupby(STUDENT, dropna=False).step.transform("max")]
    best = last.loc[last.groupby(SLOT, dropna=False).test_loss.idxmin()]
    return best[SLOT + ["step"]].rename(columns={"step": "parent_step"})


def merge_polish(metrics: pd.DataFrame, polish: pd.DataFrame) -> pd.DataFrame:
    """The run's `metrics` (without any polish merged before) with the polish's rows: start
    `polished`, steps counted on from the parent's last step, each row's gap taken anew."""
    starts = metrics[metrics.start != POLISHED_START].drop(columns="gap", errors="ignore")
    rows = polish.drop(columns="gap", errors="ignore").assign(start=POLISHED_START)
    rows = rows.merge(parent_steps(starts), on=SLOT, how="left")
    for column in STEP_COLUMNS:
        if column in rows:
            rows[column] = rows[column] + rows.parent_step
    merged = pd.concat([starts, rows.drop(columns="parent_step")], ignore_index=True)
    merged["step"] = merged.step.astype(np.int64)
    return merged.assign(gap=optimisation_gaps(merged))
