"""Students: pre-norm residual networks of many depths, trained together as one population.

Students are sorted deepest first, so at layer l the students still running are a prefix of
the model axis: layer l of all of them is one batched call, and a population of depths
{6, 12, 24} costs 24 layer calls per step, not 42. Weights of all layers live in a few flat
tensors (rows = student-layers) that `torch.split` cuts into per-layer views, so the optimiser
updates the whole population with a handful of tensor operations.

Architectures (registered in `STUDENTS`; `--student NAME`), for a student of depth ℓ:
  euler        h ← h + MLP(rmsnorm(h))                           the paper's student
  rk2          k = MLP₁(rmsnorm(h)); m = h + k/2; h ← h + MLP₂(rmsnorm(m))   (two MLPs per block)
  lns          h ← h + MLP(rmsnorm(h)/√l), block l = 1 … ℓ        LayerNorm Scaling (Curse of Depth)
  depth-mup    h ← h + ℓ^(−½)·MLP(rmsnorm(h)), Adam rate × ℓ^(−½)  depth-µP
  ode          h ← h + ℓ^(−1)·MLP(rmsnorm(h)), Adam rate × 1       CompleteP / the ODE limit
  scaled-init  euler, but output projections start at default init / √(2ℓ) instead of zero
Output projections (and a trained head) start at zero unless the architecture says otherwise:
then a fresh student is the identity map. An architecture also owns its cost (weights, matmul
work and saved activations per layer), which plans and benchmarks read.

A new architecture is one block function (h, field) -> h′, or one `Integrator` for a student whose
state is more than h (models/integrators.py), registered with `@register_student("name", **options)`
(the options: its parametrisation, the fields of `Architecture`), in the package or in a file of
your own named as `--student file.py:NAME`; an integrator's `setting` fields are its parameters,
`--student "file.py:NAME(key=value)"`.
"""

import dataclasses
import math
import struct
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn

from ..errors import ToymodelsError
from ..registry import Registry, parse_call
from ..settings import declared_problem
from .blocks import Field, layer_field, mlp_matmul_flops, mlp_weight_count
from .integrators import EULER, BlockStep, Integrator, as_integrator
from .starts import StudentStart
from .streams import STUDENT_STREAM, seeded_generator
from .weights import LayerWeights

# Floats a student keeps per sample, layer and MLP for the backward pass (rmsnorm input and
# output, the MLP's pre-activation, its square and the branch output: ≈ 15 × width). Memory
# estimates with it were within 10 % of the measured peaks of the benchmark sweep.
SAVED_FLOATS_PER_WIDTH = 15


def rk2_block(h: torch.Tensor, field: Field) -> torch.Tensor:
    """The midpoint rule, one MLP per stage: the field at h, then at the half step."""
    return h + field(h + 0.5 * field(h, 0), 1)


RK2 = BlockStep(rk2_block, order=2)


MAX_ORDER = 8  # no residual integrator a student is built as goes beyond it


@dataclass(frozen=True)
class Architecture:
    """A student: the integrator its layers step (a block function (h, field) → h′ for one whose
    state is h alone), its depth parametrisation, its cost and its order."""

    integrator: Integrator | Callable  # a block function becomes BlockStep(block)
    stages: int = 1  # MLPs per block
    mlp_calls: int | None = None  # MLP evaluations per block, for its cost [default: one per MLP]
    lns: bool = False  # rmsnorm output of block l (1-indexed) × 1/√l
    branch_exponent: float = 0.0  # branch output × ℓ^(−a), Adam rate × ℓ^(a−1)
    scaled_init: bool = False  # output projections: default init / √(2ℓ), not zero
    order: int | None = None  # its global error ∝ ℓ^−order [default: the integrator's own `order`]
    stage_positions: tuple[float, ...] | None = None  # where each MLP sits in its step, 0 … 1 [s / stages]

    def __post_init__(self):
        object.__setattr__(self, "integrator", as_integrator(self.integrator, "a student"))
        if isinstance(self.stages, bool) or not isinstance(self.stages, int) or self.stages < 1:
            raise ToymodelsError(f"a student's stages (MLPs per block) must be a whole number ≥ 1; got {self.stages!r}")
        positions = self.stage_positions
        if positions is not None and (len(positions) != self.stages or not all(0 <= p <= 1 for p in positions)):
            raise ToymodelsError(
                f"a student's stage_positions must give each of its {self.stages} MLPs a place in "
                f"its step from 0 to 1 (RK4: 0, 1/2, 1/2, 1); got {positions!r}"
            )
        # the verdict reads the order (exponents.procedural_alpha: a converged order-p student's α ≥ 2p)
        if self.order is None:
            object.__setattr__(self, "order", self.integrator.order)
        if self.order is None:
            raise ToymodelsError(
                f"a student's integrator ({type(self.integrator).__name__}) declares no order: set "
                f"`order = N` on its class or register it with order=N (Euler 1, midpoint 2, RK4 4)"
            )
        if isinstance(self.order, bool) or not isinstance(self.order, int) or not 1 <= self.order <= MAX_ORDER:
            raise ToymodelsError(
                f"a student's order must be a whole number from 1 to {MAX_ORDER}, the order of the "
                f"integrator its block is (Euler 1, midpoint or Heun 2, RK4 4); got {self.order!r}"
            )

    @property
    def positions(self) -> tuple[float, ...]:
        """Where on the flow each MLP of a block evaluates, as a share of the block's step: the
        discretised start gives it the teacher layer there."""
        return self.stage_positions or tuple(s / self.stages for s in range(self.stages))

    def norm_scale(self, layer: int) -> float:
        return 1 / math.sqrt(layer + 1) if self.lns else 1.0

    def branch_scale(self, depth: torch.Tensor) -> torch.Tensor | None:
        return depth.pow(-self.branch_exponent).view(-1, 1, 1) if self.branch_exponent else None

    def lr_multiplier(self, depth):
        return depth ** (self.branch_exponent - 1) if self.branch_exponent else 1.0

    def weights_per_layer(self, width: int) -> int:
        return self.stages * mlp_weight_count(width)

    @property
    def calls(self) -> int:
        return self.mlp_calls or self.stages

    def matmul_flops_per_layer(self, width: int) -> int:
        """Forward and backward of one layer, per sample (backward ≈ 2× forward)."""
        return 3 * self.calls * mlp_matmul_flops(width)

    def saved_floats_per_layer(self, width: int) -> int:
        """Activations one layer keeps per sample for the backward pass."""
        return self.calls * SAVED_FLOATS_PER_WIDTH * width


STUDENTS = Registry("student")


def register_student(name: str, **options):
    """Decorator on a block function or an Integrator (class or instance): `--student name` trains
    `Architecture(it, **options)`. Its parameters, if any, are the Integrator dataclass's fields
    declared with `setting(...)`: `--student "name(key=value)"` sets them, each checked alike."""
    return STUDENTS.register(name, make=lambda integrator: Architecture(integrator, **options))


register_student("euler")(EULER)
register_student("rk2", stages=2)(RK2)
register_student("lns", lns=True)(EULER)
register_student("depth-mup", branch_exponent=0.5)(EULER)
register_student("ode", branch_exponent=1.0)(EULER)
register_student("scaled-init", scaled_init=True)(EULER)


def student_architecture(spec: str) -> Architecture:
    """The architecture `spec` names: a registered one or a user's (`file.py:NAME`), with the
    parameters it sets in parentheses (`ab2(beta=0.5)`) checked against their declarations."""
    name, values = parse_call("student", spec)
    architecture = STUDENTS.lookup(name)
    if not isinstance(architecture, Architecture):
        raise ToymodelsError(f"student {name!r} is a {type(architecture).__name__}, not a toymodels Architecture")
    if not values:
        return architecture
    integrator = architecture.integrator
    declared = (
        {field.name: field for field in dataclasses.fields(integrator) if "meaning" in field.metadata}
        if dataclasses.is_dataclass(integrator)
        else {}
    )
    for key, value in values.items():
        if key not in declared:
            raise ToymodelsError(
                f"student {spec!r}: it takes no parameter {key!r}; it takes {', '.join(declared) or 'none'}"
            )
        problem = declared_problem(key, value, declared[key].type, declared[key].metadata)
        if problem:
            raise ToymodelsError(f"student {spec!r}: {problem}")
    return dataclasses.replace(architecture, integrator=dataclasses.replace(integrator, **values))


def active_per_layer(depths: list[int]) -> list[int]:
    """How many of the students of `depths` run at each layer (sorted deepest first, a prefix)."""
    return [sum(d > layer for d in depths) for layer in range(max(depths))]


@dataclass(frozen=True)
class StudentSpec:
    """One member of a population: which teacher instance it learns, at which temperature, how
    deep, and from which start (see starts.STARTS)."""

    instance: int  # index into SweepConfig.teacher_instances
    temperature_index: int
    depth: int
    start: str = "zero"


STREAM_KEYS = 2  # the keying of `student_stream`, in every run's provenance; 1 (before): positions in the lists


def student_stream(protocol, spec: StudentSpec) -> torch.Generator:
    """Student `spec`'s own seeded stream (a zero start draws its layers from it), keyed by what the
    student is: its teacher's replicate, its temperature's value and its depth, never where these sit
    in the sweep's lists. So a teacher's students start alike alone, first, or after another teacher,
    at any set of temperatures; and the students of two teachers of one replicate start alike, as
    they train on the same inputs (common draws: a difference between teachers is theirs, not the
    dice's). MSE (no temperature) keys as 0, which keeps the first teacher of every MSE run made
    before this keying as it was."""
    _, replicate = protocol.config.teacher_instances[spec.instance]
    temperature = protocol.temperatures[spec.temperature_index]
    code = (
        0 if temperature is None or math.isnan(temperature) else struct.unpack("<Q", struct.pack("<d", temperature))[0]
    )
    return seeded_generator(protocol.config.seed, STUDENT_STREAM, replicate, code, spec.depth)


def population_layout(specs: list[StudentSpec], stages: int) -> tuple[list[StudentSpec], list[tuple[StudentSpec, int]]]:
    """How a population of `specs` lays its students out: deepest first (stable), and the
    (student, MLP) each row of its flat weights holds — layer-major, then stage, then student
    (the prefix of students still running at that layer)."""
    ordered = sorted(specs, key=lambda spec: -spec.depth)
    active = active_per_layer([spec.depth for spec in ordered])
    return ordered, [
        (ordered[m], layer * stages + stage)
        for layer, n in enumerate(active)
        for stage in range(stages)
        for m in range(n)
    ]


def _index_pairs(pairs: list[tuple[int, int]]) -> tuple[torch.Tensor, torch.Tensor]:
    return tuple(torch.tensor([pair[side] for pair in pairs], dtype=torch.long) for side in (0, 1))


class Students(nn.Module):
    """The students `specs` of a sweep's `protocol` (training.protocol); `forward(h0)` maps
    (models, batch, width) → final hidden states. A student's head, when its loss trains one, is
    `head[m]`."""

    def __init__(self, protocol, specs: list[StudentSpec], weights_from: "Students | None" = None):
        """The students `specs` at their starts; those that `weights_from` holds (a population some
        students left) take their weights from it instead, on its device, and run no start."""
        super().__init__()
        config = protocol.config
        width = config.width
        self.architecture = protocol.architecture
        self.integrator, self.stages = self.architecture.integrator, self.architecture.stages
        self.specs, self.row_keys = population_layout(specs, self.stages)
        depths = [s.depth for s in self.specs]
        self.active = active_per_layer(depths)
        self.rows_per_layer = [n * self.stages for n in self.active]

        head_width = protocol.loss.student_head_width(config)
        held = {} if weights_from is None else {spec: m for m, spec in enumerate(weights_from.specs)}
        held_rows = {} if weights_from is None else {key: row for row, key in enumerate(weights_from.row_keys)}
        device = None if weights_from is None else weights_from.depth.device
        starts = [None if spec in held else self._started(protocol, spec, head_width) for spec in self.specs]
        position = {spec: m for m, spec in enumerate(self.specs)}
        rows = [(position[spec], k) for spec, k in self.row_keys]

        def first_weights(name, m, k):
            if starts[m] is None:
                return getattr(weights_from, name).detach()[held_rows[(self.specs[m], k)]]
            return getattr(starts[m].layers, name)[k].to(device)

        def first_head(m, start):
            if start is None:
                return weights_from.head.detach()[held[self.specs[m]]]
            return (torch.zeros(width, head_width) if start.head is None else start.head).to(device)

        self.w_in, self.b_in, self.w_out = (
            nn.Parameter(torch.stack([first_weights(name, m, k) for m, k in rows]))
            for name in ("w_in", "b_in", "w_out")
        )
        self.head = (
            nn.Parameter(torch.stack([first_head(m, start) for m, start in enumerate(starts)])) if head_width else None
        )
        self.register_buffer("depth", torch.tensor(depths, dtype=torch.float32, device=device))
        held_spent = [] if weights_from is None else weights_from.decays_spent.tolist()  # one copy off the device
        self.register_buffer(
            "decays_spent",
            torch.tensor(  # each student's start's (StudentStart.decays_spent)
                [
                    held_spent[held[spec]] if start is None else start.decays_spent
                    for spec, start in zip(self.specs, starts)
                ],
                dtype=torch.long,
                device=device,
            ),
            persistent=False,
        )
        self.register_buffer("row_student", torch.tensor([m for m, _ in rows], device=device), persistent=False)
        self.register_buffer("branch_scales", self.architecture.branch_scale(self.depth), persistent=False)
        self.removed_layers = {}  # layer → which students pass it unchanged (`without_layers`)

    def _started(self, protocol, spec: StudentSpec, head_width: int | None) -> StudentStart:
        """Student `spec`'s first weights from its start, checked (a user's start may be wrong)."""
        config = protocol.config
        start = protocol.starts[spec.start](protocol, spec, student_stream(protocol, spec))
        rows, width = spec.depth * self.stages, config.width
        shapes = {"w_in": (rows, width, 4 * width), "b_in": (rows, 1, 4 * width), "w_out": (rows, 4 * width, width)}
        layers = getattr(start, "layers", None)
        if not isinstance(layers, LayerWeights) or any(
            tuple(getattr(layers, name).shape) != shape for name, shape in shapes.items()
        ):
            raise ToymodelsError(
                f"start {spec.start!r} must give StudentStart(LayerWeights of shapes "
                f"{', '.join(map(str, shapes.values()))}) for a student of depth {spec.depth}"
            )
        if start.head is not None and head_width and tuple(start.head.shape) != (width, head_width):
            raise ToymodelsError(f"start {spec.start!r}: the head must have shape {(width, head_width)}")
        if not 0 <= start.decays_spent <= config.decays:
            raise ToymodelsError(
                f"start {spec.start!r}: decays_spent must lie in 0..{config.decays} (the sweep's decays)"
            )
        return start

    def _apply(self, fn, *args, **kwargs):
        module = super()._apply(fn, *args, **kwargs)
        self.register_buffer(
            "branch_scales", self.architecture.branch_scale(self.depth), persistent=False
        )  # follow the buffers' device
        return module

    def owner(self, param: nn.Parameter) -> torch.Tensor:
        """The student (population index) each slice of `param` along dim 0 belongs to."""
        return torch.arange(len(self.specs), device=param.device) if param is self.head else self.row_student

    def matching_students(self, other: "Students") -> tuple[torch.Tensor, torch.Tensor]:
        """The students both populations hold: (their indices here, their indices in `other`)."""
        position = {spec: m for m, spec in enumerate(other.specs)}
        return _index_pairs([(m, position[spec]) for m, spec in enumerate(self.specs) if spec in position])

    def matching_rows(self, other: "Students") -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        """For each parameter, in the order of `parameters()`, where the students both populations
        hold sit along dim 0 (indices here, indices in `other`): rows of layer weights, or students
        for the head."""
        there = {key: row for row, key in enumerate(other.row_keys)}
        rows = _index_pairs([(row, there[key]) for row, key in enumerate(self.row_keys) if key in there])
        return {name: self.matching_students(other) if name == "head" else rows for name, _ in self.named_parameters()}

    @torch.no_grad()
    def load_students(self, other: "Students") -> None:
        """Copy the weights of the students `other` holds (a job's share of a sweep, or the
        students that left a population) into the same students here."""
        for name, (here, there) in self.matching_rows(other).items():
            getattr(self, name)[here.to(self.depth.device)] = getattr(other, name)[there.to(other.depth.device)]

    def layers(self):
        """Per layer: the number of active students and the layer's field over them (its weights
        (stages, active, ...), the rmsnorm scale, the active students' branch scales)."""
        for layer, (n, weights) in enumerate(
            zip(self.active, zip(*(torch.split(p, self.rows_per_layer) for p in (self.w_in, self.b_in, self.w_out))))
        ):
            branch = None if self.branch_scales is None else self.branch_scales[:n]
            yield (
                n,
                layer_field(
                    *(w.view(self.stages, n, *w.shape[1:]) for w in weights),
                    self.architecture.norm_scale(layer),
                    branch,
                ),
            )

    def _step(self, state, layer: int, field):
        """The first students' state after layer `layer`; a student whose layer is removed
        (`without_layers`) keeps its whole state, as if the layer were not there."""
        stepped = self.integrator.step(state, layer, field)
        kept = self.removed_layers.get(layer)
        if kept is None:
            return stepped
        kept = kept[: len(state[0])].view(-1, *[1] * (state[0].dim() - 1))
        return tuple(torch.where(kept, before, after) for before, after in zip(state, stepped))

    def forward(self, h0: torch.Tensor) -> torch.Tensor:
        state, finished = self.integrator.start(h0), []
        for layer, (n, field) in enumerate(self.layers()):
            if n < len(state[0]):  # the shallowest students are done: set their final state aside
                finished.append(self.integrator.hidden(state)[n:])
                state = tuple(part[:n] for part in state)
            state = self._step(state, layer, field)
        finished.append(self.integrator.hidden(state))
        return torch.cat(finished[::-1])

    @torch.no_grad()
    def hidden_states(self, h0: torch.Tensor) -> list[torch.Tensor]:
        """Per student (population order), its stack h_0 … h_ℓ: (ℓ + 1, batch, width)."""
        state, after = self.integrator.start(h0), []
        for layer, (n, field) in enumerate(self.layers()):
            state = self._step(tuple(part[:n] for part in state), layer, field)
            after.append(self.integrator.hidden(state))
        return [
            torch.stack([h0[m]] + [after[layer][m] for layer in range(spec.depth)]) for m, spec in enumerate(self.specs)
        ]

    @contextmanager
    def without_layers(self, removed: dict[int, list[int]]):
        """Within the block, student m runs with its layers `removed[m]` (0-indexed) replaced by
        the identity: its whole state passes them unchanged."""
        layers = {}
        for m, removed_here in removed.items():
            for layer in removed_here:
                layers.setdefault(layer, torch.zeros(len(self.specs), dtype=torch.bool, device=self.depth.device))[
                    m
                ] = True
        self.removed_layers = layers
        try:
            yield
        finally:
            self.removed_layers = {}
