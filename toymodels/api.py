"""The Python API behind the CLI: run a sweep into a folder, fit it, read its certificates, its
budget ladder and its layer errors, draw its figures, and run the paper's experiments. It only
gathers the public names; each lives in the module that does its work (toymodels/workflows/,
analysis/, plotting/, results/), imported on first use, so that the command line's help starts
without the training stack.

```python
from toymodels import resolve_config, run_sweep, fit_run
folder = run_sweep(resolve_config("quick", teachers=["tied"], temperatures=[0.1, 1.0]))
for fit in fit_run(folder.path):
    print(fit.teacher, fit.temperature, fit.alpha, fit.alpha_low, fit.alpha_high)
```
"""

import importlib

_EXPORTS = {
    # a run: trained, joined, fitted, read at a budget
    "run_sweep": "workflows.sweep",
    "join_runs": "workflows.sweep",
    "missing_jobs": "workflows.sweep",
    "JobsFailed": "workflows.parallel",
    "RunFolder": "results.storage",
    "default_run_path": "results.storage",
    "fit_run": "workflows.fits",
    "fit_metrics": "workflows.fits",
    "fit_window": "workflows.fits",
    "fitted_run": "workflows.fits",
    "load_fits": "workflows.fits",
    "run_at_budget": "workflows.fits",
    "run_protocol": "workflows.fits",
    "write_fit": "workflows.fits",
    "budget_certificate": "workflows.fits",
    "budget_noise": "workflows.certificates",
    # what is printed of it
    "fit_document": "results.report",
    "format_table": "results.report",
    "protocol_line": "results.report",
    "temperature_label": "results.report",
    "provenance_line": "results.provenance",
    # its analyses and figures
    "budget_ladder": "workflows.ladder",
    "ladder_lines": "results.ladder",
    "ratio_lines": "results.ladder",
    "tail_lines": "results.tails",
    "tail_families": "results.tails",
    "plot_ladder": "plotting.ladder",
    "split_layer_errors": "workflows.layer_errors",
    "coherence_table": "analysis.layer_errors",
    "plot_layer_errors": "plotting.layer_errors",
    "diagnose_run": "analysis.diagnostics",
    "diagnostics_summary": "analysis.diagnostics",
    "plot_diagnostics": "plotting.diagnostics",
    "plot_run": "plotting.fit_figures",
    # experiments
    "Experiment": "workflows.experiment",
    "experiment_names": "workflows.experiment",
    "resolve_run_config": "workflows.experiment",
    "redraw": "workflows.experiment_figures",
    "reference_exponents": "workflows.experiment_figures",
    "describe_experiments": "workflows.reproduce",
    "reproduce": "workflows.reproduce",
    # the protocol and what a user plugs into it (models/, training/optim.py; docs/extending.md)
    "PRESETS": "config",
    "SweepConfig": "config",
    "resolve_config": "config",
    "ToymodelsError": "errors",
    "setting": "settings",
    "LOSSES": "models.losses",
    "Loss": "models.losses",
    "register_loss": "models.losses",
    "STARTS": "models.starts",
    "StudentStart": "models.starts",
    "register_start": "models.starts",
    "STUDENTS": "models.students",
    "Architecture": "models.students",
    "Students": "models.students",
    "register_student": "models.students",
    "TEACHERS": "models.teachers",
    "LayerWeights": "models.weights",
    "Teachers": "models.teachers",
    "Flow": "models.teachers",
    "register_teacher": "models.teachers",
    "Integrator": "models.integrators",
    "SCHEDULES": "training.optim",
    "register_schedule": "training.optim",
    "OPTIMIZERS": "training.optim",
    "register_optimizer": "training.optim",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'toymodels.api' has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_EXPORTS[name]}", __package__), name)


def __dir__():
    return __all__


def stub_text(module: str = "toymodels.api") -> str:
    """The type stub of `module` (toymodels.api, or the package, which re-exports it): every name of
    the export table imported where it lives, so that editors and type checkers see what
    `__getattr__` hands out on first use. `tests/test_api.py` holds api.pyi and __init__.pyi to it."""
    lines = ['"""Generated from toymodels/api.py\'s export table by `toymodels.api.stub_text`; edit the table."""', ""]
    if module == "toymodels":
        lines += ["from toymodels.version import __version__ as __version__"]
    lines += [f"from toymodels.{_EXPORTS[name]} import {name} as {name}" for name in sorted(_EXPORTS, key=str.lower)]
    if module == "toymodels.api":
        lines += ["", 'def stub_text(module: str = "toymodels.api") -> str: ...']
    return "\n".join(lines) + "\n"
