"""Integrators: how a network runs through its layers, for teachers and students alike.

A network's layers are the steps of an integrator. It makes a state from the input h_0 (`start`),
advances the state by one layer with that layer's weights (`step`), and says which part of the
state is the hidden state h that the read-out and the diagnostics see (`hidden`). The residual
block h ← h + MLP(rmsnorm(h)) is `BlockStep(euler_block)`: a state of h alone, stepped by a block
function, which is what every block registered with `@register_student` becomes. An integrator
that carries more than h (a two-step rule's previous state, a second-order flow's velocity)
subclasses `Integrator`; examples/leapfrog_student.py and examples/heavy_ball_teacher.py are two.

A state is a tuple of tensors with the model axis first, (models, batch, width) each, so that a
population sets its finished students aside by slicing every part alike. A step's weights are
those of the layer's MLPs, stacked as (stages, models, ...): `w_in[s]` is stage s's of every
model (a teacher has one stage).
"""

from dataclasses import dataclass
from typing import Callable

import torch

from ..errors import ToymodelsError
from .blocks import euler_block

State = tuple[torch.Tensor, ...]


class Integrator:
    """Subclass it for a network whose state is more than h: override `step`, and `start` and
    `hidden` where the state holds more (`hidden(start(h0))` must be h0)."""

    def start(self, h0: torch.Tensor) -> State:
        return (h0,)

    def step(self, state: State, layer: int, w_in, b_in, w_out, norm_scale=1.0, branch_scale=None) -> State:
        """The state after layer `layer` (0-indexed), whose weights are given; `norm_scale`
        multiplies rmsnorm's output (LayerNorm Scaling), `branch_scale` (models, 1, 1) or None an
        MLP's output (a depth parametrisation)."""
        raise NotImplementedError(f"{type(self).__name__} must define step(state, layer, w_in, b_in, w_out, ...)")

    def hidden(self, state: State) -> torch.Tensor:
        return state[0]


@dataclass(frozen=True)
class BlockStep(Integrator):
    """A state of h alone, stepped by a block function (h, w_in, b_in, w_out, norm_scale,
    branch_scale) -> h′."""

    block: Callable

    def step(self, state, layer, *weights_and_scales):
        return (self.block(state[0], *weights_and_scales),)


EULER = BlockStep(euler_block)  # every built-in teacher's, and the paper's student


def as_integrator(definition, owner: str) -> Integrator:
    """An integrator from what a user registered: an Integrator, an Integrator subclass (made with
    no arguments) or a block function."""
    if isinstance(definition, type) and issubclass(definition, Integrator):
        definition = definition()
    if isinstance(definition, Integrator):
        return definition
    if callable(definition):
        return BlockStep(definition)
    raise ToymodelsError(f"{owner} must be a block function or an Integrator, not {type(definition).__name__}")


def state_parts(integrator: Integrator, like: torch.Tensor) -> int:
    """How many tensors `integrator`'s state holds (1: h alone)."""
    return len(integrator.start(like))
