"""An experiment's figures, drawn from the fits of its run (a run folder, or the committed
results under figures/NAME/SCALE) and of the runs it is drawn with, compared with or measured
against: reading fits, never training or fitting."""

from pathlib import Path

from ..config import SweepConfig
from ..errors import ToymodelsError
from ..plotting.fit_figures import plot_comparison, plot_gap_to_optimum
from ..results.depth_fit import DepthFit
from ..results.fitting import TEACHER_FIELDS, gaps_to_optimum
from ..results.report import comparison_table, gap_table
from ..results.storage import RunFolder, read_json
from ..training.protocol import Protocol
from .experiment import FIGURES, REFERENCE_DIR, RUNS_DIR, Experiment
from .fits import run_protocol


def redraw(name_or_path, scale: str = "cpu", out=None, reference=REFERENCE_DIR) -> tuple[RunFolder, list[Path]]:
    """Draw an experiment's figures again from its finished run in `out` (a run folder, or a
    committed one like figures/NAME/SCALE), from the fits its fit.json holds: nothing is trained
    or fitted again. For a new look of the figures, or figures lost."""
    experiment = Experiment.load(name_or_path)
    folder = RunFolder.open(out or RUNS_DIR / f"{experiment.name}-{scale}")
    fits, _ = reference_fits(experiment.name, scale, [folder.path])
    if not fits:
        raise ToymodelsError(
            f"{folder.path} has no fit.json to draw from: `toymodels reproduce {experiment.name}` runs and fits it"
        )
    return folder, draw_experiment(experiment, scale, folder, fits, run_protocol(folder), reference)


def draw_experiment(
    experiment: Experiment, scale: str, folder: RunFolder, fits: list[DepthFit], protocol: Protocol, reference
) -> list[Path]:
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
            comparison = {
                f"{other} ({other_config.student})": other_fits,
                f"{experiment.name} ({config.student})": fits,
            }
            folder.write(f"compared_with_{other}.txt", comparison_table(comparison, protocol) + "\n")
            figures += plot_comparison(comparison, caption, folder.path / f"compared_with_{other}")
    if optima:
        figures += write_gaps_to_optimum(experiment.name, optimum, optima, folder, fits, caption)
    return figures


def optimum_fits(
    experiment: Experiment, scale: str, config: SweepConfig, runs: Path, reference
) -> tuple[str | None, list[DepthFit]]:
    """The name and fits of the certified run the experiment measures its gaps to
    (`optimum_from`: its run beside this one in `runs`, or its committed results); no fits when it
    names none or that run is not there. A run on other teachers or students is an error."""
    if not experiment.optimum_from:
        return None, []
    other = Path(experiment.optimum_from).stem  # a packaged name, or a file's
    optima, other_config = run_beside(other, scale, runs, reference)
    differing = [key for key in TEACHER_FIELDS if optima and getattr(other_config, key) != getattr(config, key)]
    if differing:
        raise ToymodelsError(
            f"{experiment.source} measures its gaps to {other}, whose {scale} run trains other "
            f"teachers or students ({', '.join(differing)} differ): make the two files agree"
        )
    return other, optima


def write_gaps_to_optimum(
    name: str, optimum: str, optima: list[DepthFit], folder: RunFolder, fits: list[DepthFit], caption: str
) -> list[Path]:
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


def fits_drawn_with(
    experiment: Experiment, scale: str, config: SweepConfig, runs: Path, reference
) -> tuple[list[DepthFit], list[str]]:
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
        same_grid = other_config.replace(
            teachers=config.teachers,
            depths=config.depths,
            replicates=config.replicates,
            first_replicate=config.first_replicate,
        )
        if same_grid.protocol() != config.protocol():
            raise ToymodelsError(
                f"{experiment.source} is drawn with {other}, whose {scale} run has another protocol "
                f"than its own (the teachers, replicates and depths apart): make the two files agree"
            )
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


def reference_exponents(
    name: str = "regimes", scale: str = "cpu", reference=REFERENCE_DIR
) -> list[tuple[str, float, float, float]]:
    """(label, α, low, high) of each teacher in the reference results of `name` at `scale`."""
    return [
        (f"toy {fit.teacher} ({name}, {scale})", fit.alpha, fit.alpha_low, fit.alpha_high)
        for fit in reference_fits(name, scale, [reference])[0]
    ]
