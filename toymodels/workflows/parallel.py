"""Running a sweep's jobs through joblib: one after another in this process, side by side in
local worker processes (`--jobs N`), or on a dask.distributed cluster (`--backend dask`).

Each job trains into its own folder of the run (storage.JobFolder) and checkpoints there, so
any job can run anywhere that sees the run folder, and a re-run skips the finished jobs and
continues the others from their last checkpoint. A job that raises is reported (its error and
config go to its error.txt) and the others go on.
"""

import contextlib
import sys
import threading
import time
import traceback

import joblib
import torch
from tqdm.auto import tqdm

from ..columns import SLOT
from ..config import BACKENDS
from ..errors import ToymodelsError
from ..models.students import Students
from ..results.certification import optimisation_gaps
from ..results.storage import JobFolder, RunFolder, read_checkpoint
from ..training.engine import refuse_another_device_type, train
from ..training.jobs import Job
from ..training.planning import job_memory_bytes, memory_budget_bytes, plan_jobs, size
from ..training.progress import listening_to_stages
from ..training.protocol import Protocol


def saved_jobs(folder: RunFolder) -> list[Job] | None:
    """The jobs the run was cut into (jobs.json), None before the cut."""
    records = folder.jobs()
    return None if records is None else [Job.from_dict(record) for record in records]


def default_workers(protocol: Protocol) -> int:
    """One job at a time, or one per GPU when there are several and the config names none."""
    device = protocol.device
    return torch.cuda.device_count() if device.type == "cuda" and device.index is None else 1


def job_device(protocol: Protocol, index: int) -> torch.device:
    """The job's device: with several GPUs and none named, jobs take them in turn."""
    device = protocol.device
    if device.type == "cuda" and device.index is None and torch.cuda.device_count() > 1:
        return torch.device("cuda", index % torch.cuda.device_count())
    return device


class JobsFailed(RuntimeError):
    """Some jobs of a sweep raised; the others finished and are on disk."""

    def __init__(self, folder: RunFolder, failed: list[dict]):
        super().__init__(f"{len(failed)} job(s) failed")
        self.folder, self.failed = folder, failed


class RunTakenOver(Exception):
    """Another run (a resume) owns the folder now: this job's worker outlived the run that started it."""


def run_job(protocol: Protocol, job: Job, run_path: str, index: int, keep_students: bool, owner: str) -> dict:
    """Train one job into its folder (from its last checkpoint, if it has one) and return its
    outcome; a finished job is not run again. Runs in whichever worker joblib gives it.

    `owner` is the token of the run that started it. A worker can outlive its run (after kill -9
    of the main process): it stops at its next progress report once another run owns the folder,
    and the job's own lock keeps the two from ever writing the job at the same time."""
    run = RunFolder(run_path)
    folder = run.job(job.name)
    config = protocol.config
    outcome = {"job": job.name, "students": len(job.students()), "description": job.describe(protocol)}

    def report(step):
        if run.owner() != owner:
            raise RunTakenOver
        folder.write_progress(step)

    with folder.lock():
        done = folder.done()
        if done:
            return {**done, "status": "already finished"}
        folder.start()
        try:
            with listening_to_stages(folder.write_stage):
                trained = train(
                    protocol,
                    job,
                    job_device(protocol, index),
                    on_evaluation=folder.write_metrics,
                    on_progress=report,
                    checkpoints=folder,
                )
            if keep_students:
                folder.save_students(trained.students)
            last = trained.history.groupby(SLOT, dropna=False).tail(1)
            diverged = last[last.diverged_at_step.notna()]
            outcome.update(
                status="finished",
                seconds=folder.seconds(),
                split=trained.seconds,
                diverged=diverged[[*SLOT, "diverged_at_step"]].to_dict("records"),
            )
            folder.finish(outcome)
        except RunTakenOver:
            outcome.update(status="taken over", error="another run owns the folder now")
        except Exception as error:  # noqa: BLE001 - one job's failure must not take the sweep down
            folder.fail(
                f"job {job.name} ({outcome['description']}) failed\n\nconfig:\n{config.to_json()}\n\n"
                f"{traceback.format_exc()}"
            )
            outcome.update(status="failed", error=f"{type(error).__name__}: {error}")
    return {**outcome, "notes": folder.notes}


@contextlib.contextmanager
def parallel_backend(backend: str, scheduler: str | None):
    """joblib's backend for `backend`; yields how many jobs it runs at once (None: ask the caller)."""
    if backend == "local":
        yield None
        return
    try:
        from dask.distributed import Client
    except ImportError:
        raise ToymodelsError("the dask backend needs dask.distributed: pip install 'dask[distributed]'") from None
    try:
        client = Client(scheduler, timeout="10s") if scheduler else Client(processes=True, threads_per_worker=1)
    except (OSError, TimeoutError) as error:
        raise ToymodelsError(f"cannot reach the dask scheduler {scheduler}: {error}") from None
    with client, joblib.parallel_config(backend="dask"):
        yield sum(client.nthreads().values())


LINE_EVERY_SECONDS = 60  # progress written to a log or a pipe: one plain line at most this often


class ProgressMonitor(threading.Thread):
    """One bar over all running jobs, fed from the step each job writes to its folder, and below
    it a bar of the stage a job is in before or between its steps (labelling a pool...)."""

    def __init__(self, folder: RunFolder, jobs: list[Job], steps: int, description: str, enabled: bool):
        super().__init__(daemon=True)
        self.folders = [folder.job(job.name) for job in jobs]
        self.enabled = enabled and sys.stderr.isatty()  # bars on a terminal
        self.lines = enabled and not self.enabled  # a log or a pipe: plain lines, no cursor codes
        self.bar = tqdm(
            total=steps * len(jobs), unit="step", dynamic_ncols=True, disable=not self.enabled, desc=description
        )
        self.description, self.started, self.last_line = description, time.monotonic(), None
        self.stage_bar, self.stage_description = None, None
        self.stopping = threading.Event()

    def run(self):
        while not self.stopping.wait(0.5):
            self.refresh()

    def refresh(self, final: bool = False):
        done = sum(f.progress() for f in self.folders)
        self.bar.update(done - self.bar.n)
        if self.lines:
            self.progress_line(done, final)
        stages = [(folder, folder.stage()) for folder in self.folders]
        self.show_stage(next(((folder, stage) for folder, stage in stages if stage), None))

    def show_stage(self, current) -> None:
        """The bar of `current` (a job's folder and its stage), or no bar when it is None."""
        description = None
        if current:
            folder, (what, done, total) = current
            description = f"{folder.path.name}: {what}" if len(self.folders) > 1 else what
        if self.stage_bar is not None and description != self.stage_description:
            self.stage_bar.close()
            self.stage_bar = None
        if self.lines and description and description != self.stage_description:
            print(f"{self.description}: {description}", file=sys.stderr, flush=True)
        self.stage_description = description
        if description is None:
            return
        if self.stage_bar is None:
            self.stage_bar = tqdm(
                total=total,
                desc=description,
                unit="chunk",
                position=1,
                leave=False,
                dynamic_ncols=True,
                disable=not self.enabled,
            )
        self.stage_bar.update(done - self.stage_bar.n)

    def progress_line(self, done: int, final: bool) -> None:
        """Without a terminal, a line every LINE_EVERY_SECONDS, and a last one if any came before."""
        now = time.monotonic()
        due = now - (self.last_line or self.started) >= LINE_EVERY_SECONDS
        if due or (final and self.last_line is not None):
            self.last_line = now
            total = self.bar.total
            print(
                f"{self.description}: {done}/{total} steps ({done / max(total, 1):.0%}) after "
                f"{(now - self.started) / 60:.1f} min",
                file=sys.stderr,
                flush=True,
            )

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stopping.set()
        self.join()
        self.refresh(final=True)
        self.show_stage(None)
        self.bar.close()


def job_plan(protocol: Protocol, folder: RunFolder, workers: int, budget_bytes: int | None, echo) -> list[Job]:
    """The run's jobs: those it was cut into before, or a new cut saved to the folder."""
    jobs = saved_jobs(folder)
    if jobs is None:
        jobs = plan_jobs(protocol, workers, budget_bytes)
        wanted = plan_jobs(protocol, workers)
        if len(jobs) > len(wanted):
            whole = sum(job_memory_bytes(protocol, job) for job in jobs)
            echo(
                f"the sweep needs about {size(whole)} to train at once, more than the {size(budget_bytes)} a job "
                f"may use: it runs as {len(jobs)} jobs, {workers} at a time"
            )
        folder.save_jobs([job.as_dict() for job in jobs])
    return jobs


def refuse_resume_elsewhere(folder: JobFolder, device: torch.device) -> None:
    """One line for the whole run, before any job starts, where a job's checkpoint was written on
    another device type than it would resume on (engine.refuse_another_device_type); not a failure
    of every job. A checkpoint that cannot be read is left to the job, which sets it aside."""
    path = folder.path / JobFolder.CHECKPOINT
    if not path.is_file():
        return
    try:
        saved = read_checkpoint(path)
    except Exception:  # noqa: BLE001 - a damaged file can fail anywhere in unpickling
        return
    refuse_another_device_type(saved, device)


def run_jobs(
    protocol: Protocol,
    folder: RunFolder,
    owner: str,
    workers: int | None = None,
    backend: str = "local",
    scheduler: str | None = None,
    keep_students: bool = True,
    progress: bool = True,
    echo=tqdm.write,
) -> list[dict]:
    """Run the unfinished jobs of the run in `folder`, which this process has locked as `owner`
    (RunFolder.lock); returns the outcome of every job, or raises JobsFailed once the others have
    finished if any failed."""
    if backend not in BACKENDS:
        raise ToymodelsError(f"unknown backend {backend!r}; choose from {', '.join(BACKENDS)}")
    with parallel_backend(backend, scheduler) as cluster_workers:
        config = protocol.config
        workers = workers or cluster_workers or default_workers(protocol)
        budget = memory_budget_bytes(protocol, workers) if backend == "local" or config.max_memory_gb else None
        jobs = job_plan(protocol, folder, workers, budget, echo)
        pending = [(index, job) for index, job in enumerate(jobs) if not folder.job(job.name).done()]
        for index, job in pending:
            refuse_resume_elsewhere(folder.job(job.name), job_device(protocol, index))
        if len(pending) < len(jobs):
            echo(f"resuming {folder.path}: {len(jobs) - len(pending)} of {len(jobs)} jobs finished before")
        students = sum(len(job.students()) for _, job in pending)
        description = f"{students} students" + (f", {len(pending)} jobs" if len(pending) > 1 else "")
        tasks = (
            joblib.delayed(run_job)(protocol, job, str(folder.path.resolve()), index, keep_students, owner)
            for index, job in pending
        )
        outcomes = []
        with ProgressMonitor(folder, [job for _, job in pending], config.steps, description, progress):
            for outcome in joblib.Parallel(n_jobs=-1 if cluster_workers else workers, return_as="generator_unordered")(
                tasks
            ):
                outcomes.append(outcome)
                if len(jobs) > 1 or outcome["status"] == "failed" or outcome.get("notes"):
                    echo(job_line(outcome, len(outcomes), len(pending)))
    failed = [outcome for outcome in outcomes if outcome["status"] == "failed"]
    if failed:
        raise JobsFailed(folder, failed)
    return outcomes


def job_line(outcome: dict, count: int, total: int) -> str:
    """One line per finished (or failed) job, after what was found in its files (a damaged checkpoint)."""
    head = "".join(f"job {outcome['job']}: {note}\n" for note in outcome.get("notes", []))
    head += f"job {count}/{total} {outcome['job']}"
    if outcome["status"] == "failed":
        return f"{head} FAILED: {outcome['error']} ({outcome['description']}; details in its error.txt)"
    if "seconds" not in outcome:  # taken over by another run
        return f"{head} {outcome['status']}: {outcome['error']}"
    diverged = f"; {len(outcome['diverged'])} diverged" if outcome["diverged"] else ""
    return f"{head} done in {outcome['seconds']:.0f} s: {outcome['description']}{diverged}"


def collect_results(protocol: Protocol, folder: RunFolder, keep_students: bool) -> None:
    """Once every job has finished: their students in one students.pt laid out as the whole
    sweep's population (what diagnose reads), then all their evaluations in the run's
    metrics.csv with each row's optimisation gap, which marks the run finished (so it is written
    last)."""
    if keep_students and not folder.has_students():  # merged before a kill: the file is whole (atomic)
        population = Students(protocol, Job.whole(protocol).students())
        for job in saved_jobs(folder):
            share = Students(protocol, job.students())
            share.load_state_dict(folder.job(job.name).students()["state_dict"])
            population.load_students(share)
        folder.save_students(population)
    metrics = folder.job_metrics()
    folder.save_metrics(metrics.assign(gap=optimisation_gaps(metrics)))
