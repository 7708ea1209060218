"""The paper's toy figures, each from one experiment file, and the user's own experiments.

An experiment file (TOML) holds an [experiment] table (title, the figures to draw, the fit's
depth range, what to compare with, the experiment whose trained students it starts from, the
measured cost of each scale), the [protocol] keys every scale shares and one [scales.NAME] table
per scale (a preset and overrides). The paper's are the repository's `experiments/NAME.toml`,
shipped with the package as `toymodels.experiments`; any other file is named by its path.
Every key is checked: an unknown one is one clear line, never silently ignored.

This module reads the files; workflows/reproduce.py runs them, workflows/experiment_figures.py draws them.
"""

from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import pandas as pd

from ..config import SweepConfig, config_from_keys, read_config_file, resolve_config
from ..errors import ToymodelsError
from ..models.starts import TRAINED_START
from ..plotting.fit_figures import (
    plot_alpha_vs_budget,
    plot_alpha_vs_parameter,
    plot_alpha_vs_step,
    plot_alpha_vs_temperature,
    plot_loss_vs_depth,
    plot_regimes,
    plot_step_mismatch,
)
from ..results.depth_fit import DepthFit
from ..results.report import parameter_map, protocol_line
from ..training.protocol import Protocol

PACKAGED_EXPERIMENTS = resources.files("toymodels.experiments")  # the repository's experiments/
REFERENCE_DIR = Path("figures")  # committed results, figures/NAME/SCALE, in a checkout of the repository


@dataclass(frozen=True)
class Figure:
    """What an experiment's `figures` may name: the file it draws, how (from the fits and a
    caption), and for which protocols it means what it says."""

    file_name: str
    draw: Callable[[list[DepthFit], str, Path], list[Path]]
    drawn_for: Callable[[SweepConfig], bool] = lambda config: True
    table: Callable[[list[DepthFit]], pd.DataFrame] | None = None  # its numbers, written beside it as CSV


FIGURES = {
    "depth": Figure("loss_vs_depth", plot_loss_vs_depth),
    "training": Figure("alpha_vs_step", plot_alpha_vs_step),
    # A run capped early under an annealing schedule would anneal differently: not read off this run.
    "budget": Figure("alpha_vs_budget", plot_alpha_vs_budget, lambda config: config.schedule == "constant"),
    "temperature": Figure("alpha_vs_temperature", plot_alpha_vs_temperature),
    "regimes": Figure("regimes", plot_regimes),
    "mismatch": Figure("loss_vs_step_mismatch", plot_step_mismatch),
    "correlation": Figure(
        "alpha_vs_rho",
        lambda fits, caption, path: plot_alpha_vs_parameter(fits, "rho", caption, path),
        table=lambda fits: parameter_map(fits, "rho"),
    ),
}
FILE_KEYS = {"experiment", "protocol", "scales"}
EXPERIMENT_KEYS = {
    "title",
    "claim",
    "claimed_alpha",
    "figures",
    "fit_min_depth",
    "compare_with",
    "start_from",
    "drawn_with",
    "joined_from",
    "optimum_from",
    "cost",
}
COST_KEYS = {"minutes", "estimated", "note"}
RUNS_DIR = Path("runs") / "reproduce"  # where `reproduce NAME --scale S` runs by default: RUNS_DIR/NAME-S


def _check_keys(where: str, table, allowed: set) -> dict:
    if not isinstance(table, dict):
        raise ToymodelsError(f"{where} must be a table of keys, got {table!r}")
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise ToymodelsError(f"{where}: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(allowed))}")
    return table


@dataclass(frozen=True)
class Cost:
    """What one scale of an experiment cost when it was last run: its wall time (None: not run),
    whether that is an estimate rather than one uninterrupted measurement, and how it was run."""

    minutes: float | None
    estimated: bool
    note: str

    @classmethod
    def of(cls, where: str, entry) -> "Cost":
        """An `[experiment.cost]` entry: `{ minutes = 21, note = "…" }`, or a note alone."""
        if isinstance(entry, str):
            return cls(None, False, entry)
        _check_keys(where, entry, COST_KEYS)
        minutes = entry.get("minutes")
        if minutes is not None and (isinstance(minutes, bool) or not isinstance(minutes, (int, float)) or minutes <= 0):
            raise ToymodelsError(f"{where}: minutes must be a positive number, got {minutes!r}")
        return cls(minutes, bool(entry.get("estimated", False)), str(entry.get("note", "")))

    def __str__(self) -> str:
        return (
            self.note
            if self.minutes is None
            else f"{'about ' if self.estimated else ''}{self.minutes:g} min {self.note}"
        )


@dataclass(frozen=True)
class Experiment:
    name: str
    source: str  # the file, for messages
    title: str
    claim: str | None  # what the paper reports for this figure, in words
    claimed_alpha: dict  # teacher → the paper's α, where it gives one
    figures: tuple[str, ...]
    fit_min_depth: int
    compare_with: str | None
    start_from: str | None  # the experiment whose trained students the `trained` start takes, run beside this one
    # experiments of the same protocol but other teachers (one grid split over several files, each
    # short enough to run) whose fits this one's figures draw beside its own, once they have run
    drawn_with: tuple[str, ...]
    # experiments that are the parts of this one's grid split by replicate (each short enough to run
    # in one sitting): it trains nothing, and joins their runs (workflows/sweep.join_runs)
    joined_from: tuple[str, ...]
    optimum_from: str | None  # a certified run on the same teachers: each student's gap to its optimum there
    cost: dict[str, Cost]
    protocol: dict
    scales: dict

    @classmethod
    def load(cls, name_or_path) -> "Experiment":
        """A packaged experiment by name (`regimes`), or any experiment file by its path."""
        path = Path(name_or_path)
        if path.suffix != ".toml":
            path = Path(str(PACKAGED_EXPERIMENTS / f"{name_or_path}.toml"))
            if not path.is_file():
                raise ToymodelsError(
                    f"unknown experiment {str(name_or_path)!r}; choose from "
                    f"{', '.join(experiment_names())}, or give the path of a .toml file"
                )
        content = _check_keys(str(path), read_config_file(path), FILE_KEYS)
        meta = _check_keys(f"{path} [experiment]", content.get("experiment", {}), EXPERIMENT_KEYS)
        scales = content.get("scales")
        if not scales:
            raise ToymodelsError(f'{path} has no [scales.NAME] table (e.g. [scales.cpu] with preset = "cpu")')
        figures = tuple(meta.get("figures", ("depth", "training")))
        unknown = [figure for figure in figures if figure not in FIGURES]
        if unknown:
            raise ToymodelsError(
                f"{path} [experiment]: unknown figure(s) {', '.join(unknown)}; choose from {', '.join(FIGURES)}"
            )
        costs = _check_keys(f"{path} [experiment.cost]", meta.get("cost", {}), set(scales))
        cost = {scale: Cost.of(f"{path} [experiment.cost] {scale}", entry) for scale, entry in costs.items()}
        claimed = meta.get("claimed_alpha", {})
        if not isinstance(claimed, dict) or not all(
            isinstance(a, (int, float)) and not isinstance(a, bool) for a in claimed.values()
        ):
            raise ToymodelsError(f"{path} [experiment] claimed_alpha must be a table of teacher = α, got {claimed!r}")
        drawn_with, joined_from = (meta.get(key, []) for key in ("drawn_with", "joined_from"))
        for key, names in (("drawn_with", drawn_with), ("joined_from", joined_from)):
            if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
                raise ToymodelsError(f"{path} [experiment] {key} must be a list of experiment names, got {names!r}")
        experiment = cls(
            path.stem,
            str(path),
            meta.get("title", path.stem),
            meta.get("claim"),
            claimed,
            figures,
            meta.get("fit_min_depth", 1),
            meta.get("compare_with"),
            meta.get("start_from"),
            tuple(drawn_with),
            tuple(joined_from),
            meta.get("optimum_from"),
            cost,
            content.get("protocol", {}),
            scales,
        )
        for scale in scales:  # every scale's keys are checked now, not when it is first run
            experiment.config(scale)
        return experiment

    def config(self, scale: str | None = None, runs=RUNS_DIR, **overrides) -> SweepConfig:
        """The sweep at `scale` (default: the file's first), with overrides (None = not given); a
        `start_from` experiment's run is the one of that scale in `runs`."""
        scale = scale or next(iter(self.scales))
        if scale not in self.scales:
            raise ToymodelsError(f"{self.source} has no scale {scale!r}; it has {', '.join(self.scales)}")
        keys = {**self.protocol, **self.scales[scale]}
        if self.start_from and TRAINED_START in (overrides.get("starts") or keys.get("starts", ())):
            keys["start_from"] = str(self.source_run(scale, runs).resolve())
        try:
            return config_from_keys(keys, **overrides)
        except ToymodelsError as error:
            raise ToymodelsError(f"{self.source} [scales.{scale}]: {error}") from None

    def start_experiment(self) -> str:
        """The `start_from` experiment: a packaged name, or a .toml path from this file's folder."""
        return str(Path(self.source).parent / self.start_from) if self.start_from.endswith(".toml") else self.start_from

    def source_run(self, scale: str, runs=RUNS_DIR) -> Path:
        """The run of the `start_from` experiment at `scale` that this one starts from."""
        return Path(runs) / f"{Path(self.start_from).stem}-{scale}"

    def record(self, scale: str) -> dict:
        """What a run folder keeps of the experiment run there (`RunFolder.record_experiment`)."""
        return {"name": self.name, "title": self.title, "scale": scale, "fit_min_depth": self.fit_min_depth}

    def caption(self, scale: str, protocol: Protocol) -> str:
        """Which figure, at which scale, under which protocol; a grid smaller than the paper's says so."""
        fitted = f", fit over ℓ ≥ {self.fit_min_depth}" if self.fit_min_depth > 1 else ""
        grid = sweep_grid(protocol.config, protocol.loss.uses_temperature)
        paper = sweep_grid(self.config("paper"), protocol.loss.uses_temperature) if "paper" in self.scales else grid
        grid += "" if paper == grid else f" (the paper's: {paper})"
        return f"{self.name}, {scale} scale: {grid}; {protocol_line(protocol)}{fitted}"


def sweep_grid(config: SweepConfig, temperatures: bool) -> str:
    """The depths and temperatures a sweep trains, in a few words."""
    depths = config.depths
    grid = (
        f"ℓ ∈ {{{', '.join(map(str, depths))}}}"
        if len(depths) <= 5
        else f"{len(depths)} depths {min(depths)}–{max(depths)}"
    )
    if temperatures:
        ts = config.temperatures
        grid += (
            f", T ∈ {{{', '.join(f'{t:g}' for t in ts)}}}"
            if len(ts) <= 4
            else f", {len(ts)} T in [{min(ts):g}, {max(ts):g}]"
        )
    return grid


def experiment_names() -> list[str]:
    return sorted(
        path.name.removesuffix(".toml") for path in PACKAGED_EXPERIMENTS.iterdir() if path.name.endswith(".toml")
    )


def resolve_run_config(preset: str, file=None, scale: str | None = None, **overrides) -> SweepConfig:
    """What `toymodels run` trains: a preset, or a plain config file (or a run's config.json), or an
    experiment file at a scale; then the overrides."""
    if file and FILE_KEYS & set(read_config_file(file)):
        return Experiment.load(file).config(scale, **overrides)
    if scale:
        raise ToymodelsError("--scale goes with an experiment file (one with [scales.NAME] tables)")
    return resolve_config(preset, file, **overrides)
