"""The paper's toy figures, each from one experiment file, and the user's own experiments.

An experiment file (TOML) holds an [experiment] table (title, the figures to draw, the fit's
depth range, what to compare with, the experiment whose trained students it starts from, the
measured cost of each scale), the [protocol] keys every scale shares and one [scales.NAME] table
per scale (a preset and overrides). The paper's are the repository's `experiments/NAME.toml`,
shipped with the package as `toymodels.experiments`; any other file is named by its path.
Every key is checked: an unknown one is one clear line, never silently ignored.

`reproduce` runs an experiment into a folder (or reuses a finished run of the same protocol
there), fits it over the experiment's depth window (fit.txt, fit.json, fits.csv), and draws the figures the file names.
"""

from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import pandas as pd

from .api import join_runs, run_sweep
from .config import SweepConfig, config_from_keys, read_config_file, resolve_config
from .errors import ToymodelsError
from .models.starts import TRAINED_START
from .plotting.runs import (plot_alpha_vs_budget, plot_alpha_vs_parameter, plot_alpha_vs_step,
                             plot_alpha_vs_temperature, plot_comparison, plot_gap_to_optimum, plot_loss_vs_depth,
                             plot_regimes, plot_step_mismatch)
from .results.fitting import TEACHER_FIELDS, DepthFit, gaps_to_optimum
from .results.report import comparison_table, gap_table, parameter_map, protocol_line
from .results.storage import RunFolder, read_json
from .training.jobs import Job
from .training.planning import sweep_flops
from .training.protocol import Protocol

PACKAGED_EXPERIMENTS = resources.files(f"{__package__}.experiments")  # the repository's experiments/
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
    "correlation": Figure("alpha_vs_rho", lambda fits, caption, path: plot_alpha_vs_parameter(fits, "rho", caption, path),
                          table=lambda fits: parameter_map(fits, "rho")),
}
FILE_KEYS = {"experiment", "protocol", "scales"}
EXPERIMENT_KEYS = {"title", "claim", "claimed_alpha", "figures", "fit_min_depth", "compare_with", "start_from",
                   "drawn_with", "joined_from", "optimum_from", "cost"}
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
        return self.note if self.minutes is None else f"{'about ' if self.estimated else ''}{self.minutes:g} min {self.note}"


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
    # in one sitting): it trains nothing, and joins their runs (api.join_runs)
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
                raise ToymodelsError(f"unknown experiment {str(name_or_path)!r}; choose from "
                                     f"{', '.join(experiment_names())}, or give the path of a .toml file")
        content = _check_keys(str(path), read_config_file(path), FILE_KEYS)
        meta = _check_keys(f"{path} [experiment]", content.get("experiment", {}), EXPERIMENT_KEYS)
        scales = content.get("scales")
        if not scales:
            raise ToymodelsError(f"{path} has no [scales.NAME] table (e.g. [scales.cpu] with preset = \"cpu\")")
        figures = tuple(meta.get("figures", ("depth", "training")))
        unknown = [figure for figure in figures if figure not in FIGURES]
        if unknown:
            raise ToymodelsError(f"{path} [experiment]: unknown figure(s) {', '.join(unknown)}; "
                                 f"choose from {', '.join(FIGURES)}")
        costs = _check_keys(f"{path} [experiment.cost]", meta.get("cost", {}), set(scales))
        cost = {scale: Cost.of(f"{path} [experiment.cost] {scale}", entry) for scale, entry in costs.items()}
        claimed = meta.get("claimed_alpha", {})
        if not isinstance(claimed, dict) or not all(isinstance(a, (int, float)) and not isinstance(a, bool)
                                                    for a in claimed.values()):
            raise ToymodelsError(f"{path} [experiment] claimed_alpha must be a table of teacher = α, got {claimed!r}")
        drawn_with, joined_from = (meta.get(key, []) for key in ("drawn_with", "joined_from"))
        for key, names in (("drawn_with", drawn_with), ("joined_from", joined_from)):
            if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
                raise ToymodelsError(f"{path} [experiment] {key} must be a list of experiment names, got {names!r}")
        experiment = cls(path.stem, str(path), meta.get("title", path.stem), meta.get("claim"), claimed, figures,
                         meta.get("fit_min_depth", 1), meta.get("compare_with"), meta.get("start_from"),
                         tuple(drawn_with), tuple(joined_from), meta.get("optimum_from"), cost,
                         content.get("protocol", {}), scales)
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
    grid = f"ℓ ∈ {{{', '.join(map(str, depths))}}}" if len(depths) <= 5 else f"{len(depths)} depths {min(depths)}–{max(depths)}"
    if temperatures:
        ts = config.temperatures
        grid += f", T ∈ {{{', '.join(f'{t:g}' for t in ts)}}}" if len(ts) <= 4 else f", {len(ts)} T in [{min(ts):g}, {max(ts):g}]"
    return grid


def experiment_names() -> list[str]:
    return sorted(path.name.removesuffix(".toml") for path in PACKAGED_EXPERIMENTS.iterdir()
                  if path.name.endswith(".toml"))


def resolve_run_config(preset: str, file=None, scale: str | None = None, **overrides) -> SweepConfig:
    """What `toymodels run` trains: a preset, or a plain config file (or a run's config.json), or an
    experiment file at a scale; then the overrides."""
    if file and FILE_KEYS & set(read_config_file(file)):
        return Experiment.load(file).config(scale, **overrides)
    if scale:
        raise ToymodelsError("--scale goes with an experiment file (one with [scales.NAME] tables)")
    return resolve_config(preset, file, **overrides)


def describe_experiments() -> str:
    """`reproduce --list`: each experiment with its protocol, matmul work and cost at each scale."""
    lines = []
    for name in experiment_names():
        experiment = Experiment.load(name)
        lines.append(f"{name:<10} {experiment.title}")
        for scale in experiment.scales:
            protocol = Protocol.of(experiment.config(scale))
            work = sweep_flops(protocol) / 1e15
            lines.append(f"  {scale:<6} {len(Job.whole(protocol).students())} students; {protocol_line(protocol)}")
            # no time from the work alone: on a GPU the steps are bound by their launches (docs/performance.md)
            lines.append(f"         {work:.3g} PFLOP of matmuls; {experiment.cost.get(scale, 'cost not measured')}")
    return "\n".join(lines)


def reproduce(name_or_path, scale: str = "cpu", out=None, progress: bool = True, reference=REFERENCE_DIR,
              **overrides):
    """Run (or reuse) an experiment at `scale` in `out`, then write its fit and figures.
    Returns the run folder, the fits and the figure files."""
    experiment = Experiment.load(name_or_path)
    folder = RunFolder(out or RUNS_DIR / f"{experiment.name}-{scale}")
    config = experiment.config(scale, folder.path.parent, **overrides)
    if experiment.start_from and config.start_from and overrides.get("start_from") is None:
        # the trained start takes that experiment's students: run it first (a finished run is reused)
        reproduce(experiment.start_experiment(), scale, experiment.source_run(scale, folder.path.parent), progress, reference,
                  **overrides)
    protocol = Protocol.of(config)
    optimum_fits(experiment, scale, config, folder.path.parent, reference)  # checked before training
    if experiment.joined_from:
        join_parts(experiment, scale, config, folder, reference)
    else:  # a finished run of the same protocol is reused; either way it is fitted over the experiment's window
        run_sweep(protocol, folder.path, progress=progress, experiment=experiment.record(scale))
    fits, _ = reference_fits(experiment.name, scale, [folder.path])
    return folder, fits, draw_experiment(experiment, scale, folder, fits, protocol, reference)


def join_parts(experiment: Experiment, scale: str, config: SweepConfig, folder: RunFolder, reference) -> None:
    """The runs of the experiment's `joined_from` parts at `scale` (beside `folder`, else committed in
    `reference`) joined in `folder`, refused unless they make the experiment's own grid."""
    parts = []
    for name in map(lambda part: Path(part).stem, experiment.joined_from):
        places = run_places(name, scale, folder.path.parent, reference)
        found = next((place for place in places if RunFolder(place).finished()), None)
        if found is None:
            raise ToymodelsError(f"{experiment.source} joins {name}, which has no finished {scale} run in "
                                 f"{places[0]} or {places[1]}: `toymodels reproduce {name} --scale {scale}` first")
        parts.append(found)
    try:
        join_runs(parts, folder.path, experiment.record(scale), expected=config)
    except ToymodelsError as error:
        raise ToymodelsError(f"{experiment.source} [scales.{scale}]: {error}") from None


def redraw(name_or_path, scale: str = "cpu", out=None, reference=REFERENCE_DIR) -> tuple[RunFolder, list[Path]]:
    """Draw an experiment's figures again from its finished run in `out` (a run folder, or a
    committed one like figures/NAME/SCALE), from the fits its fit.json holds: nothing is trained
    or fitted again. For a new look of the figures, or figures lost."""
    experiment = Experiment.load(name_or_path)
    folder = RunFolder.open(out or RUNS_DIR / f"{experiment.name}-{scale}")
    fits, _ = reference_fits(experiment.name, scale, [folder.path])
    if not fits:
        raise ToymodelsError(f"{folder.path} has no fit.json to draw from: `toymodels reproduce {experiment.name}` "
                             f"runs and fits it")
    return folder, draw_experiment(experiment, scale, folder, fits, folder.protocol(), reference)


def draw_experiment(experiment: Experiment, scale: str, folder: RunFolder, fits: list[DepthFit], protocol: Protocol,
                    reference) -> list[Path]:
    """The figures (and their tables) the experiment names, its comparison with the run it is
    compared with, and its gaps to the certified run it measures them against; returns the files."""
    config = protocol.config
    optimum, optima = optimum_fits(experiment, scale, config, folder.path.parent, reference)
    caption = experiment.caption(scale, protocol)
    beside, drawn = fits_drawn_with(experiment, scale, config, folder.path.parent, reference)
    caption += f"; beside the fits of {', '.join(drawn)}" if drawn else ""
    figures = []
    for figure in (FIGURES[name] for name in experiment.figures):
        if figure.drawn_for(config):
            figures += figure.draw(beside + fits, caption, folder.path / figure.file_name)
            if figure.table:
                figures.append(folder.write(f"{figure.file_name}.csv", figure.table(beside + fits).to_csv(index=False)))
    if experiment.compare_with:
        other = experiment.compare_with
        other_fits, other_config = run_beside(other, scale, folder.path.parent, reference)
        # Drawn only beside the same protocol: a comparison across protocols would compare more than students.
        if other_fits and other_config.replace(student=config.student).protocol() == config.protocol():
            comparison = {f"{other} ({other_config.student})": other_fits, f"{experiment.name} ({config.student})": fits}
            folder.write(f"compared_with_{other}.txt", comparison_table(comparison, protocol) + "\n")
            figures += plot_comparison(comparison, caption, folder.path / f"compared_with_{other}")
    if optima:
        figures += write_gaps_to_optimum(experiment.name, optimum, optima, folder, fits, caption)
    return figures


def optimum_fits(experiment: Experiment, scale: str, config: SweepConfig, runs: Path,
                 reference) -> tuple[str | None, list[DepthFit]]:
    """The name and fits of the certified run the experiment measures its gaps to
    (`optimum_from`: its run beside this one in `runs`, or its committed results); no fits when it
    names none or that run is not there. A run on other teachers or students is an error."""
    if not experiment.optimum_from:
        return None, []
    other = Path(experiment.optimum_from).stem  # a packaged name, or a file's
    optima, other_config = run_beside(other, scale, runs, reference)
    differing = [key for key in TEACHER_FIELDS if optima and getattr(other_config, key) != getattr(config, key)]
    if differing:
        raise ToymodelsError(f"{experiment.source} measures its gaps to {other}, whose {scale} run trains other "
                             f"teachers or students ({', '.join(differing)} differ): make the two files agree")
    return other, optima


def write_gaps_to_optimum(name: str, optimum: str, optima: list[DepthFit], folder: RunFolder, fits: list[DepthFit],
                          caption: str) -> list[Path]:
    """Each student's gap to the certified student of run `optimum` on the same teacher and depth:
    gaps_to_OPTIMUM.csv and .txt in the run folder, and their figure."""
    gaps = gaps_to_optimum(fits, optima)
    file = gaps_file(optimum)
    folder.write(f"{file}.csv", gaps.to_csv(index=False))
    folder.write(f"{file}.txt", gap_table(gaps, optimum) + "\n")
    return plot_gap_to_optimum(gaps, name, optimum, caption, folder.path / file)


def gaps_file(optimum: str) -> str:
    """The run folder's name (without suffix) of its gaps to the certified run `optimum`."""
    return f"gaps_to_{optimum}"


def fits_drawn_with(experiment: Experiment, scale: str, config: SweepConfig, runs: Path,
                    reference) -> tuple[list[DepthFit], list[str]]:
    """The fits of the experiment's `drawn_with` experiments that have run at `scale` (beside this
    run in `runs`, or committed in `reference`), and their names: one grid split by teacher (the ρ
    crossover, or paper_depths' teachers on the final protocol) or by depth (the paper's loop at its
    budget). One of another protocol than this run's, the teachers, replicates and depths apart, is
    an error: its fits would not be comparable."""
    fits, drawn = [], []
    for other in map(lambda name: Path(name).stem, experiment.drawn_with):  # a packaged name, or a file's
        other_fits, other_config = run_beside(other, scale, runs, reference)
        if not other_fits:
            continue
        same_grid = other_config.replace(teachers=config.teachers, depths=config.depths, replicates=config.replicates,
                                         first_replicate=config.first_replicate)
        if same_grid.protocol() != config.protocol():
            raise ToymodelsError(f"{experiment.source} is drawn with {other}, whose {scale} run has another protocol "
                                 f"than its own (the teachers, replicates and depths apart): make the two files agree")
        fits += other_fits
        drawn.append(other)
    return fits, drawn


def run_places(name: str, scale: str, runs, reference) -> list[Path]:
    """Where experiment `name`'s run at `scale` is looked for, in order: beside this one in `runs`
    (NAME-SCALE), then committed in `reference` (NAME/SCALE)."""
    return [Path(runs) / f"{name}-{scale}", Path(reference) / name / scale]


def run_beside(name: str, scale: str, runs: Path, reference) -> tuple[list[DepthFit], SweepConfig | None]:
    """The fits and protocol of experiment `name` at `scale`: its run beside this one in `runs`
    (NAME-SCALE), else its committed results in `reference`."""
    return reference_fits(name, scale, run_places(name, scale, runs, reference))


def reference_fits(name: str, scale: str, places) -> tuple[list[DepthFit], SweepConfig | None]:
    """The fits of experiment `name` at `scale`, and their protocol, from the first of `places`
    that has them: a run folder of it (NAME-SCALE/fit.json beside another run), or a results tree
    (DIR/NAME/SCALE/fit.json, like the repository's figures/). ([], None) when none has them."""
    for place in map(Path, places):
        for path in (place / "fit.json", place / name / scale / "fit.json"):
            if path.is_file():
                remedy = f"it holds the results of {name}; run that experiment again"
                document = read_json(path, remedy)
                try:
                    protocol = {key: value for key, value in document["protocol"].items() if key != "summary"}
                    return [DepthFit.from_dict(fit) for fit in document["fits"]], SweepConfig().replace(**protocol)
                except (TypeError, KeyError, AttributeError):
                    raise ToymodelsError(f"{path} is not the suite's fit document: {remedy}") from None
    return [], None


def reference_exponents(name: str = "regimes", scale: str = "cpu",
                        reference=REFERENCE_DIR) -> list[tuple[str, float, float, float]]:
    """(label, α, low, high) of each teacher in the reference results of `name` at `scale`."""
    return [(f"toy {fit.teacher} ({name}, {scale})", fit.alpha, fit.alpha_low, fit.alpha_high)
            for fit in reference_fits(name, scale, [reference])[0]]
