"""A stack of residual MLPs' weights, and how PyTorch's default `nn.Linear` draws them."""

import math
from dataclasses import dataclass

import torch


@dataclass
class LayerWeights:
    """Weights of `depth` residual MLPs: w_in (depth, d, 4d), b_in (depth, 1, 4d), w_out (depth, 4d, d)."""

    w_in: torch.Tensor
    b_in: torch.Tensor
    w_out: torch.Tensor


def linear_init(shape, fan_in: int, generator: torch.Generator) -> torch.Tensor:
    """PyTorch's default nn.Linear init: uniform in ±1/√fan_in (weights and bias alike)."""
    bound = 1.0 / math.sqrt(fan_in)
    return torch.empty(shape).uniform_(-bound, bound, generator=generator)


def default_layers(count: int, width: int, generator: torch.Generator) -> LayerWeights:
    """`count` independent layers with PyTorch's default Linear init."""
    hidden = 4 * width
    return LayerWeights(
        w_in=linear_init((count, width, hidden), width, generator),
        b_in=linear_init((count, 1, hidden), width, generator),
        w_out=linear_init((count, hidden, width), hidden, generator),
    )
