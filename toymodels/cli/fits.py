"""`toymodels fit`, `join` and `plot`: a finished (or partial) run's fit, a grid's parts joined,
and a run's figures, through the Python API."""

import json

import click

from .. import api
from ..errors import ToymodelsError


def warn_if_partial(folder: "api.RunFolder") -> str:
    """On stderr: which jobs a partial run lacks (fits and plots use the students that finished).
    Returns the note a figure of it must carry ("" for a finished run)."""
    missing = api.missing_jobs(folder)
    if not missing:
        return ""
    unfinished = len(folder.unfinished_jobs())
    note = (
        f"partial run: {unfinished} of {len(folder.jobs())} jobs unfinished, left out"
        if unfinished
        else "partial run: its polish is not merged yet"
    )
    click.echo(f"{note}:", err=True)
    for line in missing:
        click.echo(f"  {line}", err=True)
    return f"; {note}"


def fit_options(command):
    for option in reversed(
        [
            click.argument("run_dir", type=click.Path()),
            click.option(
                "--min-depth",
                type=click.IntRange(min=1),
                help="Fit only depths ≥ this (where the power law holds) [default: the run's own window, "
                "the fit_min_depth of the experiment `reproduce` ran there, else every depth].",
            ),
            click.option("--max-depth", type=click.IntRange(min=1), help="Fit only depths ≤ this."),
            click.option(
                "--budget",
                type=click.IntRange(min=1),
                help="Read the run as stopped at this evaluation step, as a run with this budget ends: "
                "students still training there are capped (a long run stopped early).",
            ),
        ]
    ):
        command = option(command)
    return command


@click.command()
@fit_options
@click.option("--json", "as_json", is_flag=True, help="Print a machine-readable document instead of the table.")
def fit(run_dir, min_depth, max_depth, budget, as_json):
    """Fit α_ℓ per teacher and temperature: log–log least squares per teacher replicate, 95 % t-interval
    over replicates, α over depth windows, the regime, local slopes, a fit with a floor, α against training
    step, convergence flags."""
    folder = api.RunFolder.open(run_dir)
    if budget is None:
        warn_if_partial(folder)
    min_depth, window = api.fit_window(folder, min_depth, max_depth)
    protocol, fits = api.fitted_run(folder, min_depth, max_depth, budget)
    if not fits:
        raise ToymodelsError(f"{run_dir} has no group with two or more finished depths to fit")
    if as_json:
        click.echo(json.dumps(api.fit_document(fits, protocol, min_depth, max_depth), indent=2))
        return
    click.echo(api.format_table(fits, protocol, folder.path, window))
    for fit in fits:
        slopes = ", ".join(f"{s:.2f}" for s in fit.local_slopes)
        floor = fit.floor_fit
        with_floor = f"α={floor['alpha']:.2f}, L₀={floor['floor']:.3g}" if floor else "not determined"
        click.echo(
            f"{fit.teacher} T={api.temperature_label(fit.temperature)}: local slopes {slopes}; with floor {with_floor}"
        )
    click.echo(api.provenance_line(folder.provenance()))


@click.command()
@click.argument("parts", nargs=-1, required=True, type=click.Path())
@click.option("--out", type=click.Path(file_okay=False), required=True, help="Folder of the joined run.")
def join(parts, out):
    """Join the finished runs PARTS, one grid split by replicate (`first_replicate`) so that each
    part finished in one sitting, into one run in --out, and print its fit over every replicate (a
    95 % interval over all of them). Their protocols must agree but for the replicates, which must
    follow on from each other. The joined run holds the config, metrics, budget certificates and
    provenance of all; the students stay in the parts."""
    folder = api.join_runs(parts, out)
    click.echo((folder.path / api.RunFolder.FIT_TXT).read_text(), nl=False)
    click.echo(f"results: {folder.path}")


@click.command()
@fit_options
@click.option(
    "--out",
    type=click.Path(file_okay=False),
    help="Folder for the figures [default: RUN_DIR/figures; required for a committed run, under figures/].",
)
def plot(run_dir, min_depth, max_depth, budget, out):
    """Draw loss against depth with fitted lines, α against temperature, α against step (PNG and PDF)."""
    from ..workflows.experiment import REFERENCE_DIR  # here: `run --help` imports this module, and must stay light

    folder = api.RunFolder.open(run_dir)
    if out is None and REFERENCE_DIR.resolve() in folder.path.resolve().parents:
        raise ToymodelsError(
            f"{run_dir} is a committed run (under {REFERENCE_DIR}/), kept as committed: draw its figures into a "
            f"folder of your own with --out DIR"
        )
    note = (
        warn_if_partial(folder)
        if budget is None
        else f"; stopped at step {budget} of its {api.run_protocol(folder).config.steps}-step budget"
    )
    min_depth, window = api.fit_window(folder, min_depth, max_depth)
    protocol, fits = api.fitted_run(folder, min_depth, max_depth, budget)
    if not fits:
        raise ToymodelsError(f"{run_dir} has no group with two or more finished depths to plot")
    note += f"; {window.partition(' (')[0]}" if window else ""
    for path in api.plot_run(fits, api.protocol_line(protocol) + note, out or folder.path / "figures"):
        click.echo(path)
