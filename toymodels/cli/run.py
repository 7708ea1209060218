"""`toymodels run`: train a sweep into a folder and print its fit. Nothing heavy is imported until
a run starts (`run --help` reads only the config's declarations)."""

import sys
from pathlib import Path

import click
import tomllib

from .. import api
from ..config import BACKENDS, PRESETS, SweepConfig
from ..errors import ToymodelsError
from .fits import warn_if_partial
from .options import config_options, protocol_fields


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


@click.command()
@click.option(
    "--preset",
    type=click.Choice(list(PRESETS)),
    default="certified",
    show_default=True,
    help="Protocol to start from: certified (certified students, minutes per teacher on a CPU), quick "
    "(a smoke test of the install, about 1 min, not certified), cpu (tens of minutes), paper (the "
    "paper's).",
)
@click.option(
    "--config",
    "config_file",
    type=click.Path(dir_okay=False),
    help="TOML file (or a run's config.json) of protocol keys; options given here override it.",
)
@click.option("--scale", help="With an experiment file: which scale, e.g. cpu or paper [default: its first].")
@config_options
@click.option(
    "--out",
    type=click.Path(file_okay=False),
    help="Results folder [default: runs/<time>-<teacher>-<loss>]; one holding an unfinished run of "
    "the same protocol is resumed.",
)
@click.option(
    "--resume",
    "resume_dir",
    type=click.Path(file_okay=False),
    help="Finish the run in this folder: finished jobs are kept, the others continue from their "
    "last checkpoint (the protocol is the folder's).",
)
@click.option(
    "--jobs",
    type=click.IntRange(min=1),
    help="Jobs to run at once: the sweep is cut into at least this many [default: 1; one per GPU with "
    "several; the dask cluster's worker threads].",
)
@click.option(
    "--backend",
    type=click.Choice(BACKENDS),
    default="local",
    show_default=True,
    help="local: worker processes on this machine; dask: a dask.distributed cluster.",
)
@click.option("--scheduler", help="Address of the dask scheduler, e.g. tcp://10.0.0.1:8786 [default: a local cluster].")
@click.option(
    "--set",
    "settings",
    multiple=True,
    callback=config_settings,
    metavar="KEY=VALUE",
    help="Any configuration key, e.g. race_margin=0.3 or head_lr_depth_scaled=true (repeatable; the value "
    "as in a TOML config file, lists as [2, 4, 8]); applied after the options above.",
)
@click.option(
    "--show-config",
    is_flag=True,
    help="Print the resolved configuration as TOML (which --config reads back) and exit without training.",
)
@click.option("--quiet", is_flag=True, help="No progress bar.")
def run(preset, config_file, scale, out, resume_dir, jobs, backend, scheduler, settings, show_config, quiet, **fields):
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
        config = api.resolve_run_config(preset, config_file, scale, **fields).replace(**settings)
        if fields["start_from"] and config.pretrain_loss is not None:
            raise ToymodelsError(
                f"--start-from takes another run's students for the trained start, but this protocol "
                f"trains its own first (on {config.pretrain_loss}): add --pretrain-loss none"
            )
        path = Path(out or api.default_run_path(config))
    if show_config:
        click.echo(config.to_toml(preset), nl=False)
        return
    if len(set(config.depths)) < 2:  # the Python API trains one depth (a probe); a sweep fits α across depths
        raise ToymodelsError(
            f"α_ℓ is a slope across depths, and this sweep has one ({config.depths[0]}): give two or "
            f"more with --depths, e.g. --depths 2,4,8,16"
        )
    try:
        folder = api.run_sweep(config, path, progress=not quiet, jobs=jobs, backend=backend, scheduler=scheduler)
    except KeyboardInterrupt:
        click.echo(
            f"\ninterrupted: finished jobs and checkpoints are in {path}; continue with "
            f"`toymodels run --resume {path}`",
            err=True,
        )
        sys.exit(130)
    except api.JobsFailed as failure:
        report_failed_jobs(failure)
        sys.exit(1)
    click.echo((folder.path / api.RunFolder.FIT_TXT).read_text(), nl=False)
    students = folder.path / api.RunFolder.STUDENTS
    kept = f" (trained students: {students.stat().st_size / 2**20:.1f} MB)" if students.exists() else ""
    click.echo(f"results: {folder.path}{kept}")


def resumed_config(resume_dir, out, config_file, scale, settings, fields) -> tuple[SweepConfig, Path]:
    """The config and folder of `run --resume`: the folder's protocol, with only where and how fast
    it runs taken from the options (any protocol option is refused)."""
    given = [f"--{name.replace('_', '-')}" for name in protocol_fields() if fields[name] is not None]
    given += ["--config"] * bool(config_file) + ["--scale"] * bool(scale) + ["--set"] * bool(settings)
    if given or out:
        raise ToymodelsError(
            f"--resume takes the protocol and folder of {resume_dir}; drop {', '.join(given + ['--out'] * bool(out))}"
        )
    if not (Path(resume_dir) / api.RunFolder.CONFIG).is_file():
        raise ToymodelsError(f"{resume_dir} holds no run to resume (no {api.RunFolder.CONFIG})")
    return api.RunFolder(resume_dir).config().replace(**fields), Path(resume_dir)


def report_failed_jobs(failure: "api.JobsFailed") -> None:
    """What a run whose jobs failed leaves: why, the fit of what finished, and how to go on."""
    folder = failure.folder
    if len(failure.failed) == len(folder.jobs()):  # nothing to fit: say why, not "no evaluations"
        click.echo(
            f"every job failed; the first with {failure.failed[0]['error']} (each job's error.txt in "
            f"{folder.path}/jobs has the traceback and config): fix the cause and "
            f"`toymodels run --resume {folder.path}`",
            err=True,
        )
        return
    warn_if_partial(folder)
    fits = api.fit_run(folder)
    if fits:
        click.echo(api.format_table(fits, api.run_protocol(folder), folder.path))
    click.echo(
        f"{len(failure.failed)} job(s) failed (their error.txt has the traceback and config); the "
        f"others are in {folder.path}: fix the cause and `toymodels run --resume {folder.path}`",
        err=True,
    )


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
