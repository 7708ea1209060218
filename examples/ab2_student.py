"""A two-step student with a parameter, outside the package: train it as

    toymodels run --teacher tied --loss mse --student "examples/ab2_student.py:ab2(theta=0.5)"

The explicit two-step rules of second order form one family: with g_k layer k's field at h_k (the
MLP branch, i.e. the flow's velocity × the step),

    h_{k+1} = (1 − θ)·h_k + θ·h_{k−1} + ((3 + θ)·g_k − (1 − θ)·g_{k−1}) / 2,

Adams–Bashforth's at θ = 0 (the default) and the leapfrog at θ = 1. Its state carries h_{k−1} and
g_{k−1} beside h_k; its first layer, with no history, takes an Euler step. θ is a declared
parameter: a field of the integrator declared with `setting(...)`, checked as a config field is.
"""

from dataclasses import dataclass

import torch

from toymodels import Integrator, register_student, setting


@register_student("ab2")
@dataclass(frozen=True)
class TwoStep(Integrator):
    theta: float = setting(0.0, "the weight of h_{k−1}: 0 Adams–Bashforth, 1 leapfrog", low=0, high=1)
    order = 2  # for every θ

    def start(self, h0):
        return (h0, h0, torch.zeros_like(h0))  # (h_k, h_{k−1}, g_{k−1})

    def step(self, state, layer, field):
        h, before, g_before = state
        g = field(h)
        if layer == 0:
            return (h + g, h, g)
        theta = self.theta
        return ((1 - theta) * h + theta * before + ((3 + theta) * g - (1 - theta) * g_before) / 2, h, g)
