"""Optimisers for stacked populations, with a learning rate per student, and the learning-rate schedules.

A schedule maps the step (a float64 tensor on the device, so that a step never waits for the host
and nothing grows with the number of steps) and the total steps to a multiplier of the rate.

An optimiser (`--optimizer NAME`) is a class built as `cls(parameters, compiled=...)` from a list of
`Stacked` (a stacked parameter, the rate of each of its slices along dim 0, the student each slice
belongs to, and whether its slices are a layer's weight matrices). It updates every slice with its
own rate and leaves the slices of students that do not train as they are; `row_state()` lists, per
parameter, the state tensors indexed like it (Trainer.without carries them to a smaller population).
"""

import math
from typing import NamedTuple

import torch

from ..registry import Registry
from .compiler import compile_for_rebuilds

SCHEDULES = Registry("schedule")
register_schedule = SCHEDULES.register  # decorator on `(step, total_steps) -> multiplier`: `--schedule name` uses it
OPTIMIZERS = Registry("optimizer")
register_optimizer = OPTIMIZERS.register  # decorator on an optimiser class: `--optimizer name` uses it


class Stacked(NamedTuple):
    param: torch.Tensor
    rates: torch.Tensor  # one per slice along dim 0
    owners: torch.Tensor  # the student (population index) of each slice
    layer_matrix: bool  # its slices are a layer's weight matrices (not biases, not a read-out head)


@register_schedule("constant")
def constant(step: torch.Tensor, total_steps: int) -> torch.Tensor:
    return torch.ones_like(step)


@register_schedule("S")
def schedule_s(step: torch.Tensor, total_steps: int, decay_start=0.8, final_fraction=0.1) -> torch.Tensor:
    """Constant for the first 80 % of steps, then linear decay to 10 % of the base rate at the end."""
    remaining = (total_steps - step) / ((1 - decay_start) * total_steps)
    return torch.where(step < decay_start * total_steps, 1.0, final_fraction + (1 - final_fraction) * remaining)


@register_schedule("G")
def schedule_g(step: torch.Tensor, total_steps: int, decay_start=0.25, final_fraction=0.01) -> torch.Tensor:
    """Constant for the first 25 % of steps, then a geometric decay to 1 % of the base rate at the
    end: every factor of the rate gets the same share of the budget, so a budget twice as long holds
    every rate level twice as long (the budget ladder's rungs, ladder.py). Adam's stationary excess
    loss scales with the rate, so the last, smallest rates set the floor a fixed budget reaches."""
    progress = ((step / total_steps - decay_start) / (1 - decay_start)).clamp(min=0)
    return final_fraction**progress


def adam_update(p, grad, m, v, rate, step_size, correction2_sqrt, keep, beta1: float, beta2: float, eps: float):
    """torch.optim.Adam's arithmetic on one stacked tensor; slices where `keep` is False stay put
    (`where`, not a product: a frozen student's update may be NaN)."""
    m.lerp_(grad, 1 - beta1)
    v.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    denom = (v.sqrt() / correction2_sqrt).add_(eps)
    p.sub_(torch.where(keep, m / denom * (rate * step_size), 0))


@register_optimizer("adam")
class StackedAdam:
    """Adam (PyTorch's defaults, no weight decay) for stacked students: slice i of a parameter
    along dim 0 belongs to student `owner[i]` and has its own learning rate `rate[i]`, so one
    update serves a population whose rates differ with depth. The arithmetic is
    torch.optim.Adam's, so a population and a loop over single students agree to float precision.
    `compiled`: one fused pass per tensor instead of about ten."""

    def __init__(self, parameters: list[Stacked], betas=(0.9, 0.999), eps=1e-8, compiled=False):
        self.params = [s.param for s in parameters]
        self.rates = [s.rates.view(-1, *[1] * (s.param.dim() - 1)) for s in parameters]
        self.owners = [s.owners for s in parameters]
        self.exp_avg = [torch.zeros_like(p) for p in self.params]
        self.exp_avg_sq = [torch.zeros_like(p) for p in self.params]
        self.betas, self.eps = betas, eps
        # On the device, so that a step never waits for the host; float64, as Python computes
        # torch.optim.Adam's bias corrections.
        self.steps = torch.zeros((), dtype=torch.float64, device=self.params[0].device)
        self.update = compile_for_rebuilds(adam_update) if compiled else adam_update

    @torch.no_grad()
    def step(
        self,
        multiplier: float | torch.Tensor = 1.0,
        training: torch.Tensor | None = None,
        student_scale: torch.Tensor | None = None,
    ) -> None:
        """One update with the learning rates × `multiplier` (a number, or a 0-dim tensor on the
        device); with `training` (a bool per student), the others keep their weights; with
        `student_scale` (a number per student), each student's rates are multiplied by its own."""
        self.steps += 1
        beta1, beta2 = self.betas
        step_size = multiplier / (1 - beta1**self.steps)
        correction2_sqrt = (1 - beta2**self.steps).sqrt()
        for p, rate, owner, m, v in zip(self.params, self.rates, self.owners, self.exp_avg, self.exp_avg_sq):
            keep = torch.ones_like(rate, dtype=torch.bool) if training is None else training[owner].view_as(rate)
            if student_scale is not None:
                rate = rate * student_scale[owner].view_as(rate)
            self.update(p, p.grad, m, v, rate, step_size, correction2_sqrt, keep, beta1, beta2, self.eps)

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    def row_state(self) -> list[list[torch.Tensor]]:
        return [[m, v] for m, v in zip(self.exp_avg, self.exp_avg_sq)]

    def state_dict(self) -> dict:
        return {"steps": self.steps, "exp_avg": self.exp_avg, "exp_avg_sq": self.exp_avg_sq}

    def load_state_dict(self, state: dict) -> None:
        self.steps.copy_(state["steps"])
        for mine, saved in zip(self.exp_avg + self.exp_avg_sq, state["exp_avg"] + state["exp_avg_sq"]):
            mine.copy_(saved)


NEWTON_SCHULZ = (3.4445, -4.7750, 2.0315)  # the quintic's coefficients (torch.optim.Muon's defaults)


def orthogonalised(update: torch.Tensor, steps: int = 5, eps: float = 1e-7) -> torch.Tensor:
    """Each matrix of `update` (the last two dims; any leading dims are a batch) mapped close to the
    semi-orthogonal matrix of its polar decomposition (singular values pushed toward 1, directions
    kept) by a quintic Newton–Schulz iteration, as Muon does. In the update's own dtype: torch's
    Muon rounds to bfloat16, which a CPU does not speed up and which would blur losses of 1e-5."""
    a, b, c = NEWTON_SCHULZ
    x = update / update.norm(dim=(-2, -1), keepdim=True).clamp(min=eps)  # spectral norm ≤ 1
    wide = x.size(-2) <= x.size(-1)
    x = x if wide else x.mT  # iterate on the smaller Gram matrix
    for _ in range(steps):
        gram = x @ x.mT
        x = a * x + (b * gram + c * gram @ gram) @ x
    return x if wide else x.mT


def muon_update(p, grad, buffer, rate, keep, momentum: float, steps: int):
    """One Nesterov-momentum Muon step on one stacked tensor of matrices; slices where `keep` is False stay put."""
    buffer.lerp_(grad, 1 - momentum)
    direction = orthogonalised(grad.lerp(buffer, momentum), steps)
    p.sub_(torch.where(keep, direction * rate, 0))


@register_optimizer("muon")
class StackedMuon:
    """Muon on every layer's weight matrices, Adam (`StackedAdam`) on the rest (biases, a head), for
    stacked students: each matrix's momentum is orthogonalised on its own (Newton–Schulz, batched
    over the stack), and its step is scaled to Adam's RMS (torch.optim.Muon's
    `adjust_lr_fn="match_rms_adamw"`: × 0.2·√max(rows, columns)), so the students' Adam rates carry
    over. Science.md §12: at ℓ 12 and 24 it reached Adam's ×2–×4 loss in ×1's steps."""

    def __init__(self, parameters: list[Stacked], momentum=0.95, ns_steps=5, compiled=False):
        matrices = [s for s in parameters if s.layer_matrix]
        self.adam = StackedAdam([s for s in parameters if not s.layer_matrix], compiled=compiled)
        self.params = [s.param for s in matrices]
        self.rates = [s.rates.view(-1, 1, 1) * 0.2 * math.sqrt(max(s.param.shape[-2:])) for s in matrices]
        self.owners = [s.owners for s in matrices]
        self.momentum_buffers = [torch.zeros_like(p) for p in self.params]
        self.momentum, self.ns_steps = momentum, ns_steps
        self.layer_matrix = [s.layer_matrix for s in parameters]  # to list row_state() in the parameters' order
        self.update = compile_for_rebuilds(muon_update) if compiled else muon_update

    @property
    def steps(self) -> torch.Tensor:
        return self.adam.steps

    @torch.no_grad()
    def step(
        self,
        multiplier: float | torch.Tensor = 1.0,
        training: torch.Tensor | None = None,
        student_scale: torch.Tensor | None = None,
    ) -> None:
        """As `StackedAdam.step`."""
        self.adam.step(multiplier, training, student_scale)
        for p, rate, owner, buffer in zip(self.params, self.rates, self.owners, self.momentum_buffers):
            keep = torch.ones_like(rate, dtype=torch.bool) if training is None else training[owner].view_as(rate)
            if student_scale is not None:
                rate = rate * student_scale[owner].view_as(rate)
            self.update(p, p.grad, buffer, rate * multiplier, keep, self.momentum, self.ns_steps)

    def zero_grad(self) -> None:
        self.adam.zero_grad()
        for p in self.params:
            p.grad = None

    def row_state(self) -> list[list[torch.Tensor]]:
        adam, buffers = iter(self.adam.row_state()), iter(self.momentum_buffers)
        return [[next(buffers)] if matrix else next(adam) for matrix in self.layer_matrix]

    def state_dict(self) -> dict:
        return {**self.adam.state_dict(), "momentum_buffers": self.momentum_buffers}

    def load_state_dict(self, state: dict) -> None:
        self.adam.load_state_dict(state)
        for mine, saved in zip(self.momentum_buffers, state["momentum_buffers"]):
            mine.copy_(saved)
