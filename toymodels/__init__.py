"""toymodels: teacher–student toy models of how deep residual networks use their depth.

The names below load their module on first use, so that importing one part (say
`toymodels.config`) does not import the training stack.
"""

import importlib

_EXPORTS = {
    "fit_run": "api", "run_sweep": "api",
    "PRESETS": "config", "SweepConfig": "config", "resolve_config": "config",
    "ToymodelsError": "errors",
    "LOSSES": "losses", "Loss": "losses", "register_loss": "losses",
    "RunFolder": "storage",
    "STUDENTS": "students", "Architecture": "students", "Students": "students",
    "TEACHERS": "teachers", "LayerWeights": "teachers", "Teachers": "teachers", "register_teacher": "teachers",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'toymodels' has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
