"""The Python API behind the CLI: run a sweep into a folder, fit it, plot it.

    from toymodels import resolve_config, run_sweep, fit_run
    folder = run_sweep(resolve_config("quick", teachers=["tied"], temperatures=[0.1, 1.0]))
    for fit in fit_run(folder.path):
        print(fit.teacher, fit.temperature, fit.alpha, fit.alpha_low, fit.alpha_high)
"""

from .config import SweepConfig
from .engine import train
from .fitting import CONVERGENCE_TOLERANCE, DepthFit, fit_depth_exponents
from .report import format_table, summary_table
from .storage import RunFolder, default_run_path


SMALL_CHECKPOINT_BYTES = 50 * 2**20  # kept by default below this size (--save-students forces, --no-… skips)


def run_sweep(config: SweepConfig, out=None, progress: bool = True) -> RunFolder:
    """Train every student of `config`, writing metrics as they come, then the summary table.
    `out`: a folder path, a RunFolder already created, or None for runs/<time>-<teacher>-<loss>."""
    folder = out if isinstance(out, RunFolder) else RunFolder.create(out or default_run_path(config), config)
    sweep = train(config, on_evaluation=folder.append_metrics, progress=progress)
    size = sum(p.numel() * p.element_size() for p in sweep.students.parameters())
    if config.save_students or (config.save_students is None and size <= SMALL_CHECKPOINT_BYTES):
        folder.save_students(sweep)
    fits = fit_depth_exponents(folder.metrics())
    folder.save_summary(summary_table(fits), format_table(fits, config))
    return folder


def fit_run(path, min_depth=1, max_depth=None, tolerance=CONVERGENCE_TOLERANCE, n_boot=2000) -> list[DepthFit]:
    """α per (teacher, temperature) of the run in folder `path`."""
    return fit_depth_exponents(RunFolder.open(path).metrics(), min_depth, max_depth, tolerance, n_boot)
