"""A run's folder on disk: everything downstream (fit, plots, diagnostics) reads only this.

  config.json   the resolved SweepConfig: `toymodels run --config RUN/config.json` repeats the run
  jobs.json     how the sweep is cut into jobs (a resumed run keeps this cut)
  jobs/NAME/    one job while it trains: metrics.csv (every evaluation so far, rewritten at each),
                checkpoint.pt (the last checkpoint), progress (its step), done.json when it
                has finished, error.txt when it failed, students.pt (its trained students)
  metrics.csv   tidy rows, one per student × evaluation, of all jobs: written once all are done,
                after the merged students, so it marks the run finished
  summary.csv   one row per (teacher, temperature): final losses, α and its interval
  summary.txt   the table `toymodels run` printed
  students.pt   the trained students of all jobs (kept when small, or with --save-students)

Every file a resumed run relies on is written whole and then renamed into place, so a process
killed at any moment leaves either the old file or the new one.
"""

import json
import os
import re
import uuid
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

import pandas as pd
import torch
from filelock import FileLock, Timeout

from .config import SweepConfig, read_config_file
from .errors import ToymodelsError
from .jobs import Job


def default_run_path(config: SweepConfig) -> Path:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    name = re.sub(r"[^A-Za-z0-9._=-]+", "_", f"{'-'.join(config.teachers)}-{config.student}-{config.loss}")
    return Path("runs") / f"{stamp}-{name}"


def write_atomically(path: Path, write) -> None:
    """`write(temporary_path)`, then rename it to `path`: readers never see half a file."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    write(temporary)
    os.replace(temporary, path)


def save_students(path: Path, students) -> None:
    """A trained population (a Students) with the specs needed to rebuild it."""
    write_atomically(path, lambda temporary: torch.save(
        {"specs": [vars(s) for s in students.specs], "state_dict": students.state_dict()}, temporary))


class JobFolder:
    """One job's files inside a run folder (see the module docstring)."""

    METRICS, CHECKPOINT, PROGRESS, DONE, ERROR, STUDENTS = (
        "metrics.csv", "checkpoint.pt", "progress", "done.json", "error.txt", "students.pt")

    def __init__(self, path):
        self.path = Path(path)

    def done(self) -> dict | None:
        """The finished job's outcome, or None while it is unfinished."""
        path = self.path / self.DONE
        return json.loads(path.read_text()) if path.is_file() else None

    def lock(self) -> FileLock:
        """Taken by the worker training the job: waits while a worker of an earlier run still has it."""
        self.path.mkdir(parents=True, exist_ok=True)
        return FileLock(self.path / ".lock")

    def start(self) -> None:
        (self.path / self.ERROR).unlink(missing_ok=True)

    def load_checkpoint(self) -> dict | None:
        path = self.path / self.CHECKPOINT
        return torch.load(path, map_location="cpu") if path.is_file() else None

    def save_checkpoint(self, state: dict) -> None:
        write_atomically(self.path / self.CHECKPOINT, lambda path: torch.save(state, path))

    def write_metrics(self, history: pd.DataFrame) -> None:
        write_atomically(self.path / self.METRICS, lambda path: history.to_csv(path, index=False))

    def metrics(self) -> pd.DataFrame | None:
        path = self.path / self.METRICS
        return pd.read_csv(path) if path.is_file() else None

    def write_progress(self, step: int) -> None:
        write_atomically(self.path / self.PROGRESS, lambda path: path.write_text(str(step)))

    def progress(self) -> int:
        try:
            return int((self.path / self.PROGRESS).read_text())
        except (OSError, ValueError):
            return 0

    def save_students(self, students) -> None:
        save_students(self.path / self.STUDENTS, students)

    def students(self) -> dict:
        return torch.load(self.path / self.STUDENTS, map_location="cpu")

    def finish(self, outcome: dict) -> None:
        """Mark the job done (the last write), then drop its checkpoint."""
        write_atomically(self.path / self.DONE, lambda path: path.write_text(json.dumps(outcome, indent=2)))
        (self.path / self.CHECKPOINT).unlink(missing_ok=True)

    def fail(self, report: str) -> None:
        (self.path / self.ERROR).write_text(report)

    def error(self) -> str | None:
        path = self.path / self.ERROR
        return path.read_text() if path.is_file() else None


class RunFolder:
    CONFIG, JOBS, METRICS, SUMMARY_CSV, SUMMARY_TXT, STUDENTS, LOCK, OWNER = (
        "config.json", "jobs.json", "metrics.csv", "summary.csv", "summary.txt", "students.pt", ".lock", ".owner")

    def __init__(self, path):
        self.path = Path(path)

    @classmethod
    def create(cls, path, config: SweepConfig) -> "RunFolder":
        """A new run folder holding `config`, or the folder of an unfinished or finished run of the
        same protocol, to resume (its jobs keep their cut); refuses a run of another protocol."""
        folder = cls(path)
        if (folder.path / cls.CONFIG).exists():
            if folder.config().protocol() != config.protocol():
                raise ToymodelsError(f"{folder.path} holds a run of another protocol; choose another --out "
                                     f"(or `toymodels run --resume {folder.path}` to finish that one)")
            return folder
        try:
            folder.path.mkdir(parents=True, exist_ok=True)
            folder.write(cls.CONFIG, config.to_json())
        except OSError as error:
            raise ToymodelsError(f"cannot write the results folder {folder.path}: {error.strerror}") from None
        return folder

    @classmethod
    def open(cls, path) -> "RunFolder":
        """An existing run folder, finished or not; a clear error for anything else."""
        folder = cls(path)
        if not folder.path.is_dir():
            raise ToymodelsError(f"{folder.path} is not a folder")
        if not (folder.path / cls.CONFIG).is_file():
            raise ToymodelsError(f"{folder.path} is not a toymodels results folder (no {cls.CONFIG})")
        if not (folder.path / cls.METRICS).is_file() and not (folder.path / cls.JOBS).is_file():
            raise ToymodelsError(f"{folder.path} has no results yet (no {cls.METRICS})")
        return folder

    @contextmanager
    def lock(self):
        """Held while a run trains into this folder: a second run into it is refused. The
        operating system releases it when the process dies, so a killed run can be resumed.
        Yields a token naming this run as the folder's owner (see `owner`)."""
        lock = FileLock(self.path / self.LOCK, timeout=0)
        try:
            lock.acquire()
        except Timeout:
            raise ToymodelsError(f"{self.path} is in use by another toymodels run; wait for it to finish "
                                 f"or choose another --out") from None
        token = uuid.uuid4().hex
        try:
            self.write(self.OWNER, token)
            yield token
        finally:
            lock.release()

    def owner(self) -> str | None:
        """The token of the run that last locked the folder."""
        path = self.path / self.OWNER
        return path.read_text() if path.is_file() else None

    def jobs(self) -> list[Job] | None:
        path = self.path / self.JOBS
        return [Job.from_dict(job) for job in json.loads(path.read_text())] if path.is_file() else None

    def save_jobs(self, jobs: list[Job]) -> None:
        write_atomically(self.path / self.JOBS,
                         lambda path: path.write_text(json.dumps([job.as_dict() for job in jobs], indent=1)))

    def job(self, name: str) -> JobFolder:
        return JobFolder(self.path / "jobs" / name)

    def unfinished_jobs(self) -> list[Job]:
        return [job for job in self.jobs() or [] if not self.job(job.name).done()]

    def finished(self) -> bool:
        """Every job trained to the end and their results are merged (metrics.csv is written last)."""
        return (self.path / self.METRICS).is_file()

    def write(self, name: str, text: str) -> Path:
        path = self.path / name
        write_atomically(path, lambda temporary: temporary.write_text(text))
        return path

    def config(self) -> SweepConfig:
        return SweepConfig().replace(**read_config_file(self.path / self.CONFIG))

    def metrics(self) -> pd.DataFrame:
        """Every evaluation: of the finished run, or of its jobs so far while it is unfinished."""
        path = self.path / self.METRICS
        try:
            return pd.read_csv(path) if path.is_file() else self.job_metrics()
        except (pd.errors.ParserError, pd.errors.EmptyDataError) as error:
            raise ToymodelsError(f"{path} is not readable: {error}") from None

    def job_metrics(self) -> pd.DataFrame:
        """The evaluations of all jobs so far, in job order."""
        tables = [table for table in (self.job(job.name).metrics() for job in self.jobs() or []) if table is not None]
        if not tables:
            raise ToymodelsError(f"{self.path} has no evaluations yet")
        return pd.concat(tables, ignore_index=True)

    def save_metrics(self, metrics: pd.DataFrame) -> None:
        write_atomically(self.path / self.METRICS, lambda path: metrics.to_csv(path, index=False))

    def save_students(self, students) -> None:
        save_students(self.path / self.STUDENTS, students)

    def has_students(self) -> bool:
        return (self.path / self.STUDENTS).is_file()

    def remove_job_students(self) -> None:
        for job in self.jobs() or []:
            (self.job(job.name).path / JobFolder.STUDENTS).unlink(missing_ok=True)

    def save_tables(self, subfolder: str, tables: dict[str, pd.DataFrame]) -> Path:
        """Tidy tables as `<subfolder>/<name>.csv`; returns the subfolder."""
        folder = self.path / subfolder
        folder.mkdir(exist_ok=True)
        for name, table in tables.items():
            table.to_csv(folder / f"{name}.csv", index=False)
        return folder

    def save_summary(self, table: pd.DataFrame, text: str) -> None:
        table.to_csv(self.path / self.SUMMARY_CSV, index=False)
        self.write(self.SUMMARY_TXT, text + "\n")
