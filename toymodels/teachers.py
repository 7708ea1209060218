"""Teachers: deep residual networks whose layer-to-layer dynamics is the object of study.

A *dynamics* is a function `(depth, width, generator, **params) -> LayerWeights` that says how
the weights of the `depth` layers relate to one another; `independent` (a random walk) and `tied`
(one smooth flow) are the two of the paper. Register a new one with `@register_teacher("name")`.
The `Teachers` stack adds what every teacher shares: output projections × 1/√depth, the
rmsnorm read-out and the head for the KL losses.
"""

import math
from dataclasses import dataclass
from typing import Callable

import torch

from .blocks import linear_init, mlp, rmsnorm, seeded_generator
from .errors import ToymodelsError

# Stream names for `seeded_generator`: each kind of random draw has its own stream.
WEIGHTS_STREAM, TRAIN_DATA_STREAM, TEST_DATA_STREAM, HEAD_STREAM, STUDENT_STREAM = range(5)


@dataclass
class LayerWeights:
    """Weights of `depth` residual MLPs: w_in (depth, d, 4d), b_in (depth, 1, 4d), w_out (depth, 4d, d)."""

    w_in: torch.Tensor
    b_in: torch.Tensor
    w_out: torch.Tensor


def default_layers(count: int, width: int, generator: torch.Generator) -> LayerWeights:
    """`count` independent layers with PyTorch's default Linear init."""
    hidden = 4 * width
    return LayerWeights(
        w_in=linear_init((count, width, hidden), width, generator),
        b_in=linear_init((count, 1, hidden), width, generator),
        w_out=linear_init((count, hidden, width), hidden, generator),
    )


TEACHERS: dict[str, Callable[..., LayerWeights]] = {}


def register_teacher(name: str):
    """Decorator: make a dynamics available as `--teacher name`."""

    def add(dynamics):
        TEACHERS[name] = dynamics
        return dynamics

    return add


@register_teacher("independent")
def independent(depth: int, width: int, generator: torch.Generator) -> LayerWeights:
    """Every layer drawn independently: the residual stream does a random walk."""
    return default_layers(depth, width, generator)


@register_teacher("tied")
def tied(depth: int, width: int, generator: torch.Generator) -> LayerWeights:
    """Every layer a copy of layer 0: `depth` Euler steps of one smooth flow."""
    layer = default_layers(1, width, generator)
    return LayerWeights(*(w.expand(depth, *w.shape[1:]).clone() for w in (layer.w_in, layer.b_in, layer.w_out)))


def teacher_dynamics(name: str) -> Callable[..., LayerWeights]:
    if name not in TEACHERS:
        raise ToymodelsError(f"unknown teacher {name!r}; choose from {', '.join(sorted(TEACHERS))}")
    return TEACHERS[name]


def teacher_head(width: int, vocab: int, gaussian: bool, generator: torch.Generator) -> torch.Tensor:
    """The read-out head (d → V): PyTorch's default Linear init, or N(0,1)/√d for the
    fixed head that teacher and student share."""
    if gaussian:
        return torch.randn((width, vocab), generator=generator) / math.sqrt(width)
    return linear_init((width, vocab), width, generator)


class Teachers:
    """A stack of teacher instances (one per teacher × replicate), run together on one device.

    `forward(x)` takes inputs (instances, batch, width) and returns the read-out rmsnorm(h_L);
    `hidden_states(x)` returns every h_0 … h_L for the diagnostics.
    """

    def __init__(self, names, replicates, depth, width, vocab, seed, device, gaussian_head=False):
        self.instances = [(name, r) for name in names for r in range(replicates)]
        layers = [teacher_dynamics(name)(depth, width, seeded_generator(seed, WEIGHTS_STREAM, r))
                  for name, r in self.instances]
        # Stacked as (depth, instances, ...) so that one layer of every instance is one bmm.
        self.w_in = torch.stack([w.w_in for w in layers], 1).to(device)
        self.b_in = torch.stack([w.b_in for w in layers], 1).to(device)
        self.w_out = torch.stack([w.w_out for w in layers], 1).to(device) / math.sqrt(depth)
        self.head = torch.stack([teacher_head(width, vocab, gaussian_head, seeded_generator(seed, HEAD_STREAM, r))
                                 for _, r in self.instances]).to(device)

    @torch.no_grad()
    def hidden_states(self, x: torch.Tensor) -> list[torch.Tensor]:
        h = rmsnorm(x)
        states = [h]
        for w_in, b_in, w_out in zip(self.w_in, self.b_in, self.w_out):
            h = h + mlp(rmsnorm(h), w_in, b_in, w_out)
            states.append(h)
        return states

    @torch.no_grad()
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rmsnorm(self.hidden_states(x)[-1])
