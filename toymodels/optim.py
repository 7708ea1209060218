"""Adam for stacked populations, with a learning rate per student, and the paper's schedules."""

import math

import torch

SCHEDULES = ("constant", "S")


def schedule_multiplier(schedule: str, step: int, total_steps: int, decay_start=0.8, final_fraction=0.1) -> float:
    """Learning-rate multiplier at `step` (0 … total_steps).

    "S": constant for the first 80 % of steps, then linear decay to 10 % of the base rate at the end.
    """
    if schedule == "constant" or step < decay_start * total_steps:
        return 1.0
    remaining = (total_steps - step) / ((1 - decay_start) * total_steps)
    return final_fraction + (1 - final_fraction) * remaining


class StackedAdam:
    """Adam (PyTorch's defaults, no weight decay) where slice i of a parameter along dim 0 has
    its own learning rate `rates[i]`: one update serves a population of students whose rates
    differ with depth. The arithmetic is torch.optim.Adam's, so a population and a loop over
    single students agree to float precision."""

    def __init__(self, params_and_rates, betas=(0.9, 0.999), eps=1e-8):
        self.params = [p for p, _ in params_and_rates]
        self.rates = [r.view(-1, *[1] * (p.dim() - 1)) for p, r in params_and_rates]
        self.exp_avg = [torch.zeros_like(p) for p in self.params]
        self.exp_avg_sq = [torch.zeros_like(p) for p in self.params]
        self.betas, self.eps, self.steps = betas, eps, 0

    @torch.no_grad()
    def step(self, multiplier: float = 1.0) -> None:
        self.steps += 1
        beta1, beta2 = self.betas
        correction1 = 1 - beta1**self.steps
        correction2_sqrt = math.sqrt(1 - beta2**self.steps)
        for p, rate, m, v in zip(self.params, self.rates, self.exp_avg, self.exp_avg_sq):
            m.lerp_(p.grad, 1 - beta1)
            v.mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)
            denom = (v.sqrt() / correction2_sqrt).add_(self.eps)
            p.sub_(m / denom * (rate * (multiplier / correction1)))

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None
