"""A run's folder on disk: everything downstream (fit, plots, diagnostics) reads only this.

  config.json   the resolved SweepConfig: `toymodels run --config RUN/config.json` repeats the run
  jobs.json     how the sweep is cut into jobs (a resumed run keeps this cut)
  jobs/NAME/    one job while it trains: metrics.csv (every evaluation so far, rewritten at each),
                checkpoint.pt (the last checkpoint, with its checksum) and checkpoint.previous.pt
                (the one before), progress (its step), stage.json (while it labels a pool, or does
                other work that is not a training step: what, and how far), done.json when it has finished, error.txt
                when it failed, students.pt (its trained students)
  metrics.csv   tidy rows, one per student × evaluation, of all jobs: written once all are done,
                after the merged students, so it marks the run finished
  fit.txt       the table `toymodels run` printed: the fit over the run's depth window
  fit.json      the same fits in full (α over training, every student's certificate, the window)
  fits.csv      the same fits as a tidy table, one row per (teacher, temperature): α, its interval,
                the window, certified, regime, final losses and the protocol keys (`load_fits`)
  provenance.json  where it came from: per session (each process that worked on it), the package
                version and git commit, torch/Python/numpy, the device used and its name, the host,
                start and end, and each stage's wall time (results/provenance.py)
  students.pt   the trained students of all jobs (kept when small, or with --save-students)

Every file a resumed run relies on is written whole and then renamed into place, so a process
killed at any moment leaves either the old file or the new one. Whatever a file holds when it is
read back (damaged, truncated, or not the suite's), reading it gives one clear ToymodelsError
naming the file, never a traceback; a damaged checkpoint falls back to the previous one. A table a
reader fits from (metrics.csv, fits.csv, the ladder's and the budget certificate's tables) must be
whole: its row count and SHA-256 are recorded beside it in checksums.json when the suite writes it,
and a file whose bytes differ (cut off, even at a row's end; edited) is refused by name; a table
written before the record must at least end with a complete row.
"""

import hashlib
import io
import json
import os
import re
import time
import uuid
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from filelock import FileLock, Timeout

from ..columns import (
    CERTIFICATE_COLUMNS,
    MARK_COLUMNS,
    METRICS_COLUMNS,
    RACE_COLUMNS,
    STUDENT,
)
from ..config import SweepConfig, read_config_file
from ..errors import ToymodelsError
from ..models.students import STREAM_KEYS
from ..version import NUMBERS, __version__
from .provenance import Session


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
    write_atomically(
        path,
        lambda temporary: torch.save(
            {"specs": [vars(s) for s in students.specs], "state_dict": students.state_dict()}, temporary
        ),
    )


def read_students(path: Path) -> dict:
    """What `save_students` wrote, or one clear error."""
    try:
        saved = torch.load(path, map_location="cpu")
        if not isinstance(saved, dict) or not {"specs", "state_dict"} <= saved.keys():
            raise ValueError("not a file of trained students")
        return saved
    except Exception as error:  # noqa: BLE001 - whatever the bytes are, the user gets one line
        raise ToymodelsError(
            f"{path} is damaged or not the suite's ({type(error).__name__}: "
            f"{str(error).splitlines()[0] if str(error) else 'unreadable'})"
        ) from None


def read_json(path: Path, remedy: str):
    """The JSON document in `path`, or one clear error that says what to do (`remedy`)."""
    try:
        return json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise ToymodelsError(f"{path} is damaged ({error}): {remedy}") from None


CHECKSUMS = "checksums.json"  # beside the tables of a folder: {file name: {"rows": n, "sha256": hex}}
CHECKSUMS_WRITTEN = "checksums"  # a session's provenance key: true where its run records its tables' checksums
UNRECORDED: set[Path] = set()  # folders read without a record, each said once (`unrecorded_folders`)


def run_provenance_of(folder: Path) -> Path | None:
    """The provenance.json of the run whose tables a folder holds: its own, or, for a table
    subfolder (ladder/, layer_errors/), its run's. A job's folder appends its metrics and keeps no
    record: the run's is not its."""
    return next(
        (place / "provenance.json" for place in (folder, folder.parent) if (place / "provenance.json").is_file()), None
    )


def recorded_checksums(folder: Path) -> dict | None:
    """The record of a folder's tables, {file name: {"rows", "sha256"}}; None for a folder written
    before records (its tables get the complete-row check, and it is said once). A record that is
    damaged, cut off or empty, or missing where the run's provenance says it wrote one, is refused
    in one line: without it an edited table would be fitted unchecked."""
    path = folder / CHECKSUMS
    restore = f"restore it from git (`git checkout -- {path}`) if it is committed, or run the sweep again"
    if not path.is_file():
        provenance = run_provenance_of(folder)
        if (
            any(folder.glob("*.csv"))
            and provenance is not None
            and any(session.get(CHECKSUMS_WRITTEN) for session in read_json(provenance, restore).get("sessions", []))
        ):
            raise ToymodelsError(
                f"{path} is missing, and {provenance} says the run recorded its tables there: {restore}"
            )
        if (folder / "config.json").is_file():  # a run's own folder: said once (a job's never has one)
            UNRECORDED.add(folder)
        return None
    record = read_json(path, restore)
    if not isinstance(record, dict) or not record:
        raise ToymodelsError(f"{path} records no table: {restore}")
    return record


def write_table(path: Path, table: pd.DataFrame) -> bool:
    """`table` as CSV at `path`, whole (written, then renamed), its row count and SHA-256 recorded
    in the folder's checksums.json for `read_table` (a record that is missing or damaged is begun
    anew: the tables written from here on are recorded). A table already there, byte for byte and
    recorded, is left untouched: returns whether anything was written."""
    data = table.to_csv(index=False).encode()
    entry = {"rows": len(table), "sha256": hashlib.sha256(data).hexdigest()}
    try:
        before = recorded_checksums(path.parent) or {}
    except ToymodelsError:
        before = {}
    if before.get(path.name) == entry and path.is_file() and path.read_bytes() == data:
        return False
    write_atomically(path, lambda temporary: temporary.write_bytes(data))
    record = before | {path.name: entry}
    write_atomically(path.parent / CHECKSUMS, lambda temporary: temporary.write_text(json.dumps(record, indent=1)))
    return True


def read_table(path: Path, remedy: str) -> pd.DataFrame:
    """The CSV table at `path`, refused in one line naming it and `remedy` unless it is whole: the
    bytes the suite recorded when it wrote it, or (no record) a file whose last row is complete."""
    try:
        data = path.read_bytes()
    except OSError as error:
        raise ToymodelsError(f"{path} is not readable ({error.strerror}): {remedy}") from None
    recorded = (recorded_checksums(path.parent) or {}).get(path.name)
    if recorded is not None and hashlib.sha256(data).hexdigest() != recorded.get("sha256"):
        rows = recorded.get("rows")
        raise ToymodelsError(
            f"{path} is damaged: it is not the file the suite wrote ({rows} row{'s' * (rows != 1)}; "
            f"cut off or changed since): {remedy}"
        )
    lines = data.splitlines()
    if recorded is None and (
        not data.endswith(b"\n")
        or len(lines) < 2
        or lines[-1].count(b",") != lines[0].count(b",")
        and b'"' not in lines[-1]
    ):
        raise ToymodelsError(f"{path} is cut off (its last row is incomplete): {remedy}")
    try:
        return pd.read_csv(io.BytesIO(data))
    except (UnicodeDecodeError, pd.errors.ParserError, pd.errors.EmptyDataError) as error:
        raise ToymodelsError(f"{path} is not readable ({type(error).__name__}): {remedy}") from None


def read_metrics(path: Path, remedy: str) -> pd.DataFrame:
    """A metrics table the suite wrote (`columns.METRICS_COLUMNS`, and the MARK_COLUMNS of newer
    runs; numbers where numbers belong), or one clear error naming the file and what to do."""
    table = read_table(path, remedy)
    missing = [column for column in METRICS_COLUMNS if column not in table.columns]
    if missing:
        named = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
        raise ToymodelsError(f"{path} is not a toymodels metrics table (no column {named}): {remedy}")
    if "start" not in table:  # written before starts: every student started from zero, no reference
        table = table.assign(start="zero", reference_loss=np.nan)
    wrong = [
        column
        for column in (*METRICS_COLUMNS, *MARK_COLUMNS, *RACE_COLUMNS, *CERTIFICATE_COLUMNS, "gap")
        if column not in ("teacher", "start") and column in table and not pd.api.types.is_numeric_dtype(table[column])
    ]
    if wrong:
        raise ToymodelsError(f"{path} has text where numbers belong (column {', '.join(wrong)}): {remedy}")
    # one row per student and step: runs before the engine checked convergence ahead of evaluating wrote
    # a student that converged at an evaluation step twice, and the convergence record came last
    return table.drop_duplicates([*STUDENT, "step"], keep="last", ignore_index=True)


CHECKPOINT_HEADER = b"toymodels checkpoint, sha256 "


def write_checkpoint(path: Path, state: dict) -> None:
    """`state` behind a header holding its checksum, so a damaged file is recognised when read."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    payload = buffer.getvalue()
    header = CHECKPOINT_HEADER + hashlib.sha256(payload).hexdigest().encode() + b"\n"
    write_atomically(path, lambda temporary: temporary.write_bytes(header + payload))


def read_checkpoint(path: Path) -> dict:
    """What `write_checkpoint` wrote; ValueError when the file is not whole."""
    data = path.read_bytes()
    header, _, payload = data.partition(b"\n")
    if not header.startswith(CHECKPOINT_HEADER):
        raise ValueError("no checksum header")
    if hashlib.sha256(payload).hexdigest().encode() != header.removeprefix(CHECKPOINT_HEADER):
        raise ValueError("checksum mismatch")
    return torch.load(io.BytesIO(payload), map_location="cpu")


class JobFolder:
    """One job's files inside a run folder (see the module docstring)."""

    METRICS, CHECKPOINT, PREVIOUS_CHECKPOINT, PROGRESS, STAGE, DONE, ERROR, STUDENTS = (
        "metrics.csv",
        "checkpoint.pt",
        "checkpoint.previous.pt",
        "progress",
        "stage.json",
        "done.json",
        "error.txt",
        "students.pt",
    )

    def __init__(self, path):
        self.path = Path(path)
        self.notes = []  # what reading its files found and did (a damaged checkpoint), for the user
        self.started, self.seconds_before = time.perf_counter(), 0.0  # see `seconds`

    def done(self) -> dict | None:
        """The finished job's outcome, or None while it is unfinished."""
        path = self.path / self.DONE
        if not path.is_file():
            return None
        return read_json(
            path,
            f"if the job finished, its {self.METRICS} and {self.STUDENTS} are beside it; "
            f"delete {self.DONE} to train the job again",
        )

    def lock(self) -> FileLock:
        """Taken by the worker training the job: waits while a worker of an earlier run still has it."""
        self.path.mkdir(parents=True, exist_ok=True)
        return FileLock(self.path / ".lock")

    def start(self) -> None:
        for name in (self.ERROR, self.STAGE):  # of a job that failed, or was killed in a stage
            (self.path / name).unlink(missing_ok=True)
        self.started, self.seconds_before = time.perf_counter(), 0.0

    def seconds(self) -> float:
        """Seconds spent training the job since `start`, plus those its checkpoint had kept: over
        resumes, the time of every process up to where the next one took over."""
        return self.seconds_before + time.perf_counter() - self.started

    def load_checkpoint(self) -> dict | None:
        """The newest whole checkpoint: checkpoint.pt, else the previous one. A damaged file is
        set aside (renamed *.damaged) and said so in `notes`; with no whole one left the job
        starts again from step 0, which gives the same numbers, only later."""
        for name in (self.CHECKPOINT, self.PREVIOUS_CHECKPOINT):
            path = self.path / name
            if not path.is_file():
                continue
            try:
                state = read_checkpoint(path)
            except Exception as error:  # noqa: BLE001 - a damaged file can fail anywhere in unpickling
                os.replace(path, path.with_suffix(".damaged"))
                self.notes.append(
                    f"{name} was damaged ({str(error).splitlines()[0]}), set aside as "
                    f"{path.with_suffix('.damaged').name}"
                )
                continue
            if self.notes:
                self.notes.append(f"resumed from {name} at step {state['step']}")
            self.seconds_before = state.get("seconds", 0.0)  # older checkpoints did not keep it
            return state
        if self.notes:
            self.notes.append("no whole checkpoint left: the job starts again from step 0")
        return None

    def save_checkpoint(self, state: dict) -> None:
        """The new checkpoint; the one it replaces is kept as the previous one."""
        current = self.path / self.CHECKPOINT
        if current.is_file():
            os.replace(current, self.path / self.PREVIOUS_CHECKPOINT)
        write_checkpoint(current, {**state, "seconds": self.seconds()})

    def write_metrics(self, history: pd.DataFrame) -> None:
        write_atomically(self.path / self.METRICS, lambda path: history.to_csv(path, index=False))

    def metrics(self) -> pd.DataFrame | None:
        path = self.path / self.METRICS
        return read_metrics(path, f"delete the folder {self.path} to train that job again") if path.is_file() else None

    def write_progress(self, step: int) -> None:
        write_atomically(self.path / self.PROGRESS, lambda path: path.write_text(str(step)))

    def progress(self) -> int:
        try:
            return int((self.path / self.PROGRESS).read_text())
        except (OSError, ValueError):
            return 0

    def write_stage(self, description: str, done: int, total: int) -> None:
        """Where the stage the job is in (stages.stage) stands; a finished stage leaves no file."""
        path = self.path / self.STAGE
        if done >= total:
            path.unlink(missing_ok=True)
        else:
            write_atomically(path, lambda tmp: tmp.write_text(json.dumps([description, done, total])))

    def stage(self) -> tuple[str, int, int] | None:
        """(description, chunks done, chunks in all) of the job's unfinished stage, if it is in one."""
        try:
            description, done, total = json.loads((self.path / self.STAGE).read_text())
        except (OSError, ValueError):
            return None
        return description, done, total

    def save_students(self, students) -> None:
        save_students(self.path / self.STUDENTS, students)

    def students(self) -> dict:
        return read_students(self.path / self.STUDENTS)

    def finish(self, outcome: dict) -> None:
        """Mark the job done (the last write), then drop its checkpoints."""
        write_atomically(self.path / self.DONE, lambda path: path.write_text(json.dumps(outcome, indent=2)))
        for name in (self.CHECKPOINT, self.PREVIOUS_CHECKPOINT):
            (self.path / name).unlink(missing_ok=True)

    def fail(self, report: str) -> None:
        (self.path / self.ERROR).write_text(report)

    def error(self) -> str | None:
        path = self.path / self.ERROR
        return path.read_text() if path.is_file() else None


def newer_than_this(session: dict) -> str:
    """What in a session's provenance is newer than this suite ("" where nothing is): its version,
    its stream keys or its numbers' version."""

    def release(version: str) -> tuple:
        return tuple(int(part) for part in re.findall(r"\d+", str(version))[:3])

    found = []
    if release(session.get("toymodels", "0")) > release(__version__):
        found.append(f"version {session['toymodels']}")
    for key, ours in (("stream_keys", STREAM_KEYS), ("numbers", NUMBERS)):
        if session.get(key, 0) > ours:
            found.append(f"{key} {session[key]}, this one's {ours}")
    return "; ".join(found)


class RunFolder:
    CONFIG, JOBS, METRICS, FIT_TXT, FIT_JSON, FITS_CSV, STUDENTS, LOCK, OWNER, EXPERIMENT, PROVENANCE = (
        "config.json",
        "jobs.json",
        "metrics.csv",
        "fit.txt",
        "fit.json",
        "fits.csv",
        "students.pt",
        ".lock",
        ".owner",
        "experiment.json",
        "provenance.json",
    )
    BUDGET_CSV = "budget_doubling.csv"  # the budget certificate of a run whose polish ran twice (workflows/fits.py)
    LAYER_ERRORS = "layer_errors"  # the subfolder of its layer-error split's tables (`toymodels layer-errors`)
    LADDER = "ladder"  # the subfolder of its budget ladder's tables and figure (`toymodels ladder`)

    def __init__(self, path):
        self.path = Path(path)

    @classmethod
    def create(cls, path, config: SweepConfig) -> "RunFolder":
        """A new run folder holding `config`, or the folder of an unfinished or finished run of the
        same protocol, to resume (its jobs keep their cut); refuses a run of another protocol, and
        a folder that holds anything else (a run never writes beside a user's files)."""
        folder = cls(path)
        if folder.path.exists() and not folder.path.is_dir():
            raise ToymodelsError(f"{folder.path} is a file, not a folder; choose another --out")
        if folder.path.is_dir() and not (folder.path / cls.CONFIG).exists() and any(folder.path.iterdir()):
            raise ToymodelsError(f"{folder.path} holds files and is not a toymodels run; choose a new or empty --out")
        if (folder.path / cls.CONFIG).exists():
            held = folder.config()
            ladder = dict(budget_rungs=config.budget_rungs, rung_depth_limits=config.rung_depth_limits)
            if held.replace(**ladder).protocol() != config.protocol():
                raise ToymodelsError(
                    f"{folder.path} holds a run of another protocol; choose another --out "
                    f"(or `toymodels run --resume {folder.path}` to finish that one)"
                )
            if (held.budget_rungs, held.rung_depth_limits) != (config.budget_rungs, config.rung_depth_limits):
                # a ladder grows by rungs: its rungs so far are each trained on their own, so they stand
                asked = config.rung_depths()
                if any(asked.get(rung) != depths for rung, depths in held.rung_depths().items()):
                    raise ToymodelsError(
                        f"{folder.path} holds a budget ladder with rungs {list(held.budget_rungs)} "
                        f"at depths {held.rung_depths()}; a run there may add rungs, not drop or "
                        f"change them (asked for {asked}): choose another --out"
                    )
                folder.write(cls.CONFIG, held.replace(**ladder).to_json())
            return folder
        try:
            folder.path.mkdir(parents=True, exist_ok=True)
            folder.write(cls.CONFIG, config.to_json())
        except OSError as error:
            raise ToymodelsError(f"cannot write the results folder {folder.path}: {error.strerror}") from None
        return folder

    @classmethod
    def open(cls, path) -> "RunFolder":
        """An existing run folder, finished or not (`path` may be one already open); a clear error
        for anything else."""
        folder = path if isinstance(path, cls) else cls(path)
        if not folder.path.is_dir():
            raise ToymodelsError(f"{folder.path} is not a folder")
        if not (folder.path / cls.CONFIG).is_file():
            raise ToymodelsError(f"{folder.path} is not a toymodels results folder (no {cls.CONFIG})")
        if not (folder.path / cls.METRICS).is_file() and not (folder.path / cls.JOBS).is_file():
            raise ToymodelsError(f"{folder.path} has no results yet (no {cls.METRICS})")
        folder.check_records()
        return folder

    def check_records(self) -> None:
        """Refuse, in one line and before anything is read from it, a run whose records are damaged
        (a JSON record cut off, a checksums record damaged, empty or missing where the run says it
        wrote one) or that a newer suite wrote (its version, stream keys or numbers' version above
        this one's: this code may read it wrongly)."""
        remedies = {
            self.FIT_JSON: "restore it from git if it is committed, or delete it (`fit` reads the run's metrics)",
            self.EXPERIMENT: "delete it, or `toymodels reproduce` the experiment again",
            self.PROVENANCE: f"restore it from git (`git checkout -- {self.path / self.PROVENANCE}`) if committed",
        }
        for name, remedy in remedies.items():
            if (self.path / name).is_file():
                read_json(self.path / name, remedy)
        recorded_checksums(self.path)
        for session in self.provenance().get("sessions", []):
            newer = newer_than_this(session)
            if newer:
                raise ToymodelsError(
                    f"{self.path} was written by a newer toymodels ({newer}): this one, {__version__}, may read "
                    f"it wrongly; upgrade toymodels to read it"
                )

    @contextmanager
    def lock(self):
        """Held while a run trains into this folder: a second run into it is refused. The
        operating system releases it when the process dies, so a killed run can be resumed.
        Yields a token naming this run as the folder's owner (see `owner`)."""
        lock = FileLock(self.path / self.LOCK, timeout=0)
        try:
            lock.acquire()
        except Timeout:
            raise ToymodelsError(
                f"{self.path} is in use by another toymodels run; wait for it to finish or choose another --out"
            ) from None
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

    def jobs(self) -> list[dict] | None:
        """How the run is cut into jobs, as `save_jobs` wrote it (training.jobs.Job.from_dict reads
        each record back); None before the cut."""
        path = self.path / self.JOBS
        if not path.is_file():
            return None
        remedy = "it records how the run is cut into jobs; run the sweep again into a new --out"
        records = read_json(path, remedy)
        if not isinstance(records, list) or not all(isinstance(job, dict) and "name" in job for job in records):
            raise ToymodelsError(f"{path} is not the suite's list of jobs: {remedy}")
        return records

    def save_jobs(self, records: list[dict]) -> None:
        write_atomically(self.path / self.JOBS, lambda path: path.write_text(json.dumps(records, indent=1)))

    def job_names(self) -> list[str]:
        return [job["name"] for job in self.jobs() or []]

    def job(self, name: str) -> JobFolder:
        return JobFolder(self.path / "jobs" / name)

    def unfinished_jobs(self) -> list[str]:
        """The names of the jobs that have not trained to the end."""
        return [name for name in self.job_names() if not self.job(name).done()]

    def finished(self) -> bool:
        """Every job trained to the end and their results are merged (metrics.csv is written last)."""
        return (self.path / self.METRICS).is_file()

    def write(self, name: str, text: str) -> Path:
        path = self.path / name
        write_atomically(path, lambda temporary: temporary.write_text(text))
        return path

    def config(self) -> SweepConfig:
        """The run's config; a run written before starts raced did not race."""
        return SweepConfig().replace(**{"race": False, **read_config_file(self.path / self.CONFIG)})

    PLUGINS = "plugins/plugins.json"  # the plug-in sources the run kept (workflows/plugins.py writes it)
    PLUGGABLE = (
        "student",
        "loss",
        "schedule",
        "optimizer",
        "starts",
    )  # fields naming a component; not row keys, as teachers are

    def runnable_config(self) -> SweepConfig:
        """The run's config with every plug-in file (of the PLUGGABLE fields) that is not where the
        config names it, from this folder or the working directory, read from the copy the run kept:
        a committed run of `examples/rk4_student.py:rk4` reads from anywhere."""
        config, record = self.config(), self.path / self.PLUGINS
        kept = json.loads(record.read_text()) if record.is_file() else {}

        def found(spec: str) -> str:
            source = spec.rpartition(":")[0]
            if not source.endswith(".py") or Path(source).is_file() or spec not in kept:
                return spec
            return f"{(self.path / kept[spec][-1]['copy']).resolve()}:{spec.rpartition(':')[2]}"

        return config.replace(
            **{
                field: found(value) if isinstance(value, str) else tuple(map(found, value))
                for field in self.PLUGGABLE
                for value in [getattr(config, field)]
            }
        )

    def record_experiment(self, record: dict) -> None:
        """What `reproduce` ran here: the experiment's name, scale, title and the depth window its fit
        reads (`fit_min_depth`), so that `fit`, `plot` and the docs read the run as the experiment does."""
        self.write(self.EXPERIMENT, json.dumps(record, indent=2))

    def experiment(self) -> dict:
        """The experiment record `reproduce` left here ({} for a plain `toymodels run`)."""
        path = self.path / self.EXPERIMENT
        return read_json(path, "delete it, or `toymodels reproduce` it again") if path.is_file() else {}

    def provenance(self) -> dict:
        """Where the run came from ({} for a run that predates the record): {"sessions": [...]}."""
        path = self.path / self.PROVENANCE
        return read_json(path, "delete it: it only records where the run came from") if path.is_file() else {}

    def joined_parts(self) -> list[Path]:
        """The folders of the runs this one was joined from ([]: not a joined run). A part recorded
        as a run of `reproduce` (RUNS/NAME-SCALE) that is not there is looked for where this run
        is committed beside it (DIR/NAME/SCALE, as the repository's figures/ keeps them)."""
        parts = [Path(part) for part in self.provenance().get("joined_from", [])]
        tree = self.path.resolve().parent.parent
        return [
            part
            if part.is_dir() or "-" not in part.name
            else tree / part.name.rpartition("-")[0] / part.name.rpartition("-")[2]
            for part in parts
        ]

    def new_session(self, device: torch.device) -> Session:
        """A session of work on this run, appended to provenance.json after each of its stages."""
        before = self.provenance().get("sessions", [])
        return Session(
            device, lambda record: self.write(self.PROVENANCE, json.dumps({"sessions": [*before, record]}, indent=2))
        )

    def fit_min_depth(self) -> int:
        """The smallest depth the run's fit reads by default: its experiment's window, else every depth."""
        return int(self.experiment().get("fit_min_depth", 1))

    def metrics(self) -> pd.DataFrame:
        """Every evaluation: of the finished run, or of its jobs so far while it is unfinished."""
        path = self.path / self.METRICS
        return read_metrics(path, self.metrics_remedy()) if path.is_file() else self.job_metrics()

    def metrics_remedy(self) -> str:
        """What brings a damaged metrics.csv back: its jobs' files where the run kept them; else (a
        committed results folder keeps none) git, or the experiment run again."""
        jobs = self.job_names()
        if jobs and all(self.job(name).metrics() is not None for name in jobs):
            return f"delete it, and `toymodels run --resume {self.path}` writes it again from its jobs' files"
        name = self.experiment().get("name")
        again = f"`toymodels reproduce {name}` runs it again" if name else "run the sweep again"
        return (
            f"its jobs' files are not kept here: restore it from git (`git checkout -- {self.path / self.METRICS}`) "
            f"if it is committed, or {again}"
        )

    def job_metrics(self) -> pd.DataFrame:
        """The evaluations of all jobs so far, in job order."""
        tables = [table for table in (self.job(name).metrics() for name in self.job_names()) if table is not None]
        if not tables:
            raise ToymodelsError(f"{self.path} has no evaluations yet")
        return pd.concat(tables, ignore_index=True)

    def save_metrics(self, metrics: pd.DataFrame) -> None:
        write_table(self.path / self.METRICS, metrics)

    def save_students(self, students) -> None:
        save_students(self.path / self.STUDENTS, students)

    def students(self) -> dict:
        return read_students(self.path / self.STUDENTS)

    def has_students(self) -> bool:
        return (self.path / self.STUDENTS).is_file()

    def remove_job_students(self) -> None:
        for name in self.job_names():
            (self.job(name).path / JobFolder.STUDENTS).unlink(missing_ok=True)

    def save_tables(self, subfolder: str, tables: dict[str, pd.DataFrame]) -> tuple[Path, bool]:
        """Tidy tables as `<subfolder>/<name>.csv`; returns the subfolder and whether any table
        changed (one already there byte for byte is left untouched)."""
        folder = self.path / subfolder
        folder.mkdir(exist_ok=True)
        changed = [write_table(folder / f"{name}.csv", table) for name, table in tables.items()]
        return folder, any(changed)

    def budget_certificate(self) -> pd.DataFrame:
        """The budget certificate the run recorded (BUDGET_CSV), whole, or one line naming it."""
        return read_table(
            self.path / self.BUDGET_CSV,
            f"`toymodels fit {self.path}` writes it again from its "
            f"doubled polish, where the run kept it; else restore it from git",
        )

    def save_fit(self, text: str, document: dict, table: pd.DataFrame) -> None:
        """One fit three ways (workflows/fits.write_fit): the table, the JSON document and the tidy CSV."""
        self.write(self.FIT_TXT, text + "\n")
        self.write(self.FIT_JSON, json.dumps(document, indent=2, allow_nan=False))  # strict JSON: NaN is null
        write_table(self.path / self.FITS_CSV, table)
