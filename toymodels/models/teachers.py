"""Teachers: deep residual networks whose layer-to-layer dynamics is the object of study.

A *dynamics* is a function `(depth, width, generator, **params) -> LayerWeights` that says how
the weights of the `depth` layers relate to one another; `independent` (a random walk) and `tied`
(one smooth flow) are the two of the paper. Register a new one with `@register_teacher("name")`,
or name a function in your own file: `--teacher path/to/file.py:function` (or
`package.module:function`). Parameters go in parentheses: `--teacher "correlated(rho=0.5)"`.
The `Teachers` stack adds what every teacher shares: output projections × 1/√depth, the
rmsnorm read-out and the head for the KL losses.
"""

import ast
import functools
import inspect
import math
import re
from dataclasses import dataclass
from typing import Callable

import torch

from ..config import SweepConfig
from ..errors import ToymodelsError
from ..registry import Registry
from .blocks import linear_init, mlp, rmsnorm, seeded_generator

# Stream names for `seeded_generator`: each kind of random draw has its own stream.
WEIGHTS_STREAM, TRAIN_DATA_STREAM, TEST_DATA_STREAM, HEAD_STREAM, STUDENT_STREAM, POOL_STREAM = range(6)


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


TEACHERS = Registry("teacher")
register_teacher = TEACHERS.register  # decorator: `--teacher name` uses the function


@register_teacher("independent")
def independent(depth: int, width: int, generator: torch.Generator) -> LayerWeights:
    """Every layer drawn independently: the residual stream does a random walk."""
    return default_layers(depth, width, generator)


@register_teacher("tied")
def tied(depth: int, width: int, generator: torch.Generator) -> LayerWeights:
    """Every layer a copy of layer 0: `depth` Euler steps of one smooth flow."""
    layer = default_layers(1, width, generator)
    return LayerWeights(*(w.expand(depth, *w.shape[1:]).clone() for w in (layer.w_in, layer.b_in, layer.w_out)))


@register_teacher("correlated")
def correlated(depth: int, width: int, generator: torch.Generator, rho: float = 0.5) -> LayerWeights:
    """Each layer √ρ·shared + √(1−ρ)·own: ρ = 0 independent, ρ = 1 tied, same per-layer scale."""
    if not 0 <= rho <= 1:
        raise ToymodelsError(f"correlated teacher: rho must be in [0, 1], got {rho}")
    shared, own = default_layers(1, width, generator), default_layers(depth, width, generator)
    return _combine(lambda a, b: math.sqrt(rho) * a + math.sqrt(1 - rho) * b, shared, own)


@register_teacher("smooth")
def smooth(depth: int, width: int, generator: torch.Generator, anchors: int = 4) -> LayerWeights:
    """Weights that vary smoothly with depth (a non-autonomous smooth flow): `anchors` random
    layers spread along the depth, interpolated as cos·A + sin·B, which keeps the per-layer scale."""
    if not 2 <= anchors <= depth:
        raise ToymodelsError(f"smooth teacher: anchors must be in [2, depth], got {anchors}")
    points = default_layers(anchors, width, generator)
    position = torch.linspace(0, anchors - 1, depth)
    left = position.floor().long().clamp(max=anchors - 2)
    angle = (position - left) * math.pi / 2
    return _combine(lambda w: _expand(angle.cos(), w) * w[left] + _expand(angle.sin(), w) * w[left + 1], points)


@register_teacher("grouped")
def grouped(depth: int, width: int, generator: torch.Generator, groups: int = 4) -> LayerWeights:
    """`groups` runs of consecutive layers, tied inside a run, independent across runs."""
    if not 1 <= groups <= depth:
        raise ToymodelsError(f"grouped teacher: groups must be in [1, depth], got {groups}")
    layers = default_layers(groups, width, generator)
    index = torch.arange(depth) * groups // depth
    return _combine(lambda w: w[index], layers)


def _expand(weights: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return weights.view(-1, *[1] * (like.dim() - 1))


def _combine(operation, *layer_sets: LayerWeights) -> LayerWeights:
    """Apply `operation` to w_in, b_in and w_out alike."""
    return LayerWeights(*(operation(*(getattr(s, name) for s in layer_sets)) for name in ("w_in", "b_in", "w_out")))


def parse_teacher(spec: str) -> tuple[str, dict]:
    """"correlated(rho=0.5)" → ("correlated", {"rho": 0.5})."""
    match = re.fullmatch(r"\s*([^()\s]+)\s*(?:\((.*)\))?\s*", spec)
    if not match:
        raise ToymodelsError(f"cannot read teacher {spec!r}; write NAME or NAME(key=value, ...)")
    name, arguments = match.groups()
    params = {}
    for item in filter(None, (a.strip() for a in (arguments or "").split(","))):
        key, _, value = item.partition("=")
        try:
            params[key.strip()] = ast.literal_eval(value.strip())
        except (ValueError, SyntaxError):
            raise ToymodelsError(f"teacher {spec!r}: {item!r} is not key=number") from None
    return name, params


def teacher_dynamics(spec: str) -> Callable[..., LayerWeights]:
    """The dynamics `spec` names, its parameters bound: call it as (depth, width, generator)."""
    name, params = parse_teacher(spec)
    dynamics = TEACHERS.lookup(name)
    try:
        inspect.signature(dynamics).bind(0, 0, None, **params)
    except TypeError as error:
        raise ToymodelsError(f"teacher {spec!r}: {error}") from None
    return functools.partial(dynamics, **params)


def _checked(name: str, layers, config: SweepConfig) -> LayerWeights:
    """A dynamics' result, checked before anything trains on it."""
    hidden = 4 * config.width
    shapes = {"w_in": (config.teacher_depth, config.width, hidden), "b_in": (config.teacher_depth, 1, hidden),
              "w_out": (config.teacher_depth, hidden, config.width)}
    if not isinstance(layers, LayerWeights):
        raise ToymodelsError(f"teacher {name!r} returned {type(layers).__name__} {layers!r:.40}, not LayerWeights")
    for field, shape in shapes.items():
        weights = getattr(layers, field)
        if not isinstance(weights, torch.Tensor) or tuple(weights.shape) != shape:
            found = tuple(weights.shape) if isinstance(weights, torch.Tensor) else type(weights).__name__
            raise ToymodelsError(f"teacher {name!r}: {field} must be a tensor of shape {shape}, got {found}")
        if not torch.isfinite(weights).all():
            raise ToymodelsError(f"teacher {name!r}: {field} holds NaN or infinite weights")
    return layers


def teacher_layers(protocol, name: str, replicate: int) -> LayerWeights:
    """The layers of teacher instance (`name`, `replicate`) of `protocol` (training.protocol) as
    it runs: its dynamics' weights, checked, with every output projection × 1/√depth."""
    config = protocol.config
    layers = _checked(name, protocol.teachers[name](config.teacher_depth, config.width, seeded_generator(
        config.seed, WEIGHTS_STREAM, replicate)), config)
    return LayerWeights(layers.w_in, layers.b_in, layers.w_out / math.sqrt(config.teacher_depth))


def teacher_head(protocol, replicate: int) -> torch.Tensor | None:
    """The head (width, vocab) the protocol's loss gives teacher replicate `replicate`, or None."""
    config = protocol.config
    return protocol.loss.teacher_head(config, seeded_generator(config.seed, HEAD_STREAM, replicate))


class Teachers:
    """A stack of teacher instances (one per teacher × replicate), run together on one device.

    `forward(x)` takes inputs (instances, batch, width) and returns the read-out rmsnorm(h_L);
    `hidden_states(x)` returns every h_0 … h_L for the diagnostics. `head` (instances, width,
    vocab) is the head the protocol's loss gives a teacher, or None.
    """

    def __init__(self, protocol, device="cpu", only=None):
        """Every (name, replicate) instance of `protocol` (training.protocol), or those at indices
        `only` (a job's share)."""
        instances = protocol.config.teacher_instances
        self.instances = instances if only is None else [instances[i] for i in only]
        layers = [teacher_layers(protocol, name, r) for name, r in self.instances]
        # Stacked as (depth, instances, ...) so that one layer of every instance is one bmm.
        self.w_in = torch.stack([w.w_in for w in layers], 1).to(device)
        self.b_in = torch.stack([w.b_in for w in layers], 1).to(device)
        self.w_out = torch.stack([w.w_out for w in layers], 1).to(device)
        heads = [teacher_head(protocol, r) for _, r in self.instances]
        self.head = None if heads[0] is None else torch.stack(heads).to(device)

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
