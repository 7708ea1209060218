"""The names every part of the suite shares for a run's rows: the columns of metrics.csv and the
keys that pick out one student. One definition each; training writes them, results read them.

Keys are lists, as pandas takes several group keys (a tuple would be one key).
"""

import numpy as np
import pandas as pd

# Which student a row belongs to.
GROUP = ["teacher", "temperature"]  # one fitted α: a teacher and a target temperature (NaN without one)
SLOT_IN_GROUP = ["replicate", "depth"]  # within a group, one teacher replicate's student depth
START_IN_GROUP = [*SLOT_IN_GROUP, "start"]  # within a group, one start of it
SLOT = [*GROUP, *SLOT_IN_GROUP]  # one student of the sweep: what its starts race for and the polish takes the best of
STUDENT = [*SLOT, "start"]  # one trained network: a slot trained from one start

# The columns of metrics.csv, one row per student × evaluation. Runs written before the engine
# marked when a student diverged or converged lack the MARK_COLUMNS; runs written before starts
# and references lack the CERTIFICATE_COLUMNS (storage reads them as zero starts, no reference);
# runs written before racing lack the RACE_COLUMNS.
METRICS_COLUMNS = ("teacher", "replicate", "temperature", "depth", "step", "train_loss", "test_loss")
MARK_COLUMNS = ("diverged_at_step", "converged_at_step")
CERTIFICATE_COLUMNS = ("start", "reference_loss")  # the start; the untrained discretised student's test loss
RACE_COLUMNS = ("stopped_at_step", "behind_by")  # when a start stopped behind its leader, and its gap then


def with_race_columns(history: pd.DataFrame) -> pd.DataFrame:
    """`history` with the race columns, empty where a run never raced."""
    return history.assign(**{column: history[column] if column in history else np.nan for column in RACE_COLUMNS})
