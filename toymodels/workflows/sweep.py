"""A sweep run into its folder, stage after stage (the pretrain, the sweep's jobs, the polish, the
doubled polish, the budget ladder's rungs), resumed where it stopped; the parts of a grid split by
replicate joined into one run; what a partial run still lacks."""

import contextlib
import json

import pandas as pd
from tqdm.auto import tqdm

from ..config import SweepConfig
from ..errors import ToymodelsError
from ..performance.threads import shared_cores
from ..results.storage import RunFolder, write_table
from ..training.planning import students_bytes
from ..training.preflight import preflight
from ..training.protocol import Protocol
from .fits import run_protocol, write_fit
from .parallel import collect_results, run_jobs, saved_jobs
from .plugins import record_plugins
from .polish import SECOND_DESCENTS, merge_polish
from .stages import SWEEP, run_stages

SMALL_CHECKPOINT_BYTES = 50 * 2**20  # kept by default below this size (--save-students forces, --no-… skips)


def run_sweep(
    config: SweepConfig | Protocol,
    out=None,
    progress: bool = True,
    jobs: int | None = None,
    backend: str = "local",
    scheduler: str | None = None,
    echo=tqdm.write,
    experiment: dict | None = None,
) -> RunFolder:
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
    if nothing_left(RunFolder(path), config, stages, experiment):
        return RunFolder.open(path)  # a finished run is read-only: no file rewritten, its fit as recorded
    if not RunFolder(path).finished():  # nothing is written before the sweep is known to run
        for announcement in (preflight(stage.rehearsal) for stage in stages if stage.rehearsal is not None):
            if announcement:
                echo(announcement)
    folder = RunFolder.create(path, config)
    for change in record_plugins(folder, config):
        echo(change)
    if experiment:  # before the fit, which reads the experiment's depth window
        folder.record_experiment(experiment)
    keep = (
        config.save_students
        or bool(config.polish_batch)
        or (config.save_students is None and students_bytes(protocol) <= SMALL_CHECKPOINT_BYTES)
    )  # the polish starts from them
    in_process = backend == "local" and (jobs or 1) == 1  # joblib gives each worker process its own share
    threads = shared_cores(protocol.device, echo) if in_process else contextlib.nullcontext()
    with threads:  # chosen before the session records them
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


def nothing_left(folder: RunFolder, config: SweepConfig, stages, experiment: dict | None) -> bool:
    """Whether `folder` holds this very run finished and fitted, every stage done and the same
    experiment recorded: then a resume, or `reproduce` of it again, has nothing to write."""
    fitted = all((folder.path / name).is_file() for name in (RunFolder.FIT_JSON, RunFolder.FIT_TXT, RunFolder.FITS_CSV))
    if not fitted or not folder.finished():
        return False
    held = folder.config()
    return (
        held.protocol() == config.protocol()
        and (held.budget_rungs, held.rung_depth_limits) == (config.budget_rungs, config.rung_depth_limits)
        and all(stage.done(folder) for stage in stages)
        and (experiment is None or folder.experiment() == experiment)
    )


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
        if (
            config.replace(replicates=first.replicates, first_replicate=first.first_replicate).protocol()
            != first.protocol()
        ):
            raise ToymodelsError(
                f"{folder.path} is a run of another protocol than {folders[0].path} (their replicates "
                f"apart): only the parts of one grid join"
            )
        if config.first_replicate != first.first_replicate + replicates:
            raise ToymodelsError(
                f"{folder.path} begins at replicate {config.first_replicate}, where the runs before "
                f"it end at {first.first_replicate + replicates - 1}: the parts must follow on from "
                f"each other, none missing, none twice"
            )
        replicates += config.replicates
    joined = first.replace(replicates=replicates)
    if expected is not None and joined.protocol() != expected.protocol():
        raise ToymodelsError(
            f"the runs {', '.join(str(folder.path) for folder in folders)} join to another grid "
            f"than the one asked for (replicates or protocol differ)"
        )
    folder = RunFolder.create(out, joined)
    if experiment:
        folder.record_experiment(experiment)
    sessions = [session for part in folders for session in part.provenance().get("sessions", [])]
    folder.write(
        RunFolder.PROVENANCE,
        json.dumps({"sessions": sessions, "joined_from": [str(part.path) for part in folders]}, indent=2),
    )
    if first.budget_doubling:
        write_table(folder.path / RunFolder.BUDGET_CSV, pd.concat([part.budget_certificate() for part in folders]))
    folder.save_metrics(pd.concat([part.metrics() for part in folders], ignore_index=True))  # the run is finished
    write_fit(folder)
    return folder


def missing_jobs(path) -> list[str]:
    """What a partial run lacks (`path` as in `fit_run`): one line per unfinished job, and one for a
    polish not merged yet (empty for a finished run)."""
    folder = RunFolder.open(path)
    protocol = run_protocol(folder)
    unfinished = [job for job in saved_jobs(folder) or [] if not folder.job(job.name).done()]
    lines = [
        f"{job.name} ({job.describe(protocol)}): "
        + (
            "failed"
            if folder.job(job.name).error()
            else f"at step {folder.job(job.name).progress()} of {protocol.config.steps}"
        )
        for job in unfinished
    ]
    for stage in run_stages(protocol, folder.path) if folder.finished() else []:
        if not stage.done(folder):
            lines.append(
                f"the {stage.name} descent (every student's best start at batch {protocol.config.polish_batch}, "
                f"in {stage.path}): not merged yet, so no student is {stage.name}"
            )
    return lines
