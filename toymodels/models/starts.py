"""Starts: where a student's weights begin, one named entry each (`--start`, comma-separated to
train several starts of every student side by side).

  zero         the paper's start: default init, output projections (and a trained head) at zero,
               so a fresh student is the identity map
  discretised  the teacher's own flow in ℓ steps: student layer j is the teacher layer where its
               share of the depth begins, its output × ℓ*/ℓ (ℓ* = teacher depth), which is the
               Euler rule; an RK2 student's second MLP is the teacher layer at the middle of the
               share (the midpoint rule); a trained head is the teacher's head / T. At ℓ = ℓ* an
               Euler student is its teacher. For an independent teacher it is merely a poor start.
  trained      the layers of the same student (teacher, depth; temperature where that run has
               it) trained in another run on the same teachers (`start_from`, a run folder that
               kept its students), its best start there; a trained head is that run's, if it
               trained one with this loss, else the teacher's head / T; it trains at the rate a
               converged student ends at (or `trained_decays_spent` decays in: the polish).
               MSE-trained layers start a KL sweep near the best loss its students can reach,
               where peaked (low-T) targets train slowly from the other starts.

The untrained `discretised` students are also every run's *reference*: a trained student that
ends above the discretisation it could have started from is not at its best (`certification.certify`).

A start is a function `(protocol, spec, generator) -> StudentStart`, registered with
`@register_start("name")`, or a user's own named as `--start path/to/file.py:NAME`. `protocol`
(training.protocol) holds the config and its components (`protocol.architecture`, `protocol.loss`,
the teachers' dynamics); `generator` is the student's own seeded stream (the zero start draws its
input layers from it).
"""

import math
from dataclasses import dataclass
from functools import lru_cache

import torch

from ..errors import ToymodelsError
from ..registry import Registry
from .teachers import teacher_flow, teacher_head
from .weights import LayerWeights, default_layers

STARTS = Registry("start")
register_start = STARTS.register  # decorator: `--start name` uses the function
REFERENCE_START = "discretised"  # every student's reference: this start, untrained
TRAINED_START = "trained"  # the start that takes another run's students (config.start_from)


@dataclass(frozen=True)
class StudentStart:
    """A student's first weights: its depth × stages MLPs (layer-major, then stage) and its head
    (width, vocab), or None for a head at zero (or none, when its loss trains no head); and how
    many of the sweep's rate decays it has spent: it trains at its depth's rate × lr_decay^that, and
    the plateau test decays it only the rest of the way. A start near its optimum polishes at the
    last rate (Adam's first steps move every weight by about the rate, which throws a trained
    student far off its minimum) and converges at its first plateau there."""

    layers: LayerWeights
    head: torch.Tensor | None = None
    decays_spent: int = 0


@register_start("zero")
def zero(protocol, spec, generator) -> StudentStart:
    """PyTorch's default init for the input layers; output projections at zero (scaled-init: the
    default init / √(2ℓ)), so the student starts as the identity map."""
    architecture = protocol.architecture
    layers = default_layers(spec.depth * architecture.stages, protocol.config.width, generator)
    w_out = layers.w_out / math.sqrt(2 * spec.depth) if architecture.scaled_init else torch.zeros_like(layers.w_out)
    return StudentStart(LayerWeights(layers.w_in, layers.b_in, w_out))


@lru_cache(maxsize=16)
def _teacher(protocol, instance: int) -> tuple[LayerWeights, torch.Tensor | None]:
    """Teacher instance `instance`'s layers and head, made once for all the students that start from it."""
    name, replicate = protocol.config.teacher_instances[instance]
    return teacher_flow(protocol, name, replicate).layers, teacher_head(protocol, replicate)


@register_start(REFERENCE_START)
def discretised(protocol, spec, generator) -> StudentStart:
    """The teacher's flow in ℓ steps: stage s of layer j holds the teacher layer at depth
    (j + p_s)·ℓ*/ℓ, where the architecture places that stage in its step (p_s: s/stages unless it
    says otherwise, e.g. RK4's 0, ½, ½, 1), with its output × ℓ*/ℓ, undoing the architecture's own
    scales (LNS's 1/√l on the norm, a branch multiplier ℓ^−a), so the block computes exactly its
    integrator's step on the teacher's field."""
    config, architecture = protocol.config, protocol.architecture
    (teacher, head), ratio = _teacher(protocol, spec.instance), config.teacher_depth / spec.depth
    layer_of_row = [j for j in range(spec.depth) for _ in range(architecture.stages)]
    index = torch.tensor(
        [
            min(int((j + position) * ratio), config.teacher_depth - 1)
            for j in range(spec.depth)
            for position in architecture.positions
        ]
    )
    norm = torch.tensor([architecture.norm_scale(j) for j in layer_of_row]).view(-1, 1, 1)
    branch = (
        float(architecture.branch_scale(torch.tensor([float(spec.depth)]))) if architecture.branch_exponent else 1.0
    )
    layers = LayerWeights(
        teacher.w_in[index] / norm, teacher.b_in[index].clone(), teacher.w_out[index] * (ratio / branch)
    )
    temperature = protocol.temperatures[spec.temperature_index]
    return StudentStart(layers, protocol.loss.matching_student_head(head, temperature))


@register_start(TRAINED_START)
def trained(protocol, spec, generator) -> StudentStart:
    """The layers of this student trained in the run `start_from` (read by the function registered
    with `reads_trained_runs`: training.trained_runs.trained_students); a
    trained head continues that run's where it trained one with this loss, else starts at the
    teacher's head / T, as the discretised start's. It trains at the
    rate a converged student ends at (all `decays` spent: a polish, not a new descent), or with
    only `trained_decays_spent` of them spent (a second descent, e.g. at a larger batch)."""
    config = protocol.config
    teacher, replicate = config.teacher_instances[spec.instance]
    temperature = protocol.temperatures[spec.temperature_index]
    if _read_trained_run is None:
        raise ToymodelsError(
            "the trained start reads another run's students, and nothing registered how "
            "(import toymodels.training.trained_runs)"
        )
    trained = _read_trained_run(config.start_from, config)
    student = trained.get(
        (teacher, replicate, temperature_key(temperature), spec.depth),
        trained.get((teacher, replicate, ANY_TEMPERATURE, spec.depth)),
    )
    if student is None:
        raise ToymodelsError(
            f"{config.start_from} has no trained student of the {teacher} teacher, replicate "
            f"{replicate}, at depth {spec.depth}: the trained start needs one for every student"
        )
    layers, head = student
    if head is None:
        head = protocol.loss.matching_student_head(_teacher(protocol, spec.instance)[1], temperature)
    spent = config.decays if config.trained_decays_spent is None else config.trained_decays_spent
    return StudentStart(layers, head, decays_spent=spent)  # Students stacks (copies) the layers


SAME_TEACHERS = ("seed", "teacher_depth", "width", "student")  # what a trained start's run must share
_read_trained_run = None  # (run folder, config) -> {(teacher, replicate, temperature key, depth): (layers, head)}


def reads_trained_runs(reader):
    """Register how the trained start reads a run folder's students (a decorator;
    training/trained_runs.py does it: models/ knows nothing of runs)."""
    global _read_trained_run
    _read_trained_run = reader
    return reader


ANY_TEMPERATURE = "any"  # the trained students' key of a student's best at any temperature (a KL sweep from an MSE run)


def temperature_key(temperature: float) -> float | None:
    """A temperature as a key (none: None, not NaN, which equals nothing)."""
    return None if math.isnan(temperature) else float(temperature)


def start_named(name: str):
    """The start `name` stands for: registered, or a user's `file.py:NAME` function."""
    start = STARTS.lookup(name)
    if not callable(start):
        raise ToymodelsError(f"start {name!r} is a {type(start).__name__}, not a function")
    return start
