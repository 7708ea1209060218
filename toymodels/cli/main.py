"""`toymodels` on the command line: a thin layer over the Python API."""

import json
import sys
from pathlib import Path

import click
import tomllib

from ..analysis.diagnostics import diagnose_run, diagnostics_summary
from ..analysis.layer_errors import coherence_table
from ..api import (
    budget_ladder,
    describe_experiments,
    fit_run,
    fit_window,
    fitted_run,
    join_runs,
    missing_jobs,
    redraw,
    reproduce,
    resolve_run_config,
    run_protocol,
    run_sweep,
    split_layer_errors,
)
from ..config import PRECISIONS, PRESETS, SweepConfig, paper_temperatures
from ..docs import (
    DOCS_DIR,
    README,
    committed_results,
    redraw_committed,
    stale_files,
    write_docs,
)
from ..errors import ToymodelsError
from ..models.losses import LOSSES
from ..performance.bench import BENCH_SWEEPS, bench_config, benchmark, format_benchmark
from ..plotting.diagnostics import plot_diagnostics
from ..plotting.ladder import plot_ladder
from ..plotting.layer_errors import plot_layer_errors
from ..plotting.runs import plot_run
from ..results.ladder import ladder_lines
from ..results.provenance import provenance_line
from ..results.report import (
    fit_document,
    format_table,
    protocol_line,
    temperature_label,
)
from ..results.storage import RunFolder, default_run_path
from ..runs.experiment import REFERENCE_DIR
from ..runs.parallel import BACKENDS, JobsFailed
from ..version import __version__
from .options import CommaList, config_options, field_help, protocol_fields
from .scaling_law import scaling_law_command


class OneLineErrors(click.Group):
    """Bad input prints one line and exits with status 2, never a traceback."""

    def main(self, args=None, prog_name=None, **extra):
        try:
            return super().main(args=args, prog_name=prog_name, standalone_mode=False, **extra)
        except click.exceptions.Exit as stop:
            sys.exit(stop.exit_code)
        except click.Abort:
            click.echo("toymodels: aborted", err=True)
            sys.exit(130)
        except click.ClickException as error:
            click.echo(f"toymodels: error: {error.format_message()}", err=True)
            sys.exit(2)
        except ToymodelsError as error:
            click.echo(f"toymodels: error: {error}", err=True)
            sys.exit(2)
        except OSError as error:  # the file system refused: a read-only folder, a path below a file, /proc, a full disk
            where = f"{error.filename}: " if error.filename else ""
            click.echo(f"toymodels: error: {where}{error.strerror or error} (nothing else was written there; "
                       f"a folder you can write, with --out where the command has one, fixes it)", err=True)
            sys.exit(2)


@click.group(cls=OneLineErrors, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(__version__, "--version", prog_name="toymodels", message="%(prog)s %(version)s")
def main():
    """Teacher-student toy models of how deep residual networks use their depth."""


def config_settings(ctx, param, values) -> dict:
    """`--set race_margin=0.3` (repeatable) → {"race_margin": 0.3}: the value read as TOML reads it
    (a bare word that TOML does not read is a string)."""
    settings = {}
    for value in values:
        key, equals, text = value.partition("=")
        if not equals or not key.strip():
            raise click.BadParameter(f"write KEY=VALUE, e.g. race_margin=0.3; got {value!r}")
        try:
            settings[key.strip()] = tomllib.loads(f"value = {text.strip()}")["value"]
        except tomllib.TOMLDecodeError:
            settings[key.strip()] = text.strip()
    return settings




@main.command(short_help="Train a sweep of students and fit α_ℓ, naming the regime it shows.")
@click.option("--preset", type=click.Choice(list(PRESETS)), default="certified", show_default=True,
              help="Protocol to start from: certified (certified students, minutes per teacher on a CPU), quick "
                   "(a smoke test of the install, about 1 min, not certified), cpu (tens of minutes), paper (the "
                   "paper's).")
@click.option("--config", "config_file", type=click.Path(dir_okay=False),
              help="TOML file (or a run's config.json) of protocol keys; options given here override it.")
@click.option("--scale", help="With an experiment file: which scale, e.g. cpu or paper [default: its first].")
@config_options
@click.option("--out", type=click.Path(file_okay=False),
              help="Results folder [default: runs/<time>-<teacher>-<loss>]; one holding an unfinished run of "
                   "the same protocol is resumed.")
@click.option("--resume", "resume_dir", type=click.Path(file_okay=False),
              help="Finish the run in this folder: finished jobs are kept, the others continue from their "
                   "last checkpoint (the protocol is the folder's).")
@click.option("--jobs", type=click.IntRange(min=1),
              help="Jobs to run at once: the sweep is cut into at least this many [default: 1; one per GPU with "
                   "several; the dask cluster's worker threads].")
@click.option("--backend", type=click.Choice(BACKENDS), default="local", show_default=True,
              help="local: worker processes on this machine; dask: a dask.distributed cluster.")
@click.option("--scheduler", help="Address of the dask scheduler, e.g. tcp://10.0.0.1:8786 [default: a local "
                                  "cluster].")
@click.option("--set", "settings", multiple=True, callback=config_settings, metavar="KEY=VALUE",
              help="Any configuration key, e.g. race_margin=0.3 or head_lr_depth_scaled=true (repeatable; the value "
                   "as in a TOML config file, lists as [2, 4, 8]); applied after the options above.")
@click.option("--show-config", is_flag=True,
              help="Print the resolved configuration as TOML (which --config reads back) and exit without training.")
@click.option("--quiet", is_flag=True, help="No progress bar.")
def run(preset, config_file, scale, out, resume_dir, jobs, backend, scheduler, settings, show_config, quiet,
        **fields):
    """Train a sweep of students (every teacher × temperature × depth) and fit α_ℓ.

    Prints one row per teacher and temperature: the final test loss at each depth (of the best
    start), the fitted depth exponent α_ℓ with its 95 % interval, the largest optimisation gap,
    and below it what is not certified and why.
    Interrupted or killed, a run continues where it stopped with --resume RUN_DIR.
    """
    if scheduler and backend != "dask":
        raise ToymodelsError("--scheduler goes with --backend dask")
    if resume_dir:
        config, path = resumed_config(resume_dir, out, config_file, scale, settings, fields)
    else:
        config = resolve_run_config(preset, config_file, scale, **fields).replace(**settings)
        if fields["start_from"] and config.pretrain_loss is not None:
            raise ToymodelsError(f"--start-from takes another run's students for the trained start, but this protocol "
                                 f"trains its own first (on {config.pretrain_loss}): add --pretrain-loss none")
        path = Path(out or default_run_path(config))
    if show_config:
        click.echo(config.to_toml(preset), nl=False)
        return
    if len(set(config.depths)) < 2:  # the Python API trains one depth (a probe); a sweep fits α across depths
        raise ToymodelsError(f"α_ℓ is a slope across depths, and this sweep has one ({config.depths[0]}): give two or "
                             f"more with --depths, e.g. --depths 2,4,8,16")
    try:
        folder = run_sweep(config, path, progress=not quiet, jobs=jobs, backend=backend, scheduler=scheduler)
    except KeyboardInterrupt:
        click.echo(f"\ninterrupted: finished jobs and checkpoints are in {path}; continue with "
                   f"`toymodels run --resume {path}`", err=True)
        sys.exit(130)
    except JobsFailed as failure:
        report_failed_jobs(failure)
        sys.exit(1)
    click.echo((folder.path / RunFolder.FIT_TXT).read_text(), nl=False)
    students = folder.path / RunFolder.STUDENTS
    kept = f" (trained students: {students.stat().st_size / 2**20:.1f} MB)" if students.exists() else ""
    click.echo(f"results: {folder.path}{kept}")


def resumed_config(resume_dir, out, config_file, scale, settings, fields) -> tuple[SweepConfig, Path]:
    """The config and folder of `run --resume`: the folder's protocol, with only where and how fast
    it runs taken from the options (any protocol option is refused)."""
    given = [f"--{name.replace('_', '-')}" for name in protocol_fields() if fields[name] is not None]
    given += ["--config"] * bool(config_file) + ["--scale"] * bool(scale) + ["--set"] * bool(settings)
    if given or out:
        raise ToymodelsError(f"--resume takes the protocol and folder of {resume_dir}; drop "
                             f"{', '.join(given + ['--out'] * bool(out))}")
    if not (Path(resume_dir) / RunFolder.CONFIG).is_file():
        raise ToymodelsError(f"{resume_dir} holds no run to resume (no {RunFolder.CONFIG})")
    return RunFolder(resume_dir).config().replace(**fields), Path(resume_dir)


def report_failed_jobs(failure: JobsFailed) -> None:
    """What a run whose jobs failed leaves: why, the fit of what finished, and how to go on."""
    folder = failure.folder
    if len(failure.failed) == len(folder.jobs()):  # nothing to fit: say why, not "no evaluations"
        click.echo(f"every job failed; the first with {failure.failed[0]['error']} (each job's error.txt in "
                   f"{folder.path}/jobs has the traceback and config): fix the cause and "
                   f"`toymodels run --resume {folder.path}`", err=True)
        return
    warn_if_partial(folder)
    fits = fit_run(folder)
    if fits:
        click.echo(format_table(fits, run_protocol(folder), folder.path))
    click.echo(f"{len(failure.failed)} job(s) failed (their error.txt has the traceback and config); the "
               f"others are in {folder.path}: fix the cause and `toymodels run --resume {folder.path}`", err=True)



def with_preset_values(command: click.Command, preset: str) -> click.Command:
    """Each option that sets a configuration key says, in its help, the value `preset` gives it, read
    from the preset itself so that the help cannot drift from it (keys the preset leaves unset
    keep their own help)."""
    config = PRESETS[preset]
    for option in (param for param in command.params if isinstance(param, click.Option)):
        value = getattr(config, option.name, None)
        if value is None or option.name in ("device",):
            continue
        if isinstance(value, tuple):
            shown = ",".join(map(str, value)) or "none"
        else:
            shown = {True: "on", False: "off"}.get(value, value) if isinstance(value, bool) else value
        option.help = f"{option.help} [{preset} preset: {shown}]"
    return command


run = with_preset_values(run, "certified")


def warn_if_partial(folder: RunFolder) -> str:
    """On stderr: which jobs a partial run lacks (fits and plots use the students that finished).
    Returns the note a figure of it must carry ("" for a finished run)."""
    missing = missing_jobs(folder)
    if not missing:
        return ""
    unfinished = len(folder.unfinished_jobs())
    note = (f"partial run: {unfinished} of {len(folder.jobs())} jobs unfinished, left out" if unfinished
            else "partial run: its polish is not merged yet")
    click.echo(f"{note}:", err=True)
    for line in missing:
        click.echo(f"  {line}", err=True)
    return f"; {note}"


def fit_options(command):
    for option in reversed([
        click.argument("run_dir", type=click.Path()),
        click.option("--min-depth", type=click.IntRange(min=1),
                     help="Fit only depths ≥ this (where the power law holds) [default: the run's own window, "
                          "the fit_min_depth of the experiment `reproduce` ran there, else every depth]."),
        click.option("--max-depth", type=click.IntRange(min=1), help="Fit only depths ≤ this."),
        click.option("--budget", type=click.IntRange(min=1),
                     help="Read the run as stopped at this evaluation step, as a run with this budget ends: "
                          "students still training there are capped (a long run stopped early)."),
    ]):
        command = option(command)
    return command


@main.command(short_help="Fit α_ℓ of a run, with its interval, regime and convergence flags.")
@fit_options
@click.option("--json", "as_json", is_flag=True, help="Print a machine-readable document instead of the table.")
def fit(run_dir, min_depth, max_depth, budget, as_json):
    """Fit α_ℓ per teacher and temperature: log–log least squares per teacher replicate, 95 % t-interval
    over replicates, α over depth windows, the regime, local slopes, a fit with a floor, α against training
    step, convergence flags."""
    folder = RunFolder.open(run_dir)
    if budget is None:
        warn_if_partial(folder)
    min_depth, window = fit_window(folder, min_depth, max_depth)
    protocol, fits = fitted_run(folder, min_depth, max_depth, budget)
    if not fits:
        raise ToymodelsError(f"{run_dir} has no group with two or more finished depths to fit")
    if as_json:
        click.echo(json.dumps(fit_document(fits, protocol, min_depth, max_depth), indent=2))
        return
    click.echo(format_table(fits, protocol, folder.path, window))
    for fit in fits:
        slopes = ", ".join(f"{s:.2f}" for s in fit.local_slopes)
        floor = fit.floor_fit
        with_floor = f"α={floor['alpha']:.2f}, L₀={floor['floor']:.3g}" if floor else "not determined"
        click.echo(f"{fit.teacher} T={temperature_label(fit.temperature)}: local slopes {slopes}; "
                   f"with floor {with_floor}")
    click.echo(provenance_line(folder.provenance()))


@main.command(short_help="Join the parts of a grid split by replicate into one run, and fit it.")
@click.argument("parts", nargs=-1, required=True, type=click.Path())
@click.option("--out", type=click.Path(file_okay=False), required=True, help="Folder of the joined run.")
def join(parts, out):
    """Join the finished runs PARTS, one grid split by replicate (`first_replicate`) so that each
    part finished in one sitting, into one run in --out, and print its fit over every replicate (a
    95 % interval over all of them). Their protocols must agree but for the replicates, which must
    follow on from each other. The joined run holds the config, metrics, budget certificates and
    provenance of all; the students stay in the parts."""
    folder = join_runs(parts, out)
    click.echo((folder.path / RunFolder.FIT_TXT).read_text(), nl=False)
    click.echo(f"results: {folder.path}")


@main.command(short_help="Draw a run's figures: loss against depth, α against T and against step.")
@fit_options
@click.option("--out", type=click.Path(file_okay=False), help="Folder for the figures [default: RUN_DIR/figures].")
def plot(run_dir, min_depth, max_depth, budget, out):
    """Draw loss against depth with fitted lines, α against temperature, α against step (PNG and PDF)."""
    folder = RunFolder.open(run_dir)
    note = warn_if_partial(folder) if budget is None else \
        f"; stopped at step {budget} of its {run_protocol(folder).config.steps}-step budget"
    min_depth, window = fit_window(folder, min_depth, max_depth)
    protocol, fits = fitted_run(folder, min_depth, max_depth, budget)
    if not fits:
        raise ToymodelsError(f"{run_dir} has no group with two or more finished depths to plot")
    note += f"; {window.partition(' (')[0]}" if window else ""
    for path in plot_run(fits, protocol_line(protocol) + note, out or folder.path / "figures"):
        click.echo(path)


@main.command(short_help="Time the training engine, in this process and as worker jobs.")
@click.option("--sweep", type=click.Choice(list(BENCH_SWEEPS)), default="paper", show_default=True,
              help="paper: 16 T × depths 6, 12, 24, batch 1024, KL; cpu-kl: fig3b at cpu scale (4 T × depths "
                   "2–16 × 3 teachers, batch 256); tiny: 2 MSE students, depths 1, 2, batch 16. The options "
                   "below change it.")
@click.option("--depths", type=CommaList(int, "depth"), help="Student depths [default: the sweep's].")
@click.option("--temperature-count", type=click.IntRange(min=1),
              help="Number of temperatures, logspace(−2, 0) [default: the sweep's].")
@click.option("--loss", help=f"{', '.join(LOSSES)}; your own as file.py:NAME [default: the sweep's].")
@click.option("--batch", type=click.IntRange(min=1), help="Batch size [default: the sweep's].")
@click.option("--steps", type=click.IntRange(min=1), default=100, show_default=True,
              help="Timed steps of the population engine.")
@click.option("--baseline-steps", type=click.IntRange(min=1), default=5, show_default=True,
              help="Timed steps of each student in the baseline loop.")
@click.option("--device", default="auto", show_default=True)
@click.option("--precision", type=click.Choice(PRECISIONS), default="fp32", show_default=True, help=field_help("precision"))
@click.option("--compile", "compile_step", is_flag=True, help="Also time the population with torch.compile.")
@click.option("--jobs", type=click.IntRange(min=1),
              help="Also time the sweep cut into this many jobs on worker processes [default: one per core on "
                   "the CPU; 1, no such row, on a GPU].")
@click.option("--json", "as_json", is_flag=True, help="Print the numbers as JSON.")
def bench(sweep, depths, temperature_count, loss, batch, steps, baseline_steps, device, precision, compile_step,
          jobs, as_json):
    """Time the population engine (in this process, and cut into jobs on worker processes)
    against students trained one at a time (the usual loop) and against the sweep's matmuls
    alone (the ceiling), and measure the machine's fp32 matmul peak in the same run."""
    config = bench_config(sweep, depths=depths, loss=loss, batch=batch, device=device, precision=precision,
                          temperatures=paper_temperatures(temperature_count) if temperature_count else None)
    result = benchmark(config, steps, baseline_steps, compile_step, jobs)
    click.echo(json.dumps(result, indent=2) if as_json else format_benchmark(result))


main.add_command(scaling_law_command)


@main.command("reproduce", short_help="Reproduce one of the paper's figures, or your own experiment file.")
@click.argument("name", required=False)
@click.option("--scale", default="cpu", show_default=True, help="cpu (reduced, laptop) or paper (the paper's protocol).")
@click.option("--out", type=click.Path(file_okay=False), help="Folder [default: runs/reproduce/NAME-SCALE].")
@click.option("--device", help="auto, cpu, cuda, cuda:N.")
@click.option("--compile", "compile_step", is_flag=True, default=None, help=field_help("compile"))
@click.option("--cuda-graphs/--no-cuda-graphs", default=None, help=field_help("cuda_graphs"))
@click.option("--reference", type=click.Path(file_okay=False), default=str(REFERENCE_DIR), show_default=True,
              help="Results tree (DIR/NAME/SCALE/fit.json) an experiment that compares with another reads, when no run "
                   "of that one lies beside --out; the repository's committed results are in figures/.")
@click.option("--list", "show_list", is_flag=True, help="Name each experiment with its protocol and cost.")
@click.option("--redraw", "redraw_only", is_flag=True, help="Only draw the figures again, from the finished run in --out (or a "
              "committed one, figures/NAME/SCALE) and its fit.json: nothing is trained or fitted.")
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
        click.echo(describe_experiments())
        return
    if redraw_only:
        for path in redraw(name, scale, out, reference)[1]:
            click.echo(path)
        return
    folder, fits, figures = reproduce(name, scale, out, progress=not quiet, reference=reference, device=device,
                                      compile=compile_step, cuda_graphs=cuda_graphs)
    click.echo((folder.path / RunFolder.FIT_TXT).read_text(), nl=False)
    for path in figures:
        click.echo(path)


@main.command(short_help="Write the docs' results pages and summary from the committed runs.")
@click.option("--reference", "--results", "results", type=click.Path(file_okay=False), default=str(REFERENCE_DIR),
              show_default=True, help="Results tree of the committed runs (DIR/NAME/SCALE), as reproduce and "
                                      "scaling-law name it.")
@click.option("--scale", default="cpu", show_default=True, help="Which scale's runs the pages show.")
@click.option("--check", is_flag=True, help="Write nothing; exit 1 naming each generated file that differs from "
                                            "what the runs give (CI runs it through the test suite).")
@click.option("--redraw", is_flag=True, help="First draw every committed run's figures again from its data (after a "
              "change to the figures' look): the experiment's from its fit.json, the analyses' from their tables.")
@click.option("--root", type=click.Path(file_okay=False, exists=True), default=".", show_default=True,
              help="The repository whose README.md and docs/ the pages are written into (and checked against).")
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


@main.command(short_help="Hidden-state diagnostics of a run's teachers and trained students.")
@click.argument("run_dir", type=click.Path())
@click.option("--samples", type=click.IntRange(min=8), default=1024, show_default=True,
              help="Test inputs the hidden states are measured on.")
@click.option("--json", "as_json", is_flag=True, help="Print the per-network summary as JSON.")
def diagnose(run_dir, samples, as_json):
    """Hidden-state diagnostics of a run's teachers and trained students: rotations, update
    angles, angle to the end, progress, angular distances, trajectory groups, N_eff, and the test
    loss with layers removed. Writes tidy tables and figures to RUN_DIR/diagnostics."""
    folder = RunFolder.open(run_dir)
    tables = diagnose_run(folder.path, samples, progress=sys.stderr.isatty())
    out = folder.save_tables("diagnostics", tables)
    figures = plot_diagnostics(tables, protocol_line(run_protocol(folder)), out)
    echo_analysis(diagnostics_summary(tables["networks"]), as_json, f"tables and {len(figures)} figure files in {out}")


def echo_analysis(table, as_json: bool, written: str) -> None:
    """An analysis' summary table: as JSON records, or as text followed by the line saying what it wrote."""
    if as_json:
        click.echo(table.to_json(orient="records", indent=2))
        return
    click.echo(table.to_string(index=False, float_format=lambda v: f"{v:.3g}"))
    click.echo(written)


@main.command("ladder", short_help="How fast each student still converges, and the loss it converges to.")
@click.argument("run_dir", type=click.Path())
@click.option("--repeat", type=click.Path(file_okay=False),
              help="A run of the same protocol made again (its ladder made): every rung's noise then carries the "
                   "run-to-run spread the two show.")
def ladder(run_dir, repeat):
    """The budget ladder of a run trained with --budget-rungs (e.g. 2,4,8): its last stage at ×1,
    ×2, ×4, … the budget from the same start. Per student: its losses, a convergence ratio for every
    three neighbouring rungs (r_x8 = (L(×4) − L(×8)) / (L(×2) − L(×4))) and, where the last two
    ratios agree within their 95 % intervals and the moves shrink to a tail above zero, the
    converged loss L∞ = L(last) − d·r/(1 − r) with a 95 % interval that carries the test noise and
    the spread of r; else "not extrapolable" with the reason, and L(last) is only an upper bound.
    Then, at each rung and at ∞, the log–log α, the exponent p in the step mismatch 1/ℓ − 1/ℓ* and
    the slope of the loss over the untrained Euler rule's, over the run's depth window, every window
    of extrapolable depths and between neighbouring depths, with 95 % intervals. Writes ladder.csv,
    ladder_exponents.csv, ladder.txt and a figure to RUN_DIR/ladder. A ladder grown by a rung after
    its students were deleted keeps its earlier rungs from its ladder.csv. A joined run (`toymodels
    join`) joins its parts' ladders, each made first."""
    folder = RunFolder.open(run_dir)
    tables = budget_ladder(folder.path, repeat)  # raises, before anything is written, where a rung is missing
    text = ladder_lines(tables["ladder"], tables["ladder_exponents"])
    out = folder.save_tables(RunFolder.LADDER, tables)
    (out / "ladder.txt").write_text(text + "\n")
    figures = plot_ladder(tables["ladder"], protocol_line(run_protocol(folder)), out / "ladder")
    click.echo(text)
    click.echo(f"tables, ladder.txt and {len(figures)} figure files in {out}")


@main.command("layer-errors", short_help="How each saved student's layer errors add up to its output error.")
@click.argument("run_dir", type=click.Path())
@click.option("--samples", type=click.IntRange(min=8), default=1024, show_default=True,
              help="Test inputs the errors are measured on.")
@click.option("--json", "as_json", is_flag=True, help="Print the per-depth table as JSON.")
def layer_errors(run_dir, samples, as_json):
    """How each saved student's layer errors add up to its output error. Splits s_ℓ − t_ℓ* into
    each layer's local error carried to the end by the teacher's own remaining layers, with even
    slots of teacher layers and with slots that follow the student, for every start, trained and
    untrained, and the polish; on the pre-norm states and as the read-out sees them (the space
    the loss is measured in). Prints where the output error's depth exponent comes from (the
    local errors' sum, and the coherence C), then per depth C (≈ 1: independent addition, the
    paper's typical case; ≈ ℓ: aligned; ≪ 1: cancelling), its aligned bound, the alignment and the
    neighbouring layers' error cosine; writes tidy tables and a figure to RUN_DIR/layer_errors. A
    joined run (`toymodels join`) keeps no students: it joins its parts' splits, each made first."""
    folder = RunFolder.open(run_dir)
    tables = split_layer_errors(folder.path, samples)
    out = folder.save_tables(RunFolder.LAYER_ERRORS, tables)
    figures = plot_layer_errors(tables["coherence"], tables["error_lags"], protocol_line(run_protocol(folder)),
                                out / "layer_errors")
    if not as_json:
        click.echo(tables["error_exponents"].to_string(index=False, float_format=lambda v: f"{v:.2f}") + "\n")
    echo_analysis(coherence_table(tables["coherence"]), as_json, f"tables and {len(figures)} figure files in {out}")
