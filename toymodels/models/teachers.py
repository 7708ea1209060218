"""Teachers: deep residual networks whose layer-to-layer dynamics is the object of study.

A *dynamics* is a function `(depth, width, generator, **params) -> LayerWeights` that says how
the weights of the `depth` layers relate to one another; `independent` (a random walk) and `tied`
(one smooth flow) are the two of the paper. Register a new one with `@register_teacher("name")`,
or name a function in your own file: `--teacher path/to/file.py:function` (or
`package.module:function`). Parameters go in parentheses: `--teacher "correlated(rho=0.5)"`.
A dynamics whose network steps its layers other than h ← h + MLP(rmsnorm(h)) (a second-order
flow, with a velocity in its state) returns `Flow(layers, integrator)` (models/integrators.py).
The `Teachers` stack adds what every teacher shares: output projections × 1/√depth, the
rmsnorm read-out and the head for the KL losses.
"""

import functools
import inspect
import math
from dataclasses import dataclass
from typing import Callable

import torch

from ..config import SweepConfig
from ..errors import ToymodelsError
from ..registry import Registry, parse_call
from ..settings import declared_problem, setting
from .blocks import layer_field, rmsnorm
from .integrators import EULER, Integrator, check_integrator
from .streams import HEAD_STREAM, WEIGHTS_STREAM, seeded_generator
from .weights import LayerWeights, default_layers


@dataclass(frozen=True)
class Flow:
    """A teacher's layers and the integrator that steps through them: what a dynamics returns
    when its network is not h ← h + MLP(rmsnorm(h)) layer after layer."""

    layers: LayerWeights
    integrator: Integrator = EULER

    @property
    def order(self) -> int:
        """Its integrator's: the order of the rule its layers step its flow by."""
        return self.integrator.order


TEACHERS = Registry("teacher")


def register_teacher(name: str, **parameters):
    """Decorator on a dynamics function: `--teacher name` runs it, `--teacher "name(key=value)"`
    with a parameter set. Each parameter is declared as a config field is, with
    `setting(default, meaning, **rules)` (toymodels.settings), and checked alike in one line; the
    function's own signature gives its type."""

    def declared(dynamics):
        dynamics.parameters = parameters
        return dynamics

    return TEACHERS.register(name, make=declared)


@register_teacher("independent")
def independent(depth: int, width: int, generator: torch.Generator) -> LayerWeights:
    """Every layer drawn independently: the residual stream does a random walk."""
    return default_layers(depth, width, generator)


@register_teacher("tied")
def tied(depth: int, width: int, generator: torch.Generator) -> LayerWeights:
    """Every layer a copy of layer 0: `depth` Euler steps of one smooth flow."""
    layer = default_layers(1, width, generator)
    return LayerWeights(*(w.expand(depth, *w.shape[1:]).clone() for w in (layer.w_in, layer.b_in, layer.w_out)))


@register_teacher("correlated", rho=setting(0.5, "the shared layer's share of each layer's variance", low=0, high=1))
def correlated(depth: int, width: int, generator: torch.Generator, rho: float) -> LayerWeights:
    """Each layer √ρ·shared + √(1−ρ)·own: ρ = 0 independent, ρ = 1 tied, same per-layer scale."""
    shared, own = default_layers(1, width, generator), default_layers(depth, width, generator)
    return _combine(lambda a, b: math.sqrt(rho) * a + math.sqrt(1 - rho) * b, shared, own)


@register_teacher("smooth", anchors=setting(4, "random layers spread along the depth (at most its depth)", low=2))
def smooth(depth: int, width: int, generator: torch.Generator, anchors: int) -> LayerWeights:
    """Weights that vary smoothly with depth (a non-autonomous smooth flow): `anchors` random
    layers spread along the depth, interpolated as cos·A + sin·B, which keeps the per-layer scale."""
    _at_most_depth("smooth", "anchors", anchors, depth)
    points = default_layers(anchors, width, generator)
    position = torch.linspace(0, anchors - 1, depth)
    left = position.floor().long().clamp(max=anchors - 2)
    angle = (position - left) * math.pi / 2
    return _combine(lambda w: _expand(angle.cos(), w) * w[left] + _expand(angle.sin(), w) * w[left + 1], points)


@register_teacher("grouped", groups=setting(4, "runs of tied layers (at most the depth)", low=1))
def grouped(depth: int, width: int, generator: torch.Generator, groups: int) -> LayerWeights:
    """`groups` runs of consecutive layers, tied inside a run, independent across runs."""
    _at_most_depth("grouped", "groups", groups, depth)
    layers = default_layers(groups, width, generator)
    index = torch.arange(depth) * groups // depth
    return _combine(lambda w: w[index], layers)


def _at_most_depth(teacher: str, name: str, value: int, depth: int):
    """A parameter's bound that only the depth knows, which its declaration cannot say."""
    if value > depth:
        raise ToymodelsError(f"teacher {teacher!r}: {name} must be at most the teacher's depth {depth}, got {value}")


def _expand(weights: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return weights.view(-1, *[1] * (like.dim() - 1))


def _combine(operation, *layer_sets: LayerWeights) -> LayerWeights:
    """Apply `operation` to w_in, b_in and w_out alike."""
    return LayerWeights(*(operation(*(getattr(s, name) for s in layer_sets)) for name in ("w_in", "b_in", "w_out")))


def teacher_dynamics(spec: str) -> Callable[..., LayerWeights]:
    """The dynamics `spec` names, its parameters bound (the declared defaults, then those `spec`
    sets, each checked against its declaration): call it as (depth, width, generator)."""
    name, params = parse_call("teacher", spec)
    dynamics = TEACHERS.lookup(name)
    declared = getattr(dynamics, "parameters", {})
    bound = {key: declaration.default for key, declaration in declared.items()} | params
    signature = inspect.signature(dynamics)
    try:
        signature.bind(0, 0, None, **bound)
    except TypeError as error:
        raise ToymodelsError(f"teacher {spec!r}: {error}") from None
    for key, value in params.items():
        kind = signature.parameters[key].annotation
        problem = key in declared and declared_problem(
            key, value, float if kind is inspect.Parameter.empty else kind, declared[key].metadata
        )
        if problem:
            raise ToymodelsError(f"teacher {spec!r}: {problem}")
    return functools.partial(dynamics, **bound)


def _checked(name: str, flow, config: SweepConfig) -> Flow:
    """A dynamics' result (LayerWeights or a Flow), checked before anything trains on it."""
    if isinstance(flow, Flow):
        if not isinstance(flow.integrator, Integrator):
            raise ToymodelsError(
                f"teacher {name!r}: its Flow's integrator is a {type(flow.integrator).__name__}, "
                f"not a toymodels Integrator"
            )
        if flow.order is None:
            raise ToymodelsError(
                f"teacher {name!r}: its integrator {type(flow.integrator).__name__} declares no "
                f"order; set `order = N` on its class"
            )
        check_integrator(flow.integrator, f"teacher {name!r}")
    layers = flow.layers if isinstance(flow, Flow) else flow
    hidden = 4 * config.width
    shapes = {
        "w_in": (config.teacher_depth, config.width, hidden),
        "b_in": (config.teacher_depth, 1, hidden),
        "w_out": (config.teacher_depth, hidden, config.width),
    }
    if not isinstance(layers, LayerWeights):
        raise ToymodelsError(f"teacher {name!r} returned {type(layers).__name__} {layers!r:.40}, not LayerWeights")
    for field, shape in shapes.items():
        weights = getattr(layers, field)
        if not isinstance(weights, torch.Tensor) or tuple(weights.shape) != shape:
            found = tuple(weights.shape) if isinstance(weights, torch.Tensor) else type(weights).__name__
            raise ToymodelsError(f"teacher {name!r}: {field} must be a tensor of shape {shape}, got {found}")
        if not torch.isfinite(weights).all():
            raise ToymodelsError(f"teacher {name!r}: {field} holds NaN or infinite weights")
    return flow if isinstance(flow, Flow) else Flow(flow)


def teacher_flow(protocol, name: str, replicate: int) -> Flow:
    """Teacher instance (`name`, `replicate`) of `protocol` (training.protocol) as it runs: its
    dynamics' weights, checked, with every output projection × 1/√depth, and its integrator."""
    config = protocol.config
    flow = _checked(
        name,
        protocol.teachers[name](
            config.teacher_depth, config.width, seeded_generator(config.seed, WEIGHTS_STREAM, replicate)
        ),
        config,
    )
    layers = flow.layers
    return Flow(LayerWeights(layers.w_in, layers.b_in, layers.w_out / math.sqrt(config.teacher_depth)), flow.integrator)


def teacher_head(protocol, replicate: int) -> torch.Tensor | None:
    """The head (width, vocab) the protocol's loss gives teacher replicate `replicate`, or None."""
    config = protocol.config
    return protocol.loss.teacher_head(config, seeded_generator(config.seed, HEAD_STREAM, replicate))


class Teachers:
    """A stack of teacher instances (one per teacher × replicate), run together on one device.

    `forward(x)` takes inputs (instances, batch, width) and returns the read-out rmsnorm(h_L);
    `hidden_states(x)` returns every h_0 … h_L for the diagnostics. `head` (instances, width,
    vocab) is the head the protocol's loss gives a teacher, or None. Instances that step alike
    (one integrator) run as one batch.
    """

    def __init__(self, protocol, device="cpu", only=None):
        """Every (name, replicate) instance of `protocol` (training.protocol), or those at indices
        `only` (a job's share)."""
        instances = protocol.config.teacher_instances
        self.instances = instances if only is None else [instances[i] for i in only]
        flows = [teacher_flow(protocol, name, r) for name, r in self.instances]
        layers = [flow.layers for flow in flows]
        self.integrators = [flow.integrator for flow in flows]
        # Stacked as (depth, instances, ...) so that one layer of every instance is one bmm.
        self.w_in = torch.stack([w.w_in for w in layers], 1).to(device)
        self.b_in = torch.stack([w.b_in for w in layers], 1).to(device)
        self.w_out = torch.stack([w.w_out for w in layers], 1).to(device)
        heads = [teacher_head(protocol, r) for _, r in self.instances]
        self.head = None if heads[0] is None else torch.stack(heads).to(device)

    @torch.no_grad()
    def hidden_states(self, x: torch.Tensor) -> list[torch.Tensor]:
        """h_0 … h_L, each (instances, batch, width)."""
        h0 = rmsnorm(x)
        groups = {}
        for row, integrator in enumerate(self.integrators):
            groups.setdefault(integrator, []).append(row)
        if len(groups) == 1:
            return self._run(next(iter(groups)), h0, slice(None))
        states = [torch.empty_like(h0) for _ in range(len(self.w_in) + 1)]
        for integrator, rows in groups.items():
            rows = torch.tensor(rows, device=h0.device)
            for whole, part in zip(states, self._run(integrator, h0[rows], rows)):
                whole[rows] = part
        return states

    def _run(self, integrator: Integrator, h0: torch.Tensor, rows) -> list[torch.Tensor]:
        """h_0 … h_L of the instances `rows` (a slice or indices), stepped by `integrator`."""
        state, states = integrator.start(h0), [h0]
        for layer, weights in enumerate(zip(self.w_in, self.b_in, self.w_out)):
            state = integrator.step(state, layer, layer_field(*(w[rows][None] for w in weights)))
            states.append(integrator.hidden(state))
        return states

    @torch.no_grad()
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rmsnorm(self.hidden_states(x)[-1])
