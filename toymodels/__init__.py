"""toymodels: teacher–student toy models of how deep residual networks use their depth.

The parts, in the order data flows (each may import only those before it):
  version, errors,           leaves: the installed version, the user-error type, name →
  registry, columns,         component, the names of a run's rows, settings that declare and
  settings, config           check themselves; the protocol's values
  models/                    blocks, losses, teachers, starts, student architectures
  training/                  optimiser, the protocol resolved, jobs, population, engine, preflight,
                             progress of long stages, the trained start's reader
  results/                   the run folder on disk, provenance, fits, tables, the budget ladder's
                             maths, certificates other runs withdraw, the test set's noise
                             (imports nothing from training/)
  plotting/, analysis/       figures; hidden-state diagnostics, layer errors and the scaling law
  performance/               the one-student loop, step traces, graph replays and `toymodels bench`
  workflows/                 stages, jobs through joblib/dask, the polish and its certificate,
                             fits written, sweeps and joins, ladders, experiment files, figures,
                             `reproduce`
  api, pages/                the Python API (names gathered from workflows/); the docs' pages
  cli/                       the `toymodels` command

Every public name is `toymodels.api`'s (one export table, in api.py), loaded from its module on
first use, so that importing one part (say `toymodels.config`) does not import the training stack;
__init__.pyi and api.pyi show them to editors and type checkers.
"""

from . import api as _api
from .version import __version__

__all__ = [*_api.__all__, "__version__"]


def __getattr__(name: str):
    if name not in _api._EXPORTS:
        raise AttributeError(f"module 'toymodels' has no attribute {name!r}")
    return getattr(_api, name)


def __dir__():
    return __all__
