"""`toymodels reproduce` and `docs`: an experiment file run, fitted and drawn, and the docs' pages
written from the committed runs."""

import sys
from pathlib import Path

import click

from .. import api
from ..errors import ToymodelsError
from ..pages.results import committed_results
from ..pages.site import DOCS_DIR, README, redraw_committed, stale_files, write_docs
from ..workflows.experiment import REFERENCE_DIR
from .options import field_help
from .run import report_failed_jobs


@click.command("reproduce")
@click.argument("name", required=False)
@click.option(
    "--scale", default="cpu", show_default=True, help="cpu (reduced, laptop) or paper (the paper's protocol)."
)
@click.option("--out", type=click.Path(file_okay=False), help="Folder [default: runs/reproduce/NAME-SCALE].")
@click.option("--device", help="auto, cpu, cuda, cuda:N.")
@click.option("--compile", "compile_step", is_flag=True, default=None, help=field_help("compile"))
@click.option("--cuda-graphs/--no-cuda-graphs", default=None, help=field_help("cuda_graphs"))
@click.option(
    "--reference",
    type=click.Path(file_okay=False),
    default=str(REFERENCE_DIR),
    show_default=True,
    help="Results tree (DIR/NAME/SCALE/fit.json) an experiment that compares with another reads, when no run "
    "of that one lies beside --out; the repository's committed results are in figures/.",
)
@click.option("--list", "show_list", is_flag=True, help="Name each experiment with its protocol and cost.")
@click.option(
    "--redraw",
    "redraw_only",
    is_flag=True,
    help="Only draw the figures again, from the finished run in --out (or a "
    "committed one, figures/NAME/SCALE) and its fit.json: nothing is trained or fitted.",
)
@click.option("--quiet", is_flag=True, help="No progress bar.")
def reproduce_command(name, scale, out, device, compile_step, cuda_graphs, reference, show_list, redraw_only, quiet):
    """Reproduce one of the paper's toy figures, or your own experiment: NAME is a packaged
    experiment (see --list) or the path of an experiment file (.toml). Runs it, fits it and draws
    the figures its file names: depth (loss against depth), training (α against step), budget
    (α with its interval against the training budget; at scales with a constant rate),
    temperature (α against T), regimes (both at once), correlation (α against ρ), mismatch (loss
    against ℓ toward the teacher's depth, with the pure (1/ℓ − 1/ℓ*)² law fitted). A finished run
    of the same protocol in --out is reused."""
    if show_list or not name:
        click.echo(api.describe_experiments())
        return
    if redraw_only:
        for path in api.redraw(name, scale, out, reference)[1]:
            click.echo(path)
        return
    try:
        folder, fits, figures = api.reproduce(
            name,
            scale,
            out,
            progress=not quiet,
            reference=reference,
            device=device,
            compile=compile_step,
            cuda_graphs=cuda_graphs,
        )
    except api.JobsFailed as failure:  # what finished is kept and fitted, as `run` says it
        report_failed_jobs(failure)
        sys.exit(1)
    click.echo((folder.path / api.RunFolder.FIT_TXT).read_text(), nl=False)
    for path in figures:
        click.echo(path)


@click.command()
@click.option(
    "--reference",
    "--results",
    "results",
    type=click.Path(file_okay=False),
    default=str(REFERENCE_DIR),
    show_default=True,
    help="Results tree of the committed runs (DIR/NAME/SCALE), as reproduce and scaling-law name it.",
)
@click.option("--scale", default="cpu", show_default=True, help="Which scale's runs the pages show.")
@click.option(
    "--check",
    is_flag=True,
    help="Write nothing; exit 1 naming each generated file that differs from "
    "what the runs give (CI runs it through the test suite).",
)
@click.option(
    "--redraw",
    is_flag=True,
    help="First draw every committed run's figures again from its data (after a "
    "change to the figures' look): the experiment's from its fit.json, the analyses' from their tables.",
)
@click.option(
    "--root",
    type=click.Path(file_okay=False, exists=True),
    default=".",
    show_default=True,
    help="The repository whose README.md and docs/ the pages are written into (and checked against).",
)
def docs(results, scale, check, redraw, root):
    """The docs' results from the committed runs: one page per experiment (docs/experiments/NAME.md:
    protocol, fit table, certificate, figures, cost, the paper's claim, and the hand-written reading
    in experiments/NAME.md), the full summary table (docs/experiments/index.md), the README's
    headline table, the navigation's experiment entries (mkdocs.yml) and the summary figure
    (RESULTS/summary.png)."""
    found = committed_results(results, scale)
    if not found:
        raise ToymodelsError(f"{results} holds no experiment's run at scale {scale} (NAME/{scale}/fit.json)")
    if check:
        stale = stale_files(found, Path(root) / DOCS_DIR, Path(root) / README)
        for path in stale:
            click.echo(f"{path} differs from what the runs give: `toymodels docs` writes it anew", err=True)
        sys.exit(1 if stale else 0)
    if redraw:
        for path in redraw_committed(found, results):
            click.echo(path)
    for path in write_docs(found, Path(root) / DOCS_DIR, Path(root) / README, figures=results):
        click.echo(path)
