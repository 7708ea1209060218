"""The paper's toy figures, each from one experiment file in `experiments/`.

An experiment file (TOML) holds an [experiment] table (title, which figure, the fit's depth
range, the expected cost of each scale), the [protocol] keys every scale shares and one
[scales.NAME] table per scale; `toymodels run --config FILE --scale NAME` runs the same sweep.
`reproduce` runs it into a folder (or reuses a finished run of the same protocol there), fits
it, writes fit.txt and fit.json, and draws the figures.
"""

import json
from dataclasses import dataclass
from pathlib import Path

from .api import fit_run, run_sweep
from .config import SweepConfig, read_config_file, resolve_config
from .errors import ToymodelsError
from .fitting import DepthFit
from .jobs import Job, sweep_flops_per_step
from .plotting import plot_alpha_vs_parameter, plot_comparison, plot_regimes, plot_run
from .report import fit_document, format_table, protocol_line
from .storage import RunFolder

EXPERIMENTS_DIR = Path(__file__).resolve().parent.parent / "experiments"
FIGURES_DIR = EXPERIMENTS_DIR.parent / "figures"  # the committed results: figures/NAME/SCALE
# For `--list` only: a GPU time projected from the matmul work at an assumed sustained fp32 rate
# (about half an H100/H200's non-tensor-core fp32 peak); not a measurement.
ASSUMED_GPU_TFLOPS = 30


@dataclass
class Experiment:
    name: str
    path: Path
    title: str
    figure: str
    fit_min_depth: int
    compare_with: str | None
    cost: dict
    scales: list

    @classmethod
    def load(cls, name: str) -> "Experiment":
        path = EXPERIMENTS_DIR / f"{name}.toml"
        if not path.is_file():
            raise ToymodelsError(f"unknown experiment {name!r}; choose from {', '.join(experiment_names())}")
        content = read_config_file(path)
        meta = content.get("experiment", {})
        return cls(name, path, meta.get("title", name), meta.get("figure", "depth"), meta.get("fit_min_depth", 1),
                   meta.get("compare_with"), meta.get("cost", {}), list(content.get("scales", {})))

    def config(self, scale: str, **overrides) -> SweepConfig:
        return resolve_config(file=self.path, scale=scale, **overrides)

    def student(self, scale: str) -> str:
        return self.config(scale).student

    def caption(self, scale: str, config: SweepConfig) -> str:
        depths = f", fit over ℓ ≥ {self.fit_min_depth}" if self.fit_min_depth > 1 else ""
        return f"{self.name}, {scale} scale: {protocol_line(config)}{depths}"


def experiment_names() -> list[str]:
    return sorted(path.stem for path in EXPERIMENTS_DIR.glob("*.toml"))


def describe_experiments() -> str:
    """`reproduce --list`: each experiment with its protocol, matmul work and cost at each scale."""
    lines = []
    for name in experiment_names():
        experiment = Experiment.load(name)
        lines.append(f"{name:<10} {experiment.title}")
        for scale in experiment.scales:
            config = experiment.config(scale)
            students = len(Job.whole(config).students())
            work = sweep_flops_per_step(config) * config.steps / 1e15
            lines.append(f"  {scale:<6} {students} students; {protocol_line(config)}")
            projected = work * 1e3 / ASSUMED_GPU_TFLOPS / 60
            lines.append(f"         {work:.3g} PFLOP of matmuls (≈ {projected:.0f} min of GPU at {ASSUMED_GPU_TFLOPS} "
                         f"TFLOP/s, projected); {experiment.cost.get(scale, 'cost not measured')}")
    return "\n".join(lines)


def reproduce(name: str, scale: str = "cpu", out=None, progress: bool = True, **overrides):
    """Run (or reuse) experiment `name` at `scale` in `out`, then write its fit and figures.
    Returns the run folder, the fits and the figure files."""
    experiment = Experiment.load(name)
    config = experiment.config(scale, **overrides)
    folder = RunFolder(out or Path("runs") / "reproduce" / f"{name}-{scale}")
    if not folder.finished():
        run_sweep(config, folder.path, progress=progress)
    elif folder.config().protocol() != config.protocol():
        raise ToymodelsError(f"{folder.path} holds a finished run of another protocol; choose another --out")
    fits = fit_run(folder.path, min_depth=experiment.fit_min_depth)
    caption = experiment.caption(scale, config)
    folder.write("fit.txt", format_table(fits, config) + "\n")
    folder.write("fit.json", json.dumps(fit_document(fits, config), indent=2))
    figures = plot_run(fits, caption, folder.path)
    if experiment.figure == "regimes":
        figures += plot_regimes(fits, caption, folder.path / "regimes")
    if experiment.figure == "correlation":
        figures += plot_alpha_vs_parameter(fits, "rho", caption, folder.path / "alpha_vs_rho")
    other = committed_fits(experiment.compare_with, scale) if experiment.compare_with else []
    if other:
        comparison = {f"{experiment.compare_with} ({Experiment.load(experiment.compare_with).student(scale)})": other,
                      f"{name} ({config.student})": fits}
        figures += plot_comparison(comparison, caption, folder.path / f"compared_with_{experiment.compare_with}")
    return folder, fits, figures


def committed_fits(name: str, scale: str) -> list[DepthFit]:
    """The fits committed in figures/NAME/SCALE/fit.json; empty when there are none."""
    path = FIGURES_DIR / name / scale / "fit.json"
    if not path.is_file():
        return []
    return [DepthFit.from_dict(fit) for fit in json.loads(path.read_text())["fits"]]


def committed_toy_exponents(name: str = "regimes", scale: str = "cpu") -> list[tuple[str, float, float, float]]:
    """(label, α, low, high) of each teacher in the committed results of `name` at `scale`."""
    return [(f"toy {fit.teacher} ({name}, {scale})", fit.alpha, fit.alpha_low, fit.alpha_high)
            for fit in committed_fits(name, scale)]
