"""The named parts of a protocol, looked up in their registries: a config names its teachers,
student architecture, loss and schedule; this resolves every name once, before anything is
written or trained, so that a typo is one clear line and not a failed job."""

from ..config import SweepConfig
from ..models.losses import loss_named
from ..models.starts import start_named
from ..models.students import student_architecture
from ..models.teachers import teacher_dynamics
from .optim import SCHEDULES


def check_components(config: SweepConfig) -> SweepConfig:
    """`config`, once every component it names exists (raises ToymodelsError otherwise)."""
    for name in config.teachers:
        teacher_dynamics(name)
    student_architecture(config.student)
    loss_named(config.loss)
    SCHEDULES.lookup(config.schedule)
    for name in config.starts:
        start_named(name)
    return config
