"""A run's budget ladder read from its rungs' folders (results/ladder.py does the maths): each
student's loss on every piece of the shared test set at every rung, paired, extrapolated, and α at
every rung and at ∞; a joined run's ladder is its parts'."""

from pathlib import Path

import pandas as pd

from ..analysis.diagnostics import load_students, test_chunk_table
from ..columns import SLOT, STUDENT
from ..errors import ToymodelsError
from ..results.ladder import depth_ratios, extrapolate, ladder_exponents, ladder_rungs, paired_rungs, rerun_spreads
from ..results.storage import RunFolder, read_table
from ..results.tails import tail_families
from .fits import fit_window
from .polish import polish_folder
from .stages import RUNG_PREFIX

RATIO_DEPTHS = (12, 24)  # the pair whose loss ratio separates p = 2 from p = 3 (results/ladder.depth_ratios)


def rung_folders(folder: RunFolder) -> dict[int, Path]:
    """The folder of every rung of a run's budget ladder (`budget_rungs`): ×1 is its last stage (the
    polish, else the run itself), ×k its `rung_x<k>/`."""
    config = folder.config()
    if not config.budget_rungs:
        raise ToymodelsError(f"{folder.path} is not a budget ladder: run it with --budget-rungs (e.g. 2,4)")
    first = polish_folder(folder) if config.polish_batch else folder.path
    return {1: first, **{rung: folder.path / f"{RUNG_PREFIX}{rung}" for rung in config.budget_rungs}}


def rung_chunks(folder: RunFolder, rungs: list[int] | None = None) -> pd.DataFrame:
    """Per student (SLOT), rung (of `rungs`; None: all) and piece of the test set: its best start's
    loss there (`chunk`, `loss`) and the steps it ran, every rung on the same samples. Raises
    ToymodelsError, before reading any, naming the first rung that has not finished."""
    folders = rung_folders(folder)
    folders = {rung: path for rung, path in folders.items() if rungs is None or rung in rungs}
    for rung, path in folders.items():
        if not RunFolder(path).finished():
            raise ToymodelsError(
                f"{folder.path} lacks rung ×{rung} of its budget ladder ({path}): "
                f"`toymodels run --resume {folder.path}` trains it"
            )
    frames = []
    for rung, path in folders.items():
        part = RunFolder.open(path)
        metrics = part.metrics()
        last = metrics[metrics.step == metrics.groupby(STUDENT, dropna=False).step.transform("max")]
        best = last.loc[last.groupby(SLOT, dropna=False).test_loss.idxmin()][[*STUDENT, "step"]]
        chunks = test_chunk_table(load_students(part)).merge(best, on=STUDENT)
        frames.append(chunks.drop(columns="start").rename(columns={"step": "steps"}).assign(rung=rung))
    return pd.concat(frames, ignore_index=True)


def saved_ladder(path) -> pd.DataFrame | None:
    """The ladder table `toymodels ladder` wrote in the run at `path`, None where there is none."""
    table = Path(path) / RunFolder.LADDER / "ladder.csv"
    return (
        read_table(
            table,
            f"`toymodels ladder {path}` writes it again where the run kept its students; else restore it from git",
        )
        if table.is_file()
        else None
    )


def rung_table(folder: RunFolder) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per student and rung its test loss, relative noise and steps, and per student the rungs'
    correlations (`paired_rungs`). Rungs whose students were not kept (a committed run, which keeps
    its ladder table but not its students) come from the run's saved ladder table, as they were;
    rungs trained since (a ladder grown by a rung) are paired among themselves, and correlated with
    the saved ones as the student's measured rungs are with each other (`correlation_matrices`)."""
    folders = rung_folders(folder)
    kept = [rung for rung, path in folders.items() if (Path(path) / RunFolder.STUDENTS).is_file()]
    saved = saved_ladder(folder.path)
    if len(kept) == len(folders) or saved is None:
        return paired_rungs(rung_chunks(folder))
    earlier = [rung for rung in folders if rung not in kept]
    lacking = [rung for rung in earlier if f"loss_x{rung}" not in saved]
    if lacking:
        raise ToymodelsError(
            f"rung ×{lacking[0]} of {folder.path} has neither its students nor a saved ladder "
            f"table: re-run it with --save-students"
        )
    rows = long_rungs(saved).drop(columns="rerun_spread", errors="ignore")  # a spread comes with --repeat
    rows = rows[rows.rung.isin(earlier)]
    correlations = saved[
        [
            *SLOT,
            *(
                c
                for c in saved
                if c.startswith("corr_") and all(int(r) in earlier for r in c.removeprefix("corr_x").split("_x"))
            ),
        ]
    ]
    if not kept:
        return rows, correlations
    table, paired = paired_rungs(rung_chunks(folder, kept))
    return pd.concat([rows, table], ignore_index=True), correlations.merge(paired, on=SLOT, how="outer")


def euler_references(folder: RunFolder) -> pd.DataFrame:
    """Per student (SLOT) the untrained Euler rule's test loss at its depth (`reference_loss`: the
    discretised start, which every run records beside its students)."""
    metrics = folder.metrics()
    return metrics.groupby(SLOT, dropna=False).reference_loss.first().reset_index()


def with_rerun_spread(rows: pd.DataFrame, repeat) -> pd.DataFrame:
    """`rows` (per student and rung) with each student's run-to-run spread against the ladder of
    `repeat`, a run of the same protocol made again (on another machine, say: its kernels round
    differently, and a deep student's noisy training carries the difference on)."""
    other = saved_ladder(repeat)
    if other is None:
        raise ToymodelsError(f"{repeat} has no budget ladder to compare with: `toymodels ladder {repeat}` first")
    wide = rows.pivot_table(index=SLOT, columns="rung", values="test_loss", dropna=False)
    wide = wide.set_axis([f"loss_x{rung}" for rung in wide.columns], axis=1).reset_index()
    spreads = wide[SLOT].assign(rerun_spread=rerun_spreads(wide, other).to_numpy())
    if spreads.rerun_spread.isna().all():
        raise ToymodelsError(f"{repeat} holds none of this run's students at its rungs: it is not a repeat of it")
    return rows.merge(spreads, on=SLOT, how="left")


def budget_ladder(path, repeat=None) -> dict[str, pd.DataFrame]:
    """The budget ladder of the run at `path` (results/ladder.py): `ladder` (per student: its rungs,
    every r and L∞) and `ladder_exponents` (α, p and the slope over the Euler rule at every rung and
    at ∞), `ladder_tails` (α∞ and p∞ by every tail family, each judged by its fit to the rungs:
    results/tails.py) and `ladder_ratios` (L(12)/L(24) at every rung and the p it implies). With
    `repeat` (a run of the same protocol made again, its ladder made), every rung's noise carries
    the run-to-run spread the two show. A joined run keeps no students: its ladder is its parts'
    (each `toymodels ladder PART` first), fitted over every replicate; a part without a measured
    spread takes the mean its depth shows on the parts that have one. Raises
    ToymodelsError, before anything is written, where a rung or a part's ladder is missing."""
    folder = RunFolder.open(path)
    parts = folder.joined_parts()
    if parts:
        missing = [part for part in parts if saved_ladder(part) is None]
        if missing:
            raise ToymodelsError(
                f"{missing[0]} has no budget ladder: a joined run keeps no students and joins its "
                f"parts' ladders, so run `toymodels ladder {missing[0]}` first"
            )
        joined = pd.concat([saved_ladder(part) for part in parts], ignore_index=True)
        if "rerun_spread" in joined:
            joined["rerun_spread"] = joined.rerun_spread.fillna(joined.groupby("depth").rerun_spread.transform("mean"))
        ladder = extrapolate(long_rungs(joined), joined[[*SLOT, *(c for c in joined if c.startswith("corr_"))]])
    else:
        rows, correlations = rung_table(folder)
        ladder = extrapolate(rows if repeat is None else with_rerun_spread(rows, repeat), correlations)
    ladder = ladder.merge(euler_references(folder), on=SLOT, how="left")
    min_depth, teacher_depth = fit_window(folder)[0], folder.config().teacher_depth
    return {
        "ladder": ladder,
        "ladder_exponents": ladder_exponents(ladder, min_depth, teacher_depth),
        "ladder_tails": tail_families(ladder, min_depth, teacher_depth),
        "ladder_ratios": depth_ratios(ladder, *RATIO_DEPTHS, teacher_depth),
    }


def long_rungs(ladder: pd.DataFrame) -> pd.DataFrame:
    """A ladder table (one row per student, loss_x<k>, noise_x<k>, steps_x<k>) back in rows per rung
    (a student without a rung, a part of a joined ladder that stopped lower, has no row there)."""
    rungs = ladder_rungs(ladder)
    keys = ladder[[*SLOT, *(["rerun_spread"] if "rerun_spread" in ladder else [])]]
    rows = pd.concat(
        [
            keys.assign(
                rung=rung,
                test_loss=ladder[f"loss_x{rung}"].to_numpy(),
                relative_noise=ladder[f"noise_x{rung}"].to_numpy(),
                steps=ladder[f"steps_x{rung}"].to_numpy(),
            )
            for rung in rungs
        ],
        ignore_index=True,
    )
    return rows.dropna(subset=["test_loss"]).reset_index(drop=True)
