"""Adam for stacked populations, with a learning rate per student, and the learning-rate schedules.

A schedule maps the step (a float64 tensor on the device, so that a step never waits for the host
and nothing grows with the number of steps) and the total steps to a multiplier of the rate.
"""

import torch

from ..registry import Registry
from .compiler import compile_for_rebuilds

SCHEDULES = Registry("schedule")
register_schedule = SCHEDULES.register  # decorator on `(step, total_steps) -> multiplier`: `--schedule name` uses it


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
    return final_fraction ** progress


def adam_update(p, grad, m, v, rate, step_size, correction2_sqrt, keep, beta1: float, beta2: float, eps: float):
    """torch.optim.Adam's arithmetic on one stacked tensor; slices where `keep` is False stay put
    (`where`, not a product: a frozen student's update may be NaN)."""
    m.lerp_(grad, 1 - beta1)
    v.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    denom = (v.sqrt() / correction2_sqrt).add_(eps)
    p.sub_(torch.where(keep, m / denom * (rate * step_size), 0))


class StackedAdam:
    """Adam (PyTorch's defaults, no weight decay) for stacked students: slice i of a parameter
    along dim 0 belongs to student `owner[i]` and has its own learning rate `rate[i]`, so one
    update serves a population whose rates differ with depth. The arithmetic is
    torch.optim.Adam's, so a population and a loop over single students agree to float precision.
    `compiled`: one fused pass per tensor instead of about ten."""

    def __init__(self, params_rates_owners, betas=(0.9, 0.999), eps=1e-8, compiled=False):
        self.params = [p for p, _, _ in params_rates_owners]
        self.rates = [r.view(-1, *[1] * (p.dim() - 1)) for p, r, _ in params_rates_owners]
        self.owners = [o for _, _, o in params_rates_owners]
        self.exp_avg = [torch.zeros_like(p) for p in self.params]
        self.exp_avg_sq = [torch.zeros_like(p) for p in self.params]
        self.betas, self.eps = betas, eps
        # On the device, so that a step never waits for the host; float64, as Python computes
        # torch.optim.Adam's bias corrections.
        self.steps = torch.zeros((), dtype=torch.float64, device=self.params[0].device)
        self.update = compile_for_rebuilds(adam_update) if compiled else adam_update

    @torch.no_grad()
    def step(self, multiplier: float | torch.Tensor = 1.0, training: torch.Tensor | None = None,
             student_scale: torch.Tensor | None = None) -> None:
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

    def state_dict(self) -> dict:
        return {"steps": self.steps, "exp_avg": self.exp_avg, "exp_avg_sq": self.exp_avg_sq}

    def load_state_dict(self, state: dict) -> None:
        self.steps.copy_(state["steps"])
        for mine, saved in zip(self.exp_avg + self.exp_avg_sq, state["exp_avg"] + state["exp_avg_sq"]):
            mine.copy_(saved)
