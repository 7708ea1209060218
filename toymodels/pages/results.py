"""An experiment's committed result (its file, run folder, protocol and fits, the certificates
other runs withdraw) and the cells every generated page shows it by: α with its interval, the
wall time, markdown tables and links."""

import math
from dataclasses import dataclass, field, replace
from pathlib import Path

import pandas as pd

from ..errors import ToymodelsError
from ..registry import short_name
from ..results.depth_fit import DepthFit
from ..results.provenance import total_seconds
from ..results.storage import RunFolder
from ..results.withdrawal import student_rows, withdrawals, withdrawn_groups
from ..training.protocol import Protocol
from ..workflows.experiment import FIGURES, REFERENCE_DIR, Experiment, experiment_names
from ..workflows.experiment_figures import reference_fits
from ..workflows.fits import run_protocol


@dataclass(frozen=True)
class ExperimentResult:
    """One experiment at one scale, as committed: its file, its run folder, protocol and fits."""

    experiment: Experiment
    scale: str
    folder: Path
    protocol: Protocol
    fits: list[DepthFit]
    # per fit group, its certified students another committed run went below (results/withdrawal.py)
    withdrawn: dict = field(default_factory=dict)

    @classmethod
    def load(cls, name: str, scale: str, results=REFERENCE_DIR) -> "ExperimentResult":
        folder = Path(results) / name / scale
        fits, _ = reference_fits(name, scale, [results])
        if not fits:
            raise ToymodelsError(
                f"{folder} has no fit.json: `toymodels reproduce {name} --scale {scale}` and copy its run folder there"
            )
        return cls(Experiment.load(name), scale, folder, run_protocol(RunFolder.open(folder)), fits)

    @property
    def certified(self) -> bool:
        return all(self.fit_certified(fit) for fit in self.fits)

    def fit_certified(self, fit: DepthFit) -> bool:
        """Its own certificate, and no other committed run went below a student of it."""
        return fit.certified and fit.group not in self.withdrawn

    @property
    def any_withdrawn(self) -> bool:
        return bool(self.withdrawn)

    def figure_files(self) -> list[str]:
        """The PNGs of the run folder: the experiment's figures in its order, then any others."""
        drawn = [FIGURES[name].file_name + ".png" for name in self.experiment.figures]
        present = sorted(path.name for path in self.folder.glob("*.png"))
        return [name for name in drawn if name in present] + [name for name in present if name not in drawn]


def committed_results(results=REFERENCE_DIR, scale: str = "cpu") -> list[ExperimentResult]:
    """Every packaged experiment with a committed run at `scale`, by name, each with the
    certificates the other committed runs withdraw (`committed_withdrawals`)."""
    loaded = [
        ExperimentResult.load(name, scale, results)
        for name in experiment_names()
        if (Path(results) / name / scale / "fit.json").is_file()
    ]
    table = committed_withdrawals(results)
    return [
        replace(result, withdrawn=withdrawn_groups(table, f"{result.experiment.name}/{scale}")) for result in loaded
    ]


def committed_withdrawals(results=REFERENCE_DIR):
    """Every certified student of a committed run that another committed run (any fit.json under
    `results`, a ladder's rungs and a polish included) went below (results/withdrawal.py); runs are
    labelled by their folder under `results` (`ladder_tied_r0_x8/cpu/rung_x8`)."""
    rows = []
    for path in sorted(Path(results).rglob(RunFolder.FIT_JSON)):
        fits, config = reference_fits("", "", [path.parent])
        rows.append(student_rows(path.parent.relative_to(results).as_posix(), fits, vars(config)))
    return withdrawals(pd.concat(rows, ignore_index=True))


def alpha_interval(fit: DepthFit) -> str:
    if math.isnan(fit.alpha_low):  # one teacher and two depths: nothing to take an interval over
        return f"{fit.alpha:.2f} (no interval)"
    return f"{fit.alpha:.2f} [{fit.alpha_low:.2f}, {fit.alpha_high:.2f}]"


def markdown_text(text: str) -> str:
    """Text as markdown shows it literally: a star (ℓ*, a caption's key) never opens an emphasis."""
    return text.replace("*", r"\*")


def markdown_table(header: list[str], rows: list[list[str]]) -> list[str]:
    def line(cells):
        return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"

    return [line(header), "|" + "|".join("---" for _ in header) + "|"] + [line(row) for row in rows]


def wall_time_cell(result: ExperimentResult) -> str:
    """The run's wall time: measured (its provenance), else as its experiment file states it; of a
    run joined from parts, the sum of its parts' (some of which may predate provenance)."""
    return minutes_label(*wall_minutes(result.experiment, result.scale, result.folder))


def minutes_label(minutes: float | None, estimated: bool) -> str:
    if minutes is None:
        return "not measured"
    return f"{'≈ ' if estimated else ''}{minutes:.0f} min"


def wall_minutes(experiment: Experiment, scale: str, folder: Path) -> tuple[float | None, bool]:
    """(minutes, estimated) of an experiment's run in `folder`; (None, False) where nothing says."""
    if experiment.joined_from:
        parts = [
            wall_minutes(Experiment.load(part), scale, folder.parent.parent / Path(part).stem / scale)
            for part in experiment.joined_from
        ]
        if any(minutes is None for minutes, _ in parts):
            return None, False
        return sum(minutes for minutes, _ in parts), any(estimated for _, estimated in parts)
    provenance = RunFolder(folder).provenance()
    if provenance.get("sessions"):
        return total_seconds(provenance) / 60, False
    cost = experiment.cost.get(scale)
    if cost is None or cost.minutes is None:
        return None, False
    return cost.minutes, bool(cost.estimated)


def window_width(window: str) -> int:
    """How many depths apart the ends of a window label ("6–24") are."""
    low, high = (int(depth) for depth in window.split("–"))
    return high - low


def alpha_cell(fits: list[DepthFit]) -> str:
    """α of each teacher: with its interval where the teacher has one fit, as a range over its
    temperatures where it has several."""
    cells = []
    for teacher in dict.fromkeys(fit.teacher for fit in fits):
        own = [fit for fit in fits if fit.teacher == teacher]
        if len(own) == 1:
            cells.append(f"{short_name(teacher)} {alpha_interval(own[0])}")
        else:
            alphas = [fit.alpha for fit in own]
            cells.append(f"{short_name(teacher)} {min(alphas):.2f}–{max(alphas):.2f} at {len(own)} T")
    return "; ".join(cells)


def page_link(name: str) -> str:
    return f"[`{name}`]({name}.md)"
