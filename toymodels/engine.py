"""The training engine: one process trains a whole sweep on one device.

Per step: draw fresh inputs for each teacher instance, run every teacher once (its targets
serve all temperatures and student depths), run the population of students, sum their
losses, one backward, one stacked Adam update. Losses stay on the device between
evaluations, so the step never waits for the host.
"""

import math

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from .blocks import rmsnorm, seeded_generator
from .config import SweepConfig
from .errors import ToymodelsError
from .objectives import Objective
from .optim import StackedAdam, schedule_multiplier
from .students import StudentSpec, Students
from .teachers import TEST_DATA_STREAM, TRAIN_DATA_STREAM, Teachers


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ToymodelsError(f"unknown device {name!r}; use auto, cpu or cuda[:N]") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ToymodelsError("--device cuda asked for, but no CUDA device is available")
    return device


def evaluation_steps(steps: int, evals: int) -> list[int]:
    """Geometrically spaced steps (α against training time is read on a log axis), plus the
    step at 90 % that the convergence check compares the end with, plus the last step."""
    spaced = np.geomspace(1, steps, evals).round().astype(int)
    return sorted({*spaced.tolist(), max(1, round(0.9 * steps)), steps})


class Sweep:
    """Teachers, the student population and its objective and optimiser, built from a config."""

    def __init__(self, config: SweepConfig, device: torch.device):
        self.config, self.device = config, device
        self.teachers = Teachers(config.teachers, config.replicates, config.teacher_depth, config.width,
                                 config.vocab, config.seed, device, gaussian_head=config.loss == "kl-fixed-head")
        temperatures = config.run_temperatures
        specs = [StudentSpec(i, t, d) for i in range(len(self.teachers.instances))
                 for t in range(len(temperatures)) for d in config.depths]
        vocab = config.vocab if config.loss == "kl" else None
        self.students = Students(specs, config.student, config.width, vocab, config.seed).to(device)
        self.specs = self.students.specs  # population order
        self.objective = Objective(config.loss, temperatures, [s.instance for s in self.specs],
                                   [s.temperature_index for s in self.specs], device)
        parameters = list(self.students.parameters())
        lr_multiplier = self.students.architecture.lr_multiplier
        rates = [config.student_lr(depth) * lr_multiplier(depth) for depth in map(self.students.depth_of, parameters)]
        self.optimizer = StackedAdam(list(zip(parameters, rates)))
        self.student_instances = torch.tensor([s.instance for s in self.specs], device=device)
        self.data_streams = [seeded_generator(config.seed, TRAIN_DATA_STREAM, r, device=device)
                             for _, r in self.teachers.instances]
        self.test_inputs = self._draw([seeded_generator(config.seed, TEST_DATA_STREAM, r, device=device)
                                       for _, r in self.teachers.instances],
                                      config.test_batches * config.test_batch_size)
        if config.compile:  # fuses the element-wise work around the matmuls (forward and backward)
            self.losses = torch.compile(self.losses)
        self.test_targets = [self.objective.teacher_targets(self.teachers.forward(x), self.teachers.head)
                             for x in self.test_inputs.split(config.test_batch_size, dim=1)]

    def _draw(self, generators, batch: int) -> torch.Tensor:
        return torch.stack([torch.randn(batch, self.config.width, generator=g, device=self.device)
                            for g in generators])

    def losses(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """One loss per student for inputs (instances, batch, width) and the teachers' targets."""
        final = self.students(rmsnorm(inputs)[self.student_instances])
        return self.objective.losses(final, self.students, self.teachers.head, targets)

    def train_step(self, step: int) -> torch.Tensor:
        inputs = self._draw(self.data_streams, self.config.batch)
        targets = self.objective.teacher_targets(self.teachers.forward(inputs), self.teachers.head)
        losses = self.losses(inputs, targets)
        losses.sum().backward()
        self.optimizer.step(schedule_multiplier(self.config.schedule, step, self.config.steps))
        self.optimizer.zero_grad()
        return losses.detach()

    @torch.no_grad()
    def test_losses(self) -> torch.Tensor:
        batches = zip(self.test_inputs.split(self.config.test_batch_size, dim=1), self.test_targets)
        return torch.stack([self.losses(x, targets) for x, targets in batches]).mean(0)

    def records(self, step: int, train_loss: torch.Tensor, test_loss: torch.Tensor) -> pd.DataFrame:
        """Tidy rows, one per student, for this evaluation."""
        temperatures = self.config.run_temperatures
        return pd.DataFrame({
            "teacher": [self.teachers.instances[s.instance][0] for s in self.specs],
            "replicate": [self.teachers.instances[s.instance][1] for s in self.specs],
            "temperature": [temperatures[s.temperature_index] for s in self.specs],
            "depth": [s.depth for s in self.specs],
            "step": step,
            "train_loss": train_loss.cpu().numpy(),
            "test_loss": test_loss.cpu().numpy(),
        })


def train(config: SweepConfig, on_evaluation=None, progress: bool = True) -> Sweep:
    """Train the sweep `config` describes. `on_evaluation(records)` receives the tidy rows of each
    evaluation as soon as they exist (the run folder appends them to disk)."""
    sweep = Sweep(config, resolve_device(config.device))
    evaluations = evaluation_steps(config.steps, config.evals)
    train_sum, since_last = torch.zeros(len(sweep.specs), device=sweep.device), 0
    bar = tqdm(total=config.steps, unit="step", disable=not progress, dynamic_ncols=True,
               desc=f"{len(sweep.specs)} students on {sweep.device.type}")
    for step in range(1, config.steps + 1):
        train_sum += sweep.train_step(step - 1)
        since_last += 1
        bar.update()
        if step == evaluations[0]:
            evaluations.pop(0)
            records = sweep.records(step, train_sum / since_last, sweep.test_losses())
            train_sum.zero_()
            since_last = 0
            bar.set_postfix(test_loss=f"{records.test_loss.mean():.3g}")
            if on_evaluation:
                on_evaluation(records)
    bar.close()
    return sweep
