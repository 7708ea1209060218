"""A teacher dynamics of your own, outside the package: run it with

    toymodels run --teacher "examples/custom_teacher.py:drifting(memory=0.9)" --loss mse

A dynamics is a function (depth, width, generator, **params) -> the weights of every layer,
registered with `@register_teacher("name", **params)`: each parameter declared as a config field
is, with its default, its meaning and its range, and checked alike (`--teacher
"...:drifting(memory=2)"` is one line and exit status 2).
Draw with `generator` (so the seed decides everything) and start from `default_layers`
(PyTorch's default Linear init); the suite adds the 1/√depth output scaling and the read-out.
"""

import math

import torch

from toymodels import register_teacher, setting
from toymodels.models.weights import LayerWeights, default_layers


@register_teacher("drifting", memory=setting(0.9, "how much of the layer before each layer keeps", low=0, high=1))
def drifting(depth, width, generator, memory: float) -> LayerWeights:
    """Weights that drift along depth as an AR(1) process, w_l = m·w_{l−1} + √(1−m²)·ε_l:
    m = 0 is the independent teacher, m → 1 the tied one, with the per-layer scale kept."""
    noise = default_layers(depth, width, generator)
    drifted = []
    for name in ("w_in", "b_in", "w_out"):
        steps = list(getattr(noise, name))
        for layer in range(1, depth):
            steps[layer] = memory * steps[layer - 1] + math.sqrt(1 - memory**2) * steps[layer]
        drifted.append(torch.stack(steps))
    return LayerWeights(*drifted)
