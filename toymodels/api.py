"""The Python API behind the CLI: run a sweep into a folder, fit it, plot it.

```python
from toymodels import resolve_config, run_sweep, fit_run
folder = run_sweep(resolve_config("quick", teachers=["tied"], temperatures=[0.1, 1.0]))
for fit in fit_run(folder.path):
    print(fit.teacher, fit.temperature, fit.alpha, fit.alpha_low, fit.alpha_high)
```
"""

import json
from pathlib import Path

import pandas as pd
from tqdm.auto import tqdm

from .config import SweepConfig
from .errors import ToymodelsError
from .analysis.diagnostics import load_students, test_chunk_table, test_loss_noise
from .analysis.layer_errors import SPLIT_TABLES, error_exponents, split_run
from .polish import DOUBLED_START, SECOND_DESCENTS, budget_lines, budget_table, merge_polish, polish_folder, polished
from .results.fitting import DepthFit, completed, fit_depth_exponents
from .results.ladder import extrapolate, ladder_exponents, ladder_rungs, paired_rungs
from .results.report import fit_document, fit_window_line, fits_table, format_table
from .results.storage import RunFolder
from .run_stages import RUNG_PREFIX, SWEEP, run_stages
from .runner import collect_results, run_jobs
from .training.recording import evaluation_steps
from .training.planning import students_bytes
from .training.preflight import preflight
from .training.protocol import Protocol
from .vocabulary import SLOT, STUDENT


SMALL_CHECKPOINT_BYTES = 50 * 2**20  # kept by default below this size (--save-students forces, --no-… skips)


def run_sweep(config: SweepConfig | Protocol, out=None, progress: bool = True, jobs: int | None = None,
              backend: str = "local", scheduler: str | None = None, echo=tqdm.write,
              experiment: dict | None = None) -> RunFolder:
    """Train every student of `config` (as `jobs` jobs side by side, through `backend`), then
    write the run's metrics, students and summary table. `out`: a folder path, a RunFolder, or
    None for runs/<time>-<teacher>-<loss>; a folder holding an unfinished run of the same
    protocol is resumed. Before anything is written the sweep is checked (`preflight`): one that
    cannot run raises ToymodelsError. Raises JobsFailed, after the other jobs have finished, if
    any job failed. `echo` receives the lines for the user (a long sweep, each job's end);
    `experiment` is what `reproduce` records of the experiment it runs (`RunFolder.record_experiment`)."""
    # every name resolved, once: a bad one is one line, before anything
    stages = run_stages(Protocol.of(config), out.path if isinstance(out, RunFolder) else out)
    sweep = next(stage for stage in stages if stage.name == SWEEP)
    protocol, path, config = sweep.protocol, sweep.path, sweep.protocol.config
    if not RunFolder(path).finished():  # nothing is written before the sweep is known to run
        for announcement in (preflight(stage.rehearsal) for stage in stages if stage.rehearsal is not None):
            if announcement:
                echo(announcement)
    folder = RunFolder.create(path, config)
    if experiment:  # before the fit, which reads the experiment's depth window
        folder.record_experiment(experiment)
    keep = config.save_students or bool(config.polish_batch) or (
        config.save_students is None and students_bytes(protocol) <= SMALL_CHECKPOINT_BYTES)  # the polish starts from them
    session = folder.new_session(protocol.device)
    with folder.lock() as owner:
        for stage in (stage for stage in stages if not stage.done(folder)):
            if stage.announcement:
                echo(stage.announcement)
            with session.stage(stage.name):
                if stage.name == SWEEP:
                    run_jobs(protocol, folder, owner, jobs, backend, scheduler, keep, progress, echo)
                    collect_results(protocol, folder, keep)
                    folder.remove_job_students()  # merged into the run's students.pt
                else:
                    own = run_sweep(stage.protocol, stage.path, progress, echo=echo)
                    if stage.name in SECOND_DESCENTS:
                        folder.save_metrics(merge_polish(folder.metrics(), own.metrics(), stage.name))
        with session.stage("fit"):
            write_fit(folder)
    return folder


def budget_doubling(folder: RunFolder) -> pd.DataFrame:
    """The budget certificate of a run whose polish ran twice (`budget_doubling`): per student its
    polished and doubled losses, the move, the test set's noise and whether it is budget-certified
    (polish.budget_table), with the α of its (teacher, temperature) fitted without the doubled
    polish (`alpha_polished`) and with it (`alpha_doubled`, the best of every start)."""
    metrics, protocol = folder.metrics(), folder.protocol()
    table = budget_table(metrics, budget_noise(folder))
    for column, rows in (("alpha_polished", metrics[metrics.start != DOUBLED_START]), ("alpha_doubled", metrics)):
        alphas = {fit.group: fit.alpha for fit in fit_metrics(rows, protocol, fit_window(folder)[0])}
        table[column] = [alphas.get((row.teacher, None if pd.isna(row.temperature) else row.temperature))
                         for row in table.itertuples()]
    return table


def budget_noise(folder: RunFolder) -> pd.DataFrame:
    """Each doubled student's test-set noise (SLOT and `relative_noise`): measured on the students of
    the run's doubled polish, or as its budget certificate recorded it (a joined run keeps no students)."""
    doubled = polish_folder(folder, DOUBLED_START)
    if doubled.is_dir():
        return test_loss_noise(load_students(RunFolder.open(doubled)))
    if (folder.path / RunFolder.BUDGET_CSV).is_file():
        return pd.read_csv(folder.path / RunFolder.BUDGET_CSV)[[*SLOT, "relative_noise"]]
    raise ToymodelsError(f"{folder.path} keeps neither its doubled polish ({doubled}) nor its {RunFolder.BUDGET_CSV}: its "
                         f"budget certificate cannot be measured; run it again with its students kept")


def join_runs(parts, out, experiment: dict | None = None, expected: SweepConfig | None = None) -> RunFolder:
    """One run of a grid split by replicate (`first_replicate`), so that each part finished in one
    sitting: the finished runs in folders `parts`, of one protocol but for their replicates, which
    together must follow on from each other, joined in folder `out`. It holds their config (every
    replicate), their metrics, their budget certificates and provenance, and the fit over all of
    them (`write_fit`); their students and second descents stay in the parts. A grid of one teacher
    kind joins to the numbers the whole grid's run gives. `experiment` as in `run_sweep`; with
    `expected`, refused before anything is written unless the parts join to its grid."""
    folders = sorted((RunFolder.open(part) for part in parts), key=lambda folder: folder.config().first_replicate)
    if len(folders) < 2:
        raise ToymodelsError("joining needs two runs or more (the parts of one grid split by replicate)")
    unfinished = [str(folder.path) for folder in folders if not folder.finished()]
    if unfinished:
        raise ToymodelsError(f"{', '.join(unfinished)}: not finished (`toymodels run --resume RUN` finishes one)")
    first = folders[0].config()
    replicates = first.replicates
    for folder in folders[1:]:
        config = folder.config()
        if config.replace(replicates=first.replicates, first_replicate=first.first_replicate).protocol() \
                != first.protocol():
            raise ToymodelsError(f"{folder.path} is a run of another protocol than {folders[0].path} (their replicates "
                                 f"apart): only the parts of one grid join")
        if config.first_replicate != first.first_replicate + replicates:
            raise ToymodelsError(f"{folder.path} begins at replicate {config.first_replicate}, where the runs before "
                                 f"it end at {first.first_replicate + replicates - 1}: the parts must follow on from "
                                 f"each other, none missing, none twice")
        replicates += config.replicates
    joined = first.replace(replicates=replicates)
    if expected is not None and joined.protocol() != expected.protocol():
        raise ToymodelsError(f"the runs {', '.join(str(folder.path) for folder in folders)} join to another grid "
                             f"than the one asked for (replicates or protocol differ)")
    folder = RunFolder.create(out, joined)
    if experiment:
        folder.record_experiment(experiment)
    sessions = [session for part in folders for session in part.provenance().get("sessions", [])]
    folder.write(RunFolder.PROVENANCE, json.dumps({"sessions": sessions, "joined_from": [str(part.path) for part in folders]},
                                                  indent=2))
    if first.budget_doubling:
        certificates = [pd.read_csv(part.path / RunFolder.BUDGET_CSV) for part in folders]
        folder.write(RunFolder.BUDGET_CSV, pd.concat(certificates).to_csv(index=False))
    folder.save_metrics(pd.concat([part.metrics() for part in folders], ignore_index=True))  # the run is finished
    write_fit(folder)
    return folder


def write_fit(folder: RunFolder) -> list[DepthFit]:
    """Fit a finished run over its own depth window (`fit_window`) and write the three files users
    read, from that one fit so that they agree: fit.txt (the table `toymodels run` prints, with the
    budget certificate where the polish ran twice), fit.json (every fit in full) and fits.csv
    (`fits_table`: one tidy row per teacher and temperature). Returns the fits."""
    min_depth, window = fit_window(folder)
    budget = budget_doubling(folder) if folder.config().budget_doubling else None
    protocol, fits = fitted_run(folder, min_depth, certificate=budget)
    text = format_table(fits, protocol, folder.path, window)
    if budget is not None:
        folder.write(RunFolder.BUDGET_CSV, budget.to_csv(index=False))
        text += "\n" + budget_lines(budget)
    folder.save_fit(text, fit_document(fits, protocol, min_depth), fits_table(fits, vars(protocol.config), min_depth))
    return fits


def load_fits(path) -> pd.DataFrame:
    """The fits of a run as a DataFrame (its fits.csv, `fits_table`): `path` is a run folder, a
    committed results folder (figures/NAME/SCALE) or the fits.csv itself."""
    path = Path(path)
    table = path / RunFolder.FITS_CSV if path.is_dir() else path
    if not table.is_file():
        raise ToymodelsError(f"{path} has no {RunFolder.FITS_CSV}: fit the run with `toymodels fit {path}`, or it "
                             f"predates the file (`toymodels run --resume {path}` writes it)")
    return pd.read_csv(table)


def fit_metrics(metrics, protocol: Protocol, min_depth=1, max_depth=None,
                budget: pd.DataFrame | None = None) -> list[DepthFit]:
    """α per (teacher, temperature) of a run's metrics, certified under the run's protocol: its
    teacher depth ℓ* gives the step-mismatch fit, its students' integrator order the regime
    boundary, its samples (a pool, or fresh) whether test/train can withhold a certificate;
    `budget` (its budget certificate, `polish.budget_table`) withholds it where a doubled budget
    moved a loss."""
    config = protocol.config
    return fit_depth_exponents(metrics, min_depth, max_depth, teacher_depth=config.teacher_depth,
                               order=protocol.architecture.order, reused_samples=bool(config.teacher_pool),
                               budget=budget)


def fit_run(path, min_depth=None, max_depth=None, budget: int | None = None) -> list[DepthFit]:
    """α per (teacher, temperature) of the run in folder `path` (a path or an open `RunFolder`),
    over depths ≥ `min_depth` (default: the run's own window, `RunFolder.fit_min_depth`); with
    `budget`, of the run read as stopped there (`run_at_budget`)."""
    return fitted_run(RunFolder.open(path), min_depth, max_depth, budget)[1]


def fit_window(folder: RunFolder, min_depth: int | None = None, max_depth: int | None = None) -> tuple[int, str]:
    """The smallest depth to fit, the run's own window (`RunFolder.fit_min_depth`) unless
    `min_depth` says otherwise, and the line a table prints to say which window it read."""
    if min_depth is not None:
        return min_depth, fit_window_line(min_depth, max_depth, "--min-depth")
    experiment = folder.experiment().get("name", "its")
    own = folder.fit_min_depth()
    return own, fit_window_line(own, max_depth, f"the {experiment} experiment's, from experiment.json; --min-depth "
                                                f"overrides")


def fitted_run(folder: RunFolder, min_depth=None, max_depth=None, budget: int | None = None,
               certificate: pd.DataFrame | None = None) -> tuple[Protocol, list[DepthFit]]:
    """The protocol an open run is read under (its own, or capped at `budget`) and its fits (over
    the run's own depth window unless `min_depth` is given). Where the run's doubled polish has
    merged, its budget certificate (`certificate`, else measured: `polish.budget_table`) withholds
    the certificate of every student the doubled budget moved."""
    protocol, metrics = run_at_budget(folder, budget)
    min_depth = fit_window(folder, min_depth, max_depth)[0]
    if DOUBLED_START not in set(metrics.get("start", ())):
        certificate = None
    elif certificate is None:
        certificate = budget_table(metrics, budget_noise(folder))
    return protocol, fit_metrics(completed(metrics, protocol.config.steps), protocol, min_depth, max_depth,
                                 certificate)


def run_at_budget(folder: RunFolder, budget: int | None = None) -> tuple[Protocol, pd.DataFrame]:
    """A run's protocol and metrics, or with `budget` (one of its evaluation steps) those of the run
    as it stood there: what the same run with that budget gives, since a budget only caps training
    (rows after it dropped; students still training there capped, not converged). A long run
    stopped early is read so, never with its unfinished students left out."""
    protocol, metrics = folder.protocol(), folder.metrics()
    if budget is None:
        return protocol, metrics
    config = protocol.config
    evaluations = evaluation_steps(config.steps, config.evals)
    if budget not in evaluations:  # where every student still training has a row
        nearest = [step for step in evaluations if step < budget][-1:] + [step for step in evaluations if step > budget][:1]
        raise ToymodelsError(f"budget {budget} is not an evaluation step of {folder.path}; the nearest: "
                             f"{', '.join(map(str, nearest))}")
    behind = [job.name for job in folder.unfinished_jobs() if folder.job(job.name).progress() < budget]
    if behind:
        raise ToymodelsError(f"{folder.path}: job(s) {', '.join(behind)} have not reached step {budget} yet")
    return protocol.replace(steps=budget), metrics[metrics.step <= budget]


def missing_jobs(path) -> list[str]:
    """What a partial run lacks (`path` as in `fit_run`): one line per unfinished job, and one for a
    polish not merged yet (empty for a finished run)."""
    folder = RunFolder.open(path)
    protocol = folder.protocol()
    lines = [f"{job.name} ({job.describe(protocol)}): " + ("failed" if folder.job(job.name).error() else
             f"at step {folder.job(job.name).progress()} of {protocol.config.steps}")
             for job in folder.unfinished_jobs()]
    for stage in run_stages(protocol, folder.path) if folder.finished() else []:
        if not stage.done(folder):
            lines.append(f"the {stage.name} descent (every student's best start at batch {protocol.config.polish_batch}, "
                         f"in {stage.path}): not merged yet, so no student is {stage.name}")
    return lines


def split_layer_errors(path, samples: int = 1024) -> dict[str, pd.DataFrame]:
    """How the layer errors of every saved student of the run at `path` add up (analysis.layer_errors):
    its starts, trained and untrained, and its polish and doubled polish where it ran them (starts
    `polished`, `doubled`); of a joined run, its parts' splits (`joined_layer_errors`). Tidy tables:
    `coherence`, `error_layers`, `error_lags` and `error_exponents` (the output error's exponent
    split into the local errors' and C's)."""
    folder = RunFolder.open(path)
    parts = folder.provenance().get("joined_from")
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
            raise ToymodelsError(f"{part} has no layer-error split: a joined run keeps no students and joins its "
                                 f"parts' splits, so run `toymodels layer-errors {part}` first")
        for name in SPLIT_TABLES:
            frames[name].append(pd.read_csv(part / RunFolder.LAYER_ERRORS / f"{name}.csv"))
    return {name: pd.concat(tables, ignore_index=True) for name, tables in frames.items()}


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
