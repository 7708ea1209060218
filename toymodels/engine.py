"""The training engine: one process trains a sweep, or one job of it, on one device.

Per step: draw fresh inputs for each teacher instance, run every teacher once (its targets
serve all temperatures and student depths), run the population of students, sum their
losses, one backward, one stacked Adam update. Losses stay on the device between
evaluations, so the step never waits for the host; a student whose loss turns NaN or infinite
is marked diverged on the device, at that step, and its weights stop changing.
A checkpoint holds everything the remaining steps depend on, so a resumed job finishes with
the numbers an uninterrupted one would have.
"""

from contextlib import contextmanager

import numpy as np
import pandas as pd
import torch

from .blocks import rmsnorm, seeded_generator
from .config import SweepConfig
from .errors import ToymodelsError
from .objectives import Objective
from .optim import StackedAdam, schedule_multiplier
from .jobs import Job
from .students import Students
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
    """Teachers, the student population and its objective and optimiser, built from a config
    (all of its students, or those of one job), and the state of their training."""

    def __init__(self, config: SweepConfig, device: torch.device, job: Job | None = None):
        self.config, self.device, self.job = config, device, job or Job.whole(config)
        self.teachers = Teachers(config.teachers, config.replicates, config.teacher_depth, config.width,
                                 config.vocab, config.seed, device, gaussian_head=config.loss == "kl-fixed-head",
                                 only=self.job.instances)
        vocab = config.vocab if config.loss == "kl" else None
        self.students = Students(self.job.students(), config.student, config.width, vocab, config.seed).to(device)
        self.specs = self.students.specs  # population order
        local = {instance: k for k, instance in enumerate(self.job.instances)}  # row in self.teachers
        instances = [local[s.instance] for s in self.specs]
        self.student_instances = torch.tensor(instances, device=device)
        self.objective = Objective(config.loss, config.run_temperatures, instances,
                                   [s.temperature_index for s in self.specs], device)
        self.optimizer = StackedAdam([(p, self._rates(p), self.students.owner(p)) for p in self.students.parameters()],
                                     compiled=config.compile)
        self.data_streams = [seeded_generator(config.seed, TRAIN_DATA_STREAM, r, device=device)
                             for _, r in self.teachers.instances]
        self.test_inputs = self._draw([seeded_generator(config.seed, TEST_DATA_STREAM, r, device=device)
                                       for _, r in self.teachers.instances],
                                      config.test_batches * config.test_batch_size)
        if config.compile:  # fuses the element-wise work around the matmuls (forward and backward)
            self.losses = torch.compile(self.losses)
        self.test_targets = [self.objective.teacher_targets(self.teachers.forward(x), self.teachers.head)
                             for x in self.test_inputs.split(config.test_batch_size, dim=1)]
        self.lr_multipliers = torch.tensor([schedule_multiplier(config.schedule, step, config.steps)
                                            for step in range(config.steps)], dtype=torch.float64, device=device)
        count = len(self.specs)
        self.diverged_at = torch.zeros(count, dtype=torch.long, device=device)  # 0: still training
        self.train_loss_sum, self.steps_since_evaluation = torch.zeros(count, device=device), 0
        self.history = pd.DataFrame()  # the records of every evaluation so far

    def _rates(self, param) -> torch.Tensor:
        """Learning rate of each slice of `param`: its student's depth decides it."""
        depths = [self.specs[m].depth for m in self.students.owner(param).tolist()]
        multiplier = self.students.architecture.lr_multiplier
        return torch.tensor([self.config.student_lr(d) * multiplier(d) for d in depths], device=self.device)

    def _draw(self, generators, batch: int) -> torch.Tensor:
        return torch.stack([torch.randn(batch, self.config.width, generator=g, device=self.device)
                            for g in generators])

    def losses(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """One loss per student for inputs (instances, batch, width) and the teachers' targets."""
        final = self.students(rmsnorm(inputs)[self.student_instances])
        return self.objective.losses(final, self.students, self.teachers.head, targets)

    @contextmanager
    def precision(self):
        """The config's matmul precision: tf32 lets fp32 matmuls round their inputs to TensorFloat-32
        (GPU); bf16 runs the networks under bf16 autocast. Weights, losses and Adam stay fp32."""
        previous = torch.get_float32_matmul_precision()
        torch.set_float32_matmul_precision("high" if self.config.precision == "tf32" else previous)
        try:
            with torch.autocast(self.device.type, torch.bfloat16, enabled=self.config.precision == "bf16"):
                yield
        finally:
            torch.set_float32_matmul_precision(previous)

    def train_step(self, step: int) -> torch.Tensor:
        """Step `step` (0-based) of every student still training; returns the losses."""
        inputs = self._draw(self.data_streams, self.config.batch)
        with self.precision():
            targets = self.objective.teacher_targets(self.teachers.forward(inputs), self.teachers.head)
            losses = self.losses(inputs, targets)
        diverging = (self.diverged_at == 0) & ~torch.isfinite(losses.detach())
        self.diverged_at.masked_fill_(diverging, step + 1)
        training = self.diverged_at == 0
        torch.where(training, losses, 0).sum().backward()
        self.optimizer.step(self.lr_multipliers[step], training)
        self.optimizer.zero_grad()
        self.train_loss_sum += losses.detach()
        self.steps_since_evaluation += 1
        return losses.detach()

    @torch.no_grad()
    def test_losses(self) -> torch.Tensor:
        batches = zip(self.test_inputs.split(self.config.test_batch_size, dim=1), self.test_targets)
        with self.precision():
            return torch.stack([self.losses(x, targets) for x, targets in batches]).mean(0)

    def evaluate(self, step: int) -> pd.DataFrame:
        """Record the test loss and the mean training loss since the last evaluation; returns the
        new rows (tidy, one per student) after adding them to `history`."""
        records = self.records(step, self.train_loss_sum / max(self.steps_since_evaluation, 1), self.test_losses())
        self.train_loss_sum.zero_()
        self.steps_since_evaluation = 0
        self.history = pd.concat([self.history, records], ignore_index=True)
        return records

    def records(self, step: int, train_loss: torch.Tensor, test_loss: torch.Tensor) -> pd.DataFrame:
        """Tidy rows, one per student, for this evaluation."""
        temperatures = self.config.run_temperatures
        instances = self.config.teacher_instances
        diverged_at = self.diverged_at.cpu().numpy()
        return pd.DataFrame({
            "teacher": [instances[s.instance][0] for s in self.specs],
            "replicate": [instances[s.instance][1] for s in self.specs],
            "temperature": [temperatures[s.temperature_index] for s in self.specs],
            "depth": [s.depth for s in self.specs],
            "step": step,
            "train_loss": train_loss.double().cpu().numpy(),  # float64: a checkpoint's copy reads back the same
            "test_loss": test_loss.double().cpu().numpy(),
            "diverged_at_step": np.where(diverged_at > 0, diverged_at, np.nan),
        })

    def state(self, step: int) -> dict:
        """Everything the steps after `step` depend on (for a checkpoint)."""
        return {"step": step, "students": self.students.state_dict(), "optimizer": self.optimizer.state_dict(),
                "data_streams": [g.get_state() for g in self.data_streams], "diverged_at": self.diverged_at,
                "train_loss_sum": self.train_loss_sum, "steps_since_evaluation": self.steps_since_evaluation,
                "history": self.history.to_dict("list")}

    def load_state(self, state: dict) -> int:
        """Continue from a `state()`; returns its step."""
        self.students.load_state_dict(state["students"])
        self.optimizer.load_state_dict(state["optimizer"])
        for generator, saved in zip(self.data_streams, state["data_streams"]):
            generator.set_state(saved)
        self.diverged_at.copy_(state["diverged_at"])
        self.train_loss_sum.copy_(state["train_loss_sum"])
        self.steps_since_evaluation = state["steps_since_evaluation"]
        self.history = pd.DataFrame(state["history"])
        return state["step"]


def train(config: SweepConfig, job: Job | None = None, device: torch.device | None = None, on_evaluation=None,
          on_progress=None, checkpoints=None) -> Sweep:
    """Train the students of `job` (default: the whole sweep `config` describes).

    `on_evaluation(history)` receives every record so far after each evaluation (the run folder
    writes them to disk); `on_progress(step)` is called about 200 times over the run;
    `checkpoints` (with `load_checkpoint()` and `save_checkpoint(state)`, e.g. a run folder's
    job) is where training resumes from and saves to, every `config.checkpoint_every` steps.
    """
    sweep = Sweep(config, device or resolve_device(config.device), job)
    saved = checkpoints.load_checkpoint() if checkpoints else None
    start = sweep.load_state(saved) if saved else 0
    evaluations = [s for s in evaluation_steps(config.steps, config.evals) if s > start]
    report_every = max(1, config.steps // 200)
    for step in range(start + 1, config.steps + 1):
        sweep.train_step(step - 1)
        if step == evaluations[0]:
            evaluations.pop(0)
            sweep.evaluate(step)
            if on_evaluation:
                on_evaluation(sweep.history)
        if checkpoints and step % config.checkpoint_every == 0 and step < config.steps:
            checkpoints.save_checkpoint(sweep.state(step))
        if on_progress and (step % report_every == 0 or step == config.steps):
            on_progress(step)
    return sweep
