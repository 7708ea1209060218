"""A protocol: a sweep's config with every name it holds resolved, once, into the component it
names (teacher dynamics, student architecture, loss, schedule, optimiser, starts). It is what flows down the
run path: below it no module looks a component up by its name again.

A typo or a broken plug-in fails here, as one clear line, before anything is written or trained.
Constructors that users call (`Population`, `Students`, `Teachers`, `train`) take a config or a
protocol: a config is resolved where it enters, a protocol passes through as it is.
"""

import dataclasses
from dataclasses import dataclass, field
from functools import cached_property
from typing import Callable

import torch

from ..config import SweepConfig
from ..errors import ToymodelsError
from ..models.losses import Loss, loss_named
from ..models.starts import REFERENCE_START, start_named
from ..models.students import Architecture, student_architecture
from ..models.teachers import teacher_dynamics
from .optim import OPTIMIZERS, SCHEDULES
from .trained_runs import trained_students  # noqa: F401 - importing it registers how the trained start reads a run


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ToymodelsError(f"unknown device {name!r}; use auto, cpu or cuda[:N]") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ToymodelsError("--device cuda asked for, but no CUDA device is available")
    return device


NAMED = ("teachers", "student", "loss", "schedule", "optimizer", "starts")  # the config's fields that name components


@dataclass(frozen=True, eq=False)
class Protocol:
    config: SweepConfig
    teachers: dict[str, Callable] = field(repr=False)  # as the config names them (parameters bound) → dynamics
    architecture: Architecture = field(repr=False)
    loss: Loss = field(repr=False)
    schedule: Callable = field(repr=False)
    optimizer: type = field(repr=False)  # built by the trainer from the students' parameters (optim.py)
    starts: dict[str, Callable] = field(repr=False)  # name → start function, the reference's among them

    @classmethod
    def of(cls, config: "SweepConfig | Protocol") -> "Protocol":
        """`config` with its names resolved (raises ToymodelsError naming a bad one); a protocol as it is."""
        if isinstance(config, Protocol):
            return config
        return cls(
            config,
            {name: teacher_dynamics(name) for name in config.teachers},
            student_architecture(config.student),
            loss_named(config.loss),
            SCHEDULES.lookup(config.schedule),
            OPTIMIZERS.lookup(config.optimizer),
            {name: start_named(name) for name in (*config.starts, REFERENCE_START)},
        )

    def replace(self, **changes) -> "Protocol":
        """The protocol of the config with `changes`: the same components, unless a change names others."""
        return self.with_config(self.config.replace(**changes))

    def with_config(self, config: SweepConfig) -> "Protocol":
        if any(getattr(config, name) != getattr(self.config, name) for name in NAMED):
            return Protocol.of(config)
        return dataclasses.replace(self, config=config)

    def stage(self, **changes) -> "Protocol":
        """The protocol of a stage trained inside this run (`SweepConfig.stage`), its components kept
        unless a change names others."""
        return self.with_config(self.config.stage(**changes))

    @cached_property
    def device(self) -> torch.device:
        """The device the config names (`auto`: a GPU when there is one), checked."""
        return resolve_device(self.config.device)

    @cached_property
    def temperatures(self) -> list[float]:
        """The temperatures students are trained at (the loss decides: MSE has one, None)."""
        return self.loss.temperatures(self.config)

    def __reduce__(self):  # a worker process gets the config and resolves it there (plug-in files included)
        return Protocol.of, (self.config,)
