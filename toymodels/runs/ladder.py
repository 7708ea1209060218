"""A run's budget ladder read from its rungs' folders (results/ladder.py does the maths): each
student's loss on every piece of the shared test set at every rung, paired, extrapolated, and α at
every rung and at ∞; a joined run's ladder is its parts'."""

from pathlib import Path

import pandas as pd

from ..analysis.diagnostics import load_students, test_chunk_table
from ..errors import ToymodelsError
from ..results.ladder import extrapolate, ladder_exponents, ladder_rungs, paired_rungs
from ..results.storage import RunFolder
from ..vocabulary import SLOT, STUDENT
from .fits import fit_window
from .polish import polish_folder
from .stages import RUNG_PREFIX


def rung_folders(folder: RunFolder) -> dict[int, Path]:
    """The folder of every rung of a run's budget ladder (`budget_rungs`): ×1 is its last stage (the
    polish, else the run itself), ×k its `rung_x<k>/`."""
    config = folder.config()
    if not config.budget_rungs:
        raise ToymodelsError(f"{folder.path} is not a budget ladder: run it with --budget-rungs (e.g. 2,4)")
    first = polish_folder(folder) if config.polish_batch else folder.path
    return {1: first, **{rung: folder.path / f"{RUNG_PREFIX}{rung}" for rung in config.budget_rungs}}


def rung_chunks(folder: RunFolder) -> pd.DataFrame:
    """Per student (SLOT), rung and piece of the test set: its best start's loss there (`chunk`,
    `loss`) and the steps it ran, every rung on the same samples. Raises ToymodelsError, before
    reading any, naming the first rung that has not finished."""
    folders = rung_folders(folder)
    for rung, path in folders.items():
        if not RunFolder(path).finished():
            raise ToymodelsError(f"{folder.path} lacks rung ×{rung} of its budget ladder ({path}): "
                                 f"`toymodels run --resume {folder.path}` trains it")
    frames = []
    for rung, path in folders.items():
        part = RunFolder.open(path)
        metrics = part.metrics()
        last = metrics[metrics.step == metrics.groupby(STUDENT, dropna=False).step.transform("max")]
        best = last.loc[last.groupby(SLOT, dropna=False).test_loss.idxmin()][[*STUDENT, "step"]]
        chunks = test_chunk_table(load_students(part)).merge(best, on=STUDENT)
        frames.append(chunks.drop(columns="start").rename(columns={"step": "steps"}).assign(rung=rung))
    return pd.concat(frames, ignore_index=True)


def budget_ladder(path) -> dict[str, pd.DataFrame]:
    """The budget ladder of the run at `path` (results/ladder.py): `ladder` (per student: its rungs,
    r and L∞) and `ladder_exponents` (α and local slopes at every rung and at ∞). A joined run keeps
    no students: its ladder is its parts' (each `toymodels ladder PART` first), fitted over every
    replicate. Raises ToymodelsError, before anything is written, where a rung or a part's ladder is
    missing."""
    folder = RunFolder.open(path)
    parts = folder.provenance().get("joined_from")
    if parts:
        missing = [part for part in parts if not (Path(part) / RunFolder.LADDER / "ladder.csv").is_file()]
        if missing:
            raise ToymodelsError(f"{missing[0]} has no budget ladder: a joined run keeps no students and joins its "
                                 f"parts' ladders, so run `toymodels ladder {missing[0]}` first")
        joined = pd.concat([pd.read_csv(Path(part) / RunFolder.LADDER / "ladder.csv") for part in parts],
                           ignore_index=True)
        ladder = extrapolate(long_rungs(joined), joined[[*SLOT, *(c for c in joined if c.startswith("corr_"))]])
    else:
        ladder = extrapolate(*paired_rungs(rung_chunks(folder)))
    return {"ladder": ladder, "ladder_exponents": ladder_exponents(ladder, fit_window(folder)[0])}


def long_rungs(ladder: pd.DataFrame) -> pd.DataFrame:
    """A ladder table (one row per student, loss_x<k>, noise_x<k>, steps_x<k>) back in rows per rung."""
    rungs = ladder_rungs(ladder)
    return pd.concat([ladder[SLOT].assign(rung=rung, test_loss=ladder[f"loss_x{rung}"].to_numpy(),
                                          relative_noise=ladder[f"noise_x{rung}"].to_numpy(),
                                          steps=ladder[f"steps_x{rung}"].to_numpy()) for rung in rungs],
                     ignore_index=True)
