"""toymodels: teacher–student toy models of how deep residual networks use their depth."""

from .api import fit_run, run_sweep
from .config import PRESETS, SweepConfig, resolve_config
from .errors import ToymodelsError
from .storage import RunFolder
from .students import STUDENTS, Students
from .teachers import TEACHERS, Teachers, register_teacher

__all__ = ["PRESETS", "RunFolder", "STUDENTS", "Students", "SweepConfig", "TEACHERS", "Teachers",
           "ToymodelsError", "fit_run", "register_teacher", "resolve_config", "run_sweep"]
