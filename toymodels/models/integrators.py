"""Integrators: how a network runs through its layers, for teachers and students alike.

A network's layers are the steps of an integrator. It makes a state from the input h_0 (`start`),
advances the state by one layer (`step`), and says which part of the state is the hidden state h
that the read-out and the diagnostics see (`hidden`). A step never sees weights: it gets the
layer's *field*, `field(h, stage=0)`, the MLP branch of stage `stage` at h with the layer's scales
applied (blocks.layer_field), as an ODE solver gets a vector field. The residual block
h ← h + MLP(rmsnorm(h)) is `BlockStep(euler_block, order=1)`: a state of h alone, stepped by a
block function (h, field) -> h′. An integrator that carries more than h (a two-step rule's previous
state, a second-order flow's velocity) subclasses `Integrator`: examples/leapfrog_student.py,
examples/ab2_student.py and examples/heavy_ball_teacher.py.

The rules a plug-in keeps (docs/extending.md says why each holds):
- `order`, on the class or at its registration: the global error on a smooth flow falls as ℓ^−order,
  and the verdict judges a converged student's α against 2·order.
- A frozen dataclass: equal integrators must compare and hash equal, since teachers whose
  integrators are equal run as one batch; an unhashable one is refused. Its fields declared with
  `setting(...)` are a student's parameters (`--student "ab2(beta=0.5)"`).
- Every part of a state is (models, batch, width), so that a population sets finished students
  aside by slicing each part alike; `hidden(start(h0))` is h0. Checked when it is registered.
- `layer` is the network's own 0-indexed layer (a student's, not the teacher's it mimics).
"""

import inspect
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Callable, ClassVar

import torch

from ..errors import ToymodelsError
from .blocks import Field, euler_block

State = tuple[torch.Tensor, ...]


class Integrator(ABC):
    """Subclass it for a network whose state is more than h: define `step`, and `start` and
    `hidden` where the state holds more; declare `order`."""

    order: ClassVar[int | None] = None  # its global error on a smooth flow ∝ ℓ^−order

    def start(self, h0: torch.Tensor) -> State:
        return (h0,)

    @abstractmethod
    def step(self, state: State, layer: int, field: Field) -> State:
        """The state after layer `layer` (0-indexed), whose MLP branch is `field(h, stage=0)`."""

    def hidden(self, state: State) -> torch.Tensor:
        return state[0]


@dataclass(frozen=True)
class BlockStep(Integrator):
    """A state of h alone, stepped by a block function (h, field) -> h′."""

    block: Callable[[torch.Tensor, Field], torch.Tensor]
    order: int | None = None  # a block function's order is given at its registration

    def step(self, state, layer, field):
        return (self.block(state[0], field),)


EULER = BlockStep(euler_block, order=1)  # every built-in teacher's, and the paper's student


def as_integrator(definition, owner: str) -> Integrator:
    """An integrator from what a user registered (an Integrator, an Integrator subclass made with no
    arguments, or a block function), its state's shapes checked."""
    if isinstance(definition, type) and issubclass(definition, Integrator):
        if inspect.isabstract(definition):
            raise ToymodelsError(f"{owner}'s integrator {definition.__name__} must define step(state, layer, field)")
        definition = definition()
    if not isinstance(definition, Integrator):
        if not callable(definition):
            raise ToymodelsError(f"{owner} must be a block function or an Integrator, not {type(definition).__name__}")
        definition = BlockStep(definition)
    check_integrator(definition, owner)
    return definition


def check_integrator(integrator: Integrator, owner: str) -> None:
    """Refuse, in one line, an integrator that breaks a rule the population relies on: hashable,
    and a state of (models, batch, width) parts whose hidden part starts as h0."""
    name = type(integrator).__name__
    try:
        hash(integrator)
    except TypeError:
        raise ToymodelsError(
            f"{owner}'s integrator {name} must be hashable (a @dataclass(frozen=True)): teachers "
            f"whose integrators are equal run as one batch"
        ) from None
    h0 = torch.ones(2, 3, 4)
    state = integrator.start(h0)
    shapes = (
        [tuple(part.shape) if isinstance(part, torch.Tensor) else type(part).__name__ for part in state]
        if isinstance(state, tuple)
        else type(state).__name__
    )
    if not isinstance(state, tuple) or any(shape != (2, 3, 4) for shape in shapes):
        raise ToymodelsError(
            f"{owner}'s integrator {name}: start(h0) must give a tuple of tensors shaped (models, "
            f"batch, width) like h0's (2, 3, 4); got {shapes}"
        )
    if not torch.equal(integrator.hidden(state), h0):
        raise ToymodelsError(f"{owner}'s integrator {name}: hidden(start(h0)) must be h0")


def state_parts(integrator: Integrator, like: torch.Tensor) -> int:
    """How many tensors `integrator`'s state holds (1: h alone)."""
    return len(integrator.start(like))
