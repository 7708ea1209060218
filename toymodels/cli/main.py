"""`toymodels` on the command line: a thin layer over the Python API (toymodels.api). The group
lists its commands (COMMANDS) and loads a command's module only when that command runs, so that
`toymodels --help` and `toymodels run --help` start without importing torch.

  run          train a sweep (run.py)
  fits         fit, join and plot a run (fits.py)
  analyses     diagnose, ladder and layer-errors: what a run's saved students show (analyses.py)
  experiments  reproduce an experiment, write the docs (experiments.py)
  bench        time the engine (bench.py)
  scaling_law  the Chinchilla runs' scaling law (scaling_law.py)
"""

import importlib
import sys

import click

from ..errors import ToymodelsError
from ..version import __version__

# name → (its module here, the command in it, the line `toymodels --help` gives it)
COMMANDS = {
    "run": ("run", "run", "Train a sweep of students and fit α_ℓ, naming the regime it shows."),
    "fit": ("fits", "fit", "Fit α_ℓ of a run, with its interval, regime and convergence flags."),
    "join": ("fits", "join", "Join the parts of a grid split by replicate into one run, and fit it."),
    "plot": ("fits", "plot", "Draw a run's figures: loss against depth, α against T and against step."),
    "reproduce": (
        "experiments",
        "reproduce_command",
        "Reproduce one of the paper's figures, or your own experiment file.",
    ),
    "docs": ("experiments", "docs", "Write the docs' results pages and summary from the committed runs."),
    "diagnose": ("analyses", "diagnose", "Hidden-state diagnostics of a run's teachers and trained students."),
    "ladder": ("analyses", "ladder", "How fast each student still converges, and the loss it converges to."),
    "layer-errors": ("analyses", "layer_errors", "How each saved student's layer errors add up to its output error."),
    "bench": ("bench", "bench", "Time the training engine, in this process and as worker jobs."),
    "scaling-law": (
        "scaling_law",
        "scaling_law_command",
        "Fit the Chinchilla runs' scaling law in model size, depth and data.",
    ),
}


def unrecorded_folders() -> list:
    """The folders whose tables were read without a checksums record since the last call and
    still have none, each once (results/storage.py; not imported here when no command read a
    table). A new run reads its tables before it writes their record: that is no old run's."""
    storage = sys.modules.get("toymodels.results.storage")
    if storage is None:
        return []
    folders = sorted(folder for folder in storage.UNRECORDED if not (folder / storage.CHECKSUMS).is_file())
    storage.UNRECORDED.clear()
    return folders


class OneLineErrors(click.Group):
    """Bad input prints one line and exits with status 2, never a traceback."""

    def main(self, args=None, prog_name=None, **extra):
        unrecorded_folders()  # what the process read before this command is not this command's to tell
        try:
            result = super().main(args=args, prog_name=prog_name, standalone_mode=False, **extra)
            for folder in unrecorded_folders():
                click.echo(
                    f"toymodels: note: {folder} has no checksums.json (written before the suite recorded its "
                    f"tables): they were checked for a complete last row only",
                    err=True,
                )
            return result
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
            click.echo(
                f"toymodels: error: {where}{error.strerror or error} (nothing else was written there; "
                f"a folder you can write, with --out where the command has one, fixes it)",
                err=True,
            )
            sys.exit(2)


class LazyCommands(OneLineErrors):
    """The `toymodels` group: COMMANDS, each module imported when its command is asked for."""

    def list_commands(self, ctx):
        return [*COMMANDS, *super().list_commands(ctx)]

    def get_command(self, ctx, name):
        if name not in COMMANDS:
            return super().get_command(ctx, name)
        module, attribute, short_help = COMMANDS[name]
        command = getattr(importlib.import_module(f".{module}", __package__), attribute)
        command.short_help = short_help
        return command

    def format_commands(self, ctx, formatter):
        """The commands' lines, from COMMANDS: listing them loads none."""
        with formatter.section("Commands"):
            formatter.write_dl([(name, short_help) for name, (_, _, short_help) in COMMANDS.items()])


@click.group(cls=LazyCommands, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(__version__, "--version", prog_name="toymodels", message="%(prog)s %(version)s")
def main():
    """Teacher-student toy models of how deep residual networks use their depth."""
