"""toymodels: teacher–student toy models of how deep residual networks use their depth."""

from .api import fit_run, run_sweep
from .config import PRESETS, SweepConfig, resolve_config
from .errors import ToymodelsError
from .losses import LOSSES, Loss, register_loss
from .storage import RunFolder
from .students import STUDENTS, Architecture, Students
from .teachers import TEACHERS, LayerWeights, Teachers, register_teacher

__all__ = ["LOSSES", "PRESETS", "STUDENTS", "TEACHERS", "Architecture", "LayerWeights", "Loss", "RunFolder",
           "Students", "SweepConfig", "Teachers", "ToymodelsError", "fit_run", "register_loss", "register_teacher",
           "resolve_config", "run_sweep"]
