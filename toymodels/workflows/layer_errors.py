"""A run's layer-error split (analysis/layer_errors.py does the maths): of every saved student, its
starts and its polish and doubled polish where it ran them; a joined run's is its parts'."""

from pathlib import Path

import pandas as pd

from ..analysis.layer_errors import SPLIT_TABLES, error_exponents, split_run
from ..errors import ToymodelsError
from ..results.storage import RunFolder, read_table
from .polish import SECOND_DESCENTS, polish_folder, polished


def split_layer_errors(path, samples: int = 1024) -> dict[str, pd.DataFrame]:
    """How the layer errors of every saved student of the run at `path` add up (analysis.layer_errors):
    its starts, trained and untrained, and its polish and doubled polish where it ran them (starts
    `polished`, `doubled`); of a joined run, its parts' splits (`joined_layer_errors`). Tidy tables:
    `coherence`, `error_layers`, `error_lags` and `error_exponents` (the output error's exponent
    split into the local errors' and C's)."""
    folder = RunFolder.open(path)
    parts = folder.joined_parts()
    if parts:  # a joined run keeps no students: its split is its parts'
        tables = joined_layer_errors(parts)
    else:
        tables = split_run(folder, samples)
        for start in SECOND_DESCENTS:
            if polished(folder, start):
                descent = split_run(RunFolder.open(polish_folder(folder, start)), samples, start=start)
                tables = {name: pd.concat([table, descent[name]], ignore_index=True) for name, table in tables.items()}
    return {**tables, "error_exponents": error_exponents(tables["coherence"])}


def joined_layer_errors(parts) -> dict[str, pd.DataFrame]:
    """The split tables of a joined run (`join_runs`): its parts', each already split on its own
    students (`toymodels layer-errors PART`), one after the other."""
    frames = {name: [] for name in SPLIT_TABLES}
    for part in map(Path, parts):
        if not all((part / RunFolder.LAYER_ERRORS / f"{name}.csv").is_file() for name in SPLIT_TABLES):
            raise ToymodelsError(
                f"{part} has no layer-error split: a joined run keeps no students and joins its "
                f"parts' splits, so run `toymodels layer-errors {part}` first"
            )
        for name in SPLIT_TABLES:
            frames[name].append(
                read_table(
                    part / RunFolder.LAYER_ERRORS / f"{name}.csv", f"`toymodels layer-errors {part}` writes it again"
                )
            )
    return {name: pd.concat(tables, ignore_index=True) for name, tables in frames.items()}
