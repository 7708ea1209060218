"""A run's folder on disk: everything downstream (fit, plots, diagnostics) reads only this.

  config.json   the resolved SweepConfig: `toymodels run --config RUN/config.json` repeats the run
  metrics.csv   tidy rows, one per student × evaluation, appended as training goes (so an
                interrupted run keeps what it measured)
  summary.csv   one row per (teacher, temperature): final losses, α and its interval
  summary.txt   the table `toymodels run` printed
  students.pt   the trained students (with --save-students)
"""

import re
from datetime import datetime
from pathlib import Path

import pandas as pd
import torch

from .config import SweepConfig, load_config_file
from .errors import ToymodelsError


def default_run_path(config: SweepConfig) -> Path:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    name = re.sub(r"[^A-Za-z0-9._=-]+", "_", f"{'-'.join(config.teachers)}-{config.student}-{config.loss}")
    return Path("runs") / f"{stamp}-{name}"


class RunFolder:
    CONFIG, METRICS, SUMMARY_CSV, SUMMARY_TXT, STUDENTS = (
        "config.json", "metrics.csv", "summary.csv", "summary.txt", "students.pt")

    def __init__(self, path):
        self.path = Path(path)

    @classmethod
    def create(cls, path, config: SweepConfig) -> "RunFolder":
        """A new run folder holding `config`; refuses a folder that already holds a run."""
        folder = cls(path)
        if (folder.path / cls.CONFIG).exists():
            raise ToymodelsError(f"{folder.path} already holds a run; choose another --out")
        try:
            folder.path.mkdir(parents=True, exist_ok=True)
            folder.write(cls.CONFIG, config.to_json())
        except OSError as error:
            raise ToymodelsError(f"cannot write the results folder {folder.path}: {error.strerror}") from None
        return folder

    @classmethod
    def open(cls, path) -> "RunFolder":
        """An existing run folder; a clear error for anything else."""
        folder = cls(path)
        if not folder.path.is_dir():
            raise ToymodelsError(f"{folder.path} is not a folder")
        for name in (cls.CONFIG, cls.METRICS):
            if not (folder.path / name).is_file():
                raise ToymodelsError(f"{folder.path} is not a toymodels results folder (no {name})")
        return folder

    def finished(self) -> bool:
        """Training ran to the end (the summary is written last)."""
        return (self.path / self.SUMMARY_CSV).is_file()

    def write(self, name: str, text: str) -> Path:
        path = self.path / name
        path.write_text(text)
        return path

    def append_metrics(self, records: pd.DataFrame) -> None:
        path = self.path / self.METRICS
        records.to_csv(path, mode="a", header=not path.exists(), index=False)

    def config(self) -> SweepConfig:
        return SweepConfig().replace(**load_config_file(self.path / self.CONFIG))

    def metrics(self) -> pd.DataFrame:
        try:
            return pd.read_csv(self.path / self.METRICS)
        except (pd.errors.ParserError, pd.errors.EmptyDataError) as error:
            raise ToymodelsError(f"{self.path / self.METRICS} is not readable: {error}") from None

    def save_students(self, sweep) -> int:
        """Write the trained population with what is needed to rebuild it; returns its size in bytes."""
        path = self.path / self.STUDENTS
        torch.save({"specs": [vars(s) for s in sweep.specs],
                    "state_dict": {k: v.cpu() for k, v in sweep.students.state_dict().items()}}, path)
        return path.stat().st_size

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
