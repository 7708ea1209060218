"""The training engine: one process trains a population (a sweep, or one job of it) on one device.

Per step: draw fresh inputs for each teacher instance, run every teacher once (its targets
serve all temperatures and student depths), run the population of students, sum their
losses, one backward, one stacked Adam update. Losses stay on the device between
evaluations, so the step never waits for the host; a student whose loss turns NaN or infinite
is marked diverged on the device, at that step, and its weights stop changing.

Three small pieces: `Trainer` (optimiser, schedule, data, divergence), `MetricsRecorder` (the
training losses between evaluations and the tidy rows of each evaluation) and `train` (the
loop, evaluations, checkpoints). A checkpoint holds everything the remaining steps depend on,
so a resumed job finishes with the numbers an uninterrupted one would have.
"""

from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from .blocks import seeded_generator
from .config import SweepConfig
from .jobs import Job
from .optim import SCHEDULES, StackedAdam
from .population import Population, draw_inputs, resolve_device
from .teachers import TRAIN_DATA_STREAM


def evaluation_steps(steps: int, evals: int) -> list[int]:
    """Geometrically spaced steps (α against training time is read on a log axis), plus the
    step at 90 % that the convergence check compares the end with, plus the last step."""
    spaced = np.geomspace(1, steps, evals).round().astype(int)
    return sorted({*spaced.tolist(), max(1, round(0.9 * steps)), steps})


class Trainer:
    """What training adds to a population: Adam with a depth-scaled rate per student, the rate
    schedule, a fresh data stream per teacher instance, and each student's divergence step."""

    def __init__(self, population: Population):
        self.population = population
        config, device, students = population.config, population.device, population.students
        self.total_steps = config.steps
        self.schedule = SCHEDULES.lookup(config.schedule)
        self.optimizer = StackedAdam([(p, self._rates(p), students.owner(p)) for p in students.parameters()],
                                     compiled=config.compile)
        self.data_streams = [seeded_generator(config.seed, TRAIN_DATA_STREAM, r, device=device)
                             for _, r in population.teachers.instances]
        self.diverged_at = torch.zeros(len(population.specs), dtype=torch.long, device=device)  # 0: training

    def _rates(self, param) -> torch.Tensor:
        """Learning rate of each slice of `param`: its student's depth decides it."""
        population = self.population
        depths = [population.specs[m].depth for m in population.students.owner(param).tolist()]
        multiplier = population.students.architecture.lr_multiplier
        return torch.tensor([population.config.student_lr(d) * multiplier(d) for d in depths],
                            device=population.device)

    def step(self, step: int) -> torch.Tensor:
        """Step `step` (0-based) of every student still training; returns the losses."""
        population = self.population
        inputs = draw_inputs(self.data_streams, population.config.batch, population.config.width, population.device)
        with population.precision():
            losses = population.losses(inputs, population.teacher_targets(inputs))
        diverging = (self.diverged_at == 0) & ~torch.isfinite(losses.detach())
        self.diverged_at.masked_fill_(diverging, step + 1)
        training = self.diverged_at == 0
        torch.where(training, losses, 0).sum().backward()
        # Adam's update count is the schedule's clock: on the device, so the step never waits for the host.
        self.optimizer.step(self.schedule(self.optimizer.steps, self.total_steps), training)
        self.optimizer.zero_grad()
        return losses.detach()

    def state(self) -> dict:
        return {"students": self.population.students.state_dict(), "optimizer": self.optimizer.state_dict(),
                "data_streams": [g.get_state() for g in self.data_streams], "diverged_at": self.diverged_at}

    def load_state(self, state: dict) -> None:
        self.population.students.load_state_dict(state["students"])
        self.optimizer.load_state_dict(state["optimizer"])
        for generator, saved in zip(self.data_streams, state["data_streams"]):
            generator.set_state(saved)
        self.diverged_at.copy_(state["diverged_at"])


class MetricsRecorder:
    """Training losses summed on the device between evaluations, and the tidy rows (one per
    student) of every evaluation so far in `history`."""

    def __init__(self, population: Population):
        config, specs = population.config, population.specs
        temperatures = population.loss.temperatures(config)
        self.keys = pd.DataFrame({
            "teacher": [config.teacher_instances[s.instance][0] for s in specs],
            "replicate": [config.teacher_instances[s.instance][1] for s in specs],
            "temperature": [temperatures[s.temperature_index] for s in specs],
            "depth": [s.depth for s in specs]})
        self.train_loss_sum = torch.zeros(len(specs), device=population.device)
        self.steps_since_evaluation = 0
        self.history = pd.DataFrame()

    def add(self, losses: torch.Tensor) -> None:
        self.train_loss_sum += losses
        self.steps_since_evaluation += 1

    def record(self, step: int, test_loss: torch.Tensor, diverged_at: torch.Tensor) -> pd.DataFrame:
        """Add the rows of an evaluation at `step` to `history` and start a new training-loss mean."""
        train_loss = self.train_loss_sum / max(self.steps_since_evaluation, 1)
        diverged_at = diverged_at.cpu().numpy()
        rows = self.keys.assign(
            step=step,
            train_loss=train_loss.double().cpu().numpy(),  # float64: a checkpoint's copy reads back the same
            test_loss=test_loss.double().cpu().numpy(),
            diverged_at_step=np.where(diverged_at > 0, diverged_at, np.nan))
        self.train_loss_sum.zero_()
        self.steps_since_evaluation = 0
        self.history = pd.concat([self.history, rows], ignore_index=True)
        return rows

    def state(self) -> dict:
        return {"train_loss_sum": self.train_loss_sum, "steps_since_evaluation": self.steps_since_evaluation,
                "history": self.history.to_dict("list")}

    def load_state(self, state: dict) -> None:
        self.train_loss_sum.copy_(state["train_loss_sum"])
        self.steps_since_evaluation = state["steps_since_evaluation"]
        self.history = pd.DataFrame(state["history"])


@dataclass(frozen=True)
class TrainedPopulation:
    population: Population
    history: pd.DataFrame  # every evaluation: tidy rows, one per student


def train(config: SweepConfig, job: Job | None = None, device: torch.device | None = None, on_evaluation=None,
          on_progress=None, checkpoints=None) -> TrainedPopulation:
    """Train the students of `job` (default: the whole sweep `config` describes).

    `on_evaluation(history)` receives every record so far after each evaluation (the run folder
    writes them to disk); `on_progress(step)` is called about 200 times over the run;
    `checkpoints` (with `load_checkpoint()` and `save_checkpoint(state)`, e.g. a run folder's
    job) is where training resumes from and saves to, every `config.checkpoint_every` steps.
    """
    population = Population(config, device or resolve_device(config.device), job)
    trainer, recorder = Trainer(population), MetricsRecorder(population)
    saved = checkpoints.load_checkpoint() if checkpoints else None
    start = 0
    if saved:
        trainer.load_state(saved)
        recorder.load_state(saved)
        start = saved["step"]
    evaluations = [s for s in evaluation_steps(config.steps, config.evals) if s > start]
    report_every = max(1, config.steps // 200)
    for step in range(start + 1, config.steps + 1):
        recorder.add(trainer.step(step - 1))
        if step == evaluations[0]:
            evaluations.pop(0)
            recorder.record(step, population.test_losses(), trainer.diverged_at)
            if on_evaluation:
                on_evaluation(recorder.history)
        if checkpoints and step % config.checkpoint_every == 0 and step < config.steps:
            checkpoints.save_checkpoint({"step": step, **trainer.state(), **recorder.state()})
        if on_progress and (step % report_every == 0 or step == config.steps):
            on_progress(step)
    return TrainedPopulation(population, recorder.history)
