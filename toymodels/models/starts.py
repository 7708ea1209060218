"""Starts: where a student's weights begin, one named entry each (`--start`, comma-separated to
train several starts of every student side by side).

  zero         the paper's start: default init, output projections (and a trained head) at zero,
               so a fresh student is the identity map
  discretised  the teacher's own flow in ℓ steps: student layer j is the teacher layer where its
               share of the depth begins, its output × ℓ*/ℓ (ℓ* = teacher depth), which is the
               Euler rule; an RK2 student's second MLP is the teacher layer at the middle of the
               share (the midpoint rule); a trained head is the teacher's head / T. At ℓ = ℓ* an
               Euler student is its teacher. For an independent teacher it is merely a poor start.

The untrained `discretised` students are also every run's *reference*: a trained student that
ends above the discretisation it could have started from is not at its best (`fitting.certify`).

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
from .teachers import LayerWeights, default_layers, teacher_head, teacher_layers

STARTS = Registry("start")
register_start = STARTS.register  # decorator: `--start name` uses the function
REFERENCE_START = "discretised"  # every student's reference: this start, untrained


@dataclass(frozen=True)
class StudentStart:
    """A student's first weights: its depth × stages MLPs (layer-major, then stage) and its head
    (width, vocab), or None for a head at zero (or none, when its loss trains no head)."""

    layers: LayerWeights
    head: torch.Tensor | None = None


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
    return teacher_layers(protocol, name, replicate), teacher_head(protocol, replicate)


@register_start(REFERENCE_START)
def discretised(protocol, spec, generator) -> StudentStart:
    """The teacher's flow in ℓ steps: stage s of layer j holds the teacher layer at depth
    (j + s/stages)·ℓ*/ℓ with its output × ℓ*/ℓ, undoing the architecture's own scales (LNS's
    1/√l on the norm, a branch multiplier ℓ^−a), so the block computes exactly that step."""
    config, architecture = protocol.config, protocol.architecture
    (teacher, head), ratio = _teacher(protocol, spec.instance), config.teacher_depth / spec.depth
    stages = architecture.stages
    layer_of_row = [j for j in range(spec.depth) for _ in range(stages)]
    index = torch.tensor([min(int((j + s / stages) * ratio), config.teacher_depth - 1)
                          for j in range(spec.depth) for s in range(stages)])
    norm = torch.tensor([architecture.norm_scale(j) for j in layer_of_row]).view(-1, 1, 1)
    branch = float(architecture.branch_scale(torch.tensor([float(spec.depth)]))) if architecture.branch_exponent \
        else 1.0
    layers = LayerWeights(teacher.w_in[index] / norm, teacher.b_in[index].clone(),
                          teacher.w_out[index] * (ratio / branch))
    temperature = protocol.temperatures[spec.temperature_index]
    return StudentStart(layers, protocol.loss.matching_student_head(head, temperature))


def start_named(name: str):
    """The start `name` stands for: registered, or a user's `file.py:NAME` function."""
    start = STARTS.lookup(name)
    if not callable(start):
        raise ToymodelsError(f"start {name!r} is a {type(start).__name__}, not a function")
    return start
