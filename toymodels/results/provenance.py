"""Where a run came from: the code and software that ran it, the machine and device, and when each
stage ran and for how long. A run folder keeps it as `provenance.json`, one session per time a
process worked on the run (a resumed run adds one), so an experiment's cost is measured, not typed.
"""

import os
import platform
import socket
import subprocess
import sys
import time
from collections import Counter
from contextlib import contextmanager
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

import numpy as np
import torch

from ..errors import ToymodelsError
from ..models.students import STREAM_KEYS
from ..version import NUMBERS, __version__

PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # the checkout an editable install runs from
FIT_STAGE = "fit"  # a session that only fitted a finished run is not recorded: it trained nothing


def git_state(root: Path = PACKAGE_ROOT) -> dict:
    """The commit the package's checkout is at and whether its tracked files differ from it (both
    None outside a git checkout, e.g. an installed wheel)."""

    def git(*args):
        return subprocess.run(
            ["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()

    try:
        return {
            "git_commit": git("rev-parse", "HEAD"),
            "git_dirty": bool(git("status", "--porcelain", "--untracked-files=no")),
        }
    except (OSError, subprocess.SubprocessError):
        return {"git_commit": None, "git_dirty": None}


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        model = next(
            line.partition(":")[2].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        )
    except (OSError, StopIteration):
        model = platform.processor() or platform.machine()
    return f"{model}, {os.cpu_count()} cores, {torch.get_num_threads()} torch threads"


NUMERIC_PACKAGES = ("scipy", "pandas")  # the fits' intervals and the tables: their versions decide the numbers too


def package_version(name: str) -> str | None:
    """An installed distribution's version, read from its metadata (nothing imported); None when absent."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def environment(device: torch.device) -> dict:
    """What ran the session: versions, commit, the device actually used, the host."""
    return {
        "toymodels": __version__,
        **git_state(),
        "stream_keys": STREAM_KEYS,
        "numbers": NUMBERS,
        "checksums": True,  # its tables recorded in checksums.json (storage.CHECKSUMS_WRITTEN)
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": np.__version__,
        **{name: package_version(name) for name in NUMERIC_PACKAGES},
        "device": str(device),
        "device_name": device_name(device),
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
    }


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class Session:
    """One process's work on a run: its environment, start and end, and the wall time of each stage."""

    def __init__(self, device: torch.device, save):
        self.record = {**environment(device), "started": now(), "finished": None, "stages": {}}
        self._save = save  # called with the record after each stage: a killed run keeps what it did

    @contextmanager
    def stage(self, name: str):
        start = time.perf_counter()
        try:
            yield
        except ToymodelsError:  # refused (a bad input, a damaged file): nothing ran, and nothing is written
            raise
        except BaseException:  # interrupted or failed: its time was still spent
            self._add(name, start)
            raise
        self._add(name, start)

    def _add(self, name: str, start: float) -> None:
        stages = self.record["stages"]
        stages[name] = round(stages.get(name, 0.0) + time.perf_counter() - start, 1)
        self.record["finished"] = now()
        if set(stages) - {FIT_STAGE}:
            self._save(self.record)


def total_seconds(provenance: dict) -> float:
    return sum(sum(session["stages"].values()) for session in provenance.get("sessions", []))


def older_numbers(provenance: dict) -> tuple[int, int] | None:
    """(made under, today's) where a run's sessions recorded an older numbers' version
    (`version.NUMBERS`) than today's, else None; a run that recorded none counts as made under 1,
    where the count began."""
    made_under = min((session.get("numbers", 1) for session in provenance.get("sessions", [])), default=1)
    return (made_under, NUMBERS) if made_under < NUMBERS else None


def redrawn_teachers(protocol, provenance: dict) -> list[str]:
    """The teachers whose zero-start students today's code starts from other draws than the run
    did. Before `student_stream` was keyed by what a student is (`STREAM_KEYS` 2), a zero start's
    stream was keyed by its teacher's and temperature's positions in the sweep's lists, which kept
    the first teacher's MSE students; a later keying is taken to redraw every zero start."""
    config = protocol.config
    made_under = min((session.get("stream_keys", 1) for session in provenance.get("sessions", [])), default=1)
    if "zero" not in config.starts or made_under >= STREAM_KEYS:
        return []
    if made_under == 1 and STREAM_KEYS == 2 and not protocol.loss.uses_temperature:
        return list(config.teachers[1:])
    return list(config.teachers)


def redrawn_students(protocol, provenance: dict) -> list[str]:
    """`redrawn_teachers`' zero-start students in words, for a page's note."""
    config = protocol.config
    if not redrawn_teachers(protocol, provenance):
        return []
    made_under = min(session.get("stream_keys", 1) for session in provenance.get("sessions", [{}]))
    if made_under == 1 and STREAM_KEYS == 2:
        return (
            [f"of every teacher after the first ({', '.join(config.teachers[1:])})"] if len(config.teachers) > 1 else []
        ) + (["at every temperature"] if protocol.loss.uses_temperature else [])
    return ["of every teacher" + (" at every temperature" if protocol.loss.uses_temperature else "")]


def provenance_line(provenance: dict) -> str:
    """One line for people: what ran the run, where, when and for how long (stage by stage)."""
    sessions = provenance.get("sessions", [])
    if not sessions:
        return "provenance: not recorded (the run predates it)"
    first, last = sessions[0], sessions[-1]
    commit = last["git_commit"][:10] + (", dirty" if last["git_dirty"] else "") if last["git_commit"] else "no git"
    stages = Counter()
    for session in sessions:
        stages.update(session["stages"])  # keeps a stage of 0 s, as `+` would not
    split = ", ".join(f"{name} {seconds / 60:.1f}" for name, seconds in stages.items())
    resumed = f" in {len(sessions)} sessions" if len(sessions) > 1 else ""
    return (
        f"provenance: toymodels {last['toymodels']} ({commit}), torch {last['torch']}, Python {last['python']}; "
        f"{last['device']} ({last['device_name']}) on {last['host']}; {first['started']} to "
        f"{last['finished']}{resumed}; wall {total_seconds(provenance) / 60:.1f} min ({split})"
    )
