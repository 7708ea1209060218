"""Students: pre-norm residual networks of many depths, trained together as one population.

Students are sorted deepest first, so at layer l the students still running are a prefix of
the model axis: layer l of all of them is one batched call, and a population of depths
{6, 12, 24} costs 24 layer calls per step, not 42. Weights of all layers live in a few flat
tensors (rows = student-layers) that `torch.split` cuts into per-layer views, so the optimiser
updates the whole population with a handful of tensor operations.

Blocks (registered in `BLOCKS`):
  euler  h ← h + MLP(rmsnorm(h))
  rk2    k = MLP₁(rmsnorm(h)); m = h + k/2; h ← h + MLP₂(rmsnorm(m))   (two MLPs per block)
Output projections (and a trained head) start at zero: a fresh student is the identity map.
"""

from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn

from .blocks import mlp, rmsnorm, seeded_generator
from .errors import ToymodelsError
from .teachers import STUDENT_STREAM, default_layers


def euler_block(h, w_in, b_in, w_out):
    return h + mlp(rmsnorm(h), w_in[0], b_in[0], w_out[0])


def rk2_block(h, w_in, b_in, w_out):
    k = mlp(rmsnorm(h), w_in[0], b_in[0], w_out[0])
    midpoint = h + 0.5 * k
    return h + mlp(rmsnorm(midpoint), w_in[1], b_in[1], w_out[1])


# name -> (block function, MLPs per block)
BLOCKS = {"euler": (euler_block, 1), "rk2": (rk2_block, 2)}


def student_block(name: str):
    if name not in BLOCKS:
        raise ToymodelsError(f"unknown student {name!r}; choose from {', '.join(sorted(BLOCKS))}")
    return BLOCKS[name]


@dataclass(frozen=True)
class StudentSpec:
    """One member of a population: which teacher instance it learns, at which temperature, how deep."""

    instance: int  # index into Teachers.instances
    temperature_index: int
    depth: int


class Students(nn.Module):
    """A population of students; `forward(h0)` maps (models, batch, width) → final hidden states."""

    def __init__(self, specs: list[StudentSpec], block: str, width: int, vocab: int | None, seed: int):
        super().__init__()
        self.block, self.stages = student_block(block)
        order = sorted(range(len(specs)), key=lambda i: -specs[i].depth)  # deepest first, stable
        self.specs = [specs[i] for i in order]
        depths = [s.depth for s in self.specs]
        self.active = [sum(d > layer for d in depths) for layer in range(max(depths))]
        self.rows_per_layer = [n * self.stages for n in self.active]

        inits = [default_layers(s.depth * self.stages, width, seeded_generator(
            seed, STUDENT_STREAM, s.instance, s.temperature_index, s.depth)) for s in self.specs]
        # Flat row order: layer-major, then stage, then student (the prefix of active students).
        rows = [(m, layer * self.stages + stage) for layer, n in enumerate(self.active)
                for stage in range(self.stages) for m in range(n)]
        self.w_in = nn.Parameter(torch.stack([inits[m].w_in[k] for m, k in rows]))
        self.b_in = nn.Parameter(torch.stack([inits[m].b_in[k] for m, k in rows]))
        self.w_out = nn.Parameter(torch.zeros(len(rows), 4 * width, width))
        self.head = nn.Parameter(torch.zeros(len(specs), width, vocab)) if vocab else None
        self.register_buffer("depth", torch.tensor(depths, dtype=torch.float32))
        self.register_buffer("row_depth", torch.tensor([depths[m] for m, _ in rows], dtype=torch.float32))

    def depth_of(self, param: nn.Parameter) -> torch.Tensor:
        """Depth of the student each slice of `param` along dim 0 belongs to (for per-student rates)."""
        return self.depth if param is self.head else self.row_depth

    def layer_weights(self):
        """Per layer: (w_in, b_in, w_out) of its active students, shaped (stages, active, ...)."""
        for n, weights in zip(self.active, zip(*(torch.split(p, self.rows_per_layer)
                                                 for p in (self.w_in, self.b_in, self.w_out)))):
            yield n, [w.view(self.stages, n, *w.shape[1:]) for w in weights]

    def forward(self, h0: torch.Tensor) -> torch.Tensor:
        h, finished = h0, []
        for n, weights in self.layer_weights():
            if n < h.shape[0]:  # the shallowest students are done: set their final state aside
                finished.append(h[n:])
                h = h[:n]
            h = self.block(h, *weights)
        finished.append(h)
        return torch.cat(finished[::-1])

    @torch.no_grad()
    def hidden_states(self, h0: torch.Tensor) -> list[torch.Tensor]:
        """Per student (population order), its stack h_0 … h_ℓ: (ℓ + 1, batch, width)."""
        h, after = h0, []
        for n, weights in self.layer_weights():
            h = self.block(h[:n], *weights)
            after.append(h)
        return [torch.stack([h0[m]] + [after[layer][m] for layer in range(spec.depth)])
                for m, spec in enumerate(self.specs)]

    @contextmanager
    def without_layers(self, removed: dict[int, list[int]]):
        """Within the block, student m runs with its layers `removed[m]` (0-indexed) replaced by
        the identity: their output projections are zeroed, then restored."""
        rows = [sum(self.rows_per_layer[:layer]) + stage * self.active[layer] + m
                for m, layers in removed.items() for layer in layers for stage in range(self.stages)]
        saved = self.w_out.data[rows].clone()
        self.w_out.data[rows] = 0
        try:
            yield
        finally:
            self.w_out.data[rows] = saved
