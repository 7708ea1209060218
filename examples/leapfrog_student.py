"""A student that carries state, outside the package: train it as

    toymodels run --teacher tied --loss mse --student examples/leapfrog_student.py:leapfrog

The leapfrog (explicit midpoint) rule steps a flow dh/dt = f(h) by h_{k+1} = h_{k−1} + 2·g_k(h_k),
where g_k is layer k's MLP branch (the field times the step): each layer needs the state before
the last, so the student's state is the pair (h_{k−1}, h_k). Its first layer has no state before
it and takes an Euler step. It is second order: its global error on a smooth flow falls as ℓ^−2.

An integrator says how its state starts from h_0, how one layer steps it through the layer's
field, and which part of it is the hidden state h the read-out and the diagnostics see;
`toymodels.Integrator` documents the three, and docs/extending.md the rules a state keeps.
"""

from dataclasses import dataclass

from toymodels import Integrator, register_student


@register_student("leapfrog")
@dataclass(frozen=True)
class Leapfrog(Integrator):
    order = 2

    def start(self, h0):
        return (h0, h0)  # (h_{k−1}, h_k); the first step does not read h_{k−1}

    def step(self, state, layer, field):
        before, h = state
        return (h, h + field(h)) if layer == 0 else (h, before + 2 * field(h))

    def hidden(self, state):
        return state[1]
