"""A second-order teacher, outside the package: train students against it as

    toymodels run --teacher "examples/heavy_ball_teacher.py:heavy_ball(inertia=0.5)" --loss mse

Its network carries a velocity beside h, as a heavy ball rolling in the MLP's field with friction:
v_{l+1} = μ·v_l + MLP(rmsnorm(h_l)), h_{l+1} = h_l + v_{l+1}, from v_0 = 0. The inertia μ ∈ [0, 1)
is how much velocity a layer keeps: μ = 0 keeps none and is the tied teacher exactly, a larger μ
lets each layer's push carry on through the next ones. Its weights are the tied teacher's (one
layer, repeated); a dynamics returns them with the integrator that steps them as a `Flow`.
"""

from dataclasses import dataclass

import torch

from toymodels import Flow, Integrator, register_teacher, setting
from toymodels.models.teachers import tied


@dataclass(frozen=True)
class HeavyBall(Integrator):
    inertia: float
    order = 1  # a first-order rule for the damped flow its layers step

    def start(self, h0):
        return (h0, torch.zeros_like(h0))  # (h, v)

    def step(self, state, layer, field):
        h, velocity = state
        velocity = self.inertia * velocity + field(h)
        return (h + velocity, velocity)


@register_teacher("heavy_ball", inertia=setting(0.5, "the share of its velocity a layer keeps", low=0, below=1))
def heavy_ball(depth, width, generator, inertia: float) -> Flow:
    return Flow(tied(depth, width, generator), HeavyBall(inertia))
