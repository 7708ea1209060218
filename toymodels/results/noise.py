"""The test set's noise: how far a student's test loss could move on another test set of the same
size, from the spread of its loss over the pieces of the one it has (analysis.diagnostics
evaluates the pieces; results/ladder.py pairs them across the rungs of a budget ladder)."""

import numpy as np
import pandas as pd


def chunk_noise(pieces: pd.DataFrame) -> pd.DataFrame:
    """Per student of `pieces` (its keys, `chunk`, `loss`: its mean loss on each piece of the test
    set) the standard error of its test loss `test_se` and `relative_noise` (se / loss), one row per
    student, its keys first."""
    keys = [column for column in pieces if column not in ("chunk", "loss")]
    spread = pieces.groupby(keys, dropna=False, sort=False).loss.agg(["mean", "std", "count"]).reset_index()
    test_se = spread["std"] / np.sqrt(spread["count"])
    return spread[keys].assign(test_se=test_se, relative_noise=test_se / spread["mean"])
