"""`reproduce` runs an experiment (workflows/experiment.py) into a folder, or reuses a finished run of
the same protocol there, fits it over the experiment's depth window (fit.txt, fit.json, fits.csv),
and draws the figures the file names (workflows/experiment_figures.py); an experiment split by replicate joins its
parts' runs."""

from pathlib import Path

from ..config import SweepConfig
from ..errors import ToymodelsError
from ..results.report import protocol_line
from ..results.storage import RunFolder
from ..training.jobs import Job
from ..training.planning import sweep_flops
from ..training.protocol import Protocol
from .experiment import REFERENCE_DIR, RUNS_DIR, Experiment, experiment_names
from .experiment_figures import draw_experiment, optimum_fits, reference_fits, run_places
from .sweep import join_runs, run_sweep


def describe_experiments() -> str:
    """`reproduce --list`: each experiment with its protocol, matmul work and cost at each scale."""
    lines = []
    for name in experiment_names():
        experiment = Experiment.load(name)
        lines.append(f"{name:<10} {experiment.title}")
        for scale in experiment.scales:
            try:
                protocol = Protocol.of(experiment.config(scale))
            except ToymodelsError as error:  # a plug-in named from the repository (examples/), run from elsewhere
                lines.append(f"  {scale:<6} not resolvable here: {error}")
                continue
            work = sweep_flops(protocol) / 1e15
            lines.append(f"  {scale:<6} {len(Job.whole(protocol).students())} students; {protocol_line(protocol)}")
            # no time from the work alone: on a GPU the steps are bound by their launches (docs/performance.md)
            lines.append(f"         {work:.3g} PFLOP of matmuls; {experiment.cost.get(scale, 'cost not measured')}")
    return "\n".join(lines)


def reproduce(name_or_path, scale: str = "cpu", out=None, progress: bool = True, reference=REFERENCE_DIR, **overrides):
    """Run (or reuse) an experiment at `scale` in `out`, then write its fit and figures.
    Returns the run folder, the fits and the figure files."""
    experiment = Experiment.load(name_or_path)
    folder = RunFolder(out or RUNS_DIR / f"{experiment.name}-{scale}")
    config = experiment.config(scale, folder.path.parent, **overrides)
    if experiment.start_from and config.start_from and overrides.get("start_from") is None:
        # the trained start takes that experiment's students: run it first (a finished run is reused)
        reproduce(
            experiment.start_experiment(),
            scale,
            experiment.source_run(scale, folder.path.parent),
            progress,
            reference,
            **overrides,
        )
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
            raise ToymodelsError(
                f"{experiment.source} joins {name}, which has no finished {scale} run in "
                f"{places[0]} or {places[1]}: `toymodels reproduce {name} --scale {scale}` first"
            )
        parts.append(found)
    try:
        join_runs(parts, folder.path, experiment.record(scale), expected=config)
    except ToymodelsError as error:
        raise ToymodelsError(f"{experiment.source} [scales.{scale}]: {error}") from None
