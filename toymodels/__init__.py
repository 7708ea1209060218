"""toymodels: teacher–student toy models of how deep residual networks use their depth.

The parts, in the order data flows (each may import only those before it):
  version, errors,           leaves: the installed version, the user-error type, name →
  registry, vocabulary,      component, the names of a run's rows, settings that declare and
  settings, config           check themselves; the protocol's values
  models/                    blocks, losses, teachers, starts, student architectures
  training/                  optimiser, the protocol resolved, jobs, population, engine, preflight,
                             progress of long stages, the trained start's reader
  results/                   the run folder on disk, provenance, fits, tables, the budget ladder's
                             maths, certificates other runs withdraw, the test set's noise
                             (imports nothing from training/)
  plotting/, analysis/       figures; hidden-state diagnostics, layer errors and the scaling law
  performance/               the one-student loop, step traces, graph replays and `toymodels bench`
  runs/                      stages, jobs through joblib/dask, the polish and its certificate,
                             fits written, sweeps and joins, ladders, experiment files, figures,
                             `reproduce`
  api, docs                  the Python API (names gathered from runs/); the docs generator
  cli/                       the `toymodels` command

The names below load their module on first use, so that importing one part (say
`toymodels.config`) does not import the training stack.
"""

import importlib

from .version import __version__

_EXPORTS = {
    "fit_run": "api", "load_fits": "api", "run_sweep": "api",
    "PRESETS": "config", "SweepConfig": "config", "resolve_config": "config",
    "ToymodelsError": "errors", "setting": "settings",
    "LOSSES": "models.losses", "Loss": "models.losses", "register_loss": "models.losses",
    "STARTS": "models.starts", "StudentStart": "models.starts", "register_start": "models.starts",
    "RunFolder": "results.storage",
    "STUDENTS": "models.students", "Architecture": "models.students", "Students": "models.students",
    "register_student": "models.students", "SCHEDULES": "training.optim", "register_schedule": "training.optim",
    "OPTIMIZERS": "training.optim", "register_optimizer": "training.optim",
    "TEACHERS": "models.teachers", "LayerWeights": "models.teachers", "Teachers": "models.teachers",
    "Flow": "models.teachers", "Integrator": "models.integrators",
    "register_teacher": "models.teachers",
}
__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'toymodels' has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
