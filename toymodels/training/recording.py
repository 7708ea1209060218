"""What a job records while it trains: when it evaluates (`evaluation_steps`), the training losses
between evaluations and the tidy rows of metrics.csv (`MetricsRecorder`), and where its wall time
went (`TimeSplit`)."""

import time
from collections import defaultdict
from contextlib import contextmanager

import numpy as np
import pandas as pd
import torch

from ..models.students import StudentSpec
from .population import Population
from .racing import student_index
from .trainer import ALL, Trainer


def evaluation_steps(steps: int, evals: int) -> list[int]:
    """Geometrically spaced steps (α against training time is read on a log axis), plus the
    step at 90 % (before schedule S's last tenth, where it anneals fastest), plus the last."""
    spaced = np.geomspace(1, steps, evals).round().astype(int)
    return sorted({*spaced.tolist(), max(1, round(0.9 * steps)), steps})


class MetricsRecorder:
    """Training losses summed on the device between evaluations, and the tidy rows (one per
    student) of every evaluation so far in `history`. `reference` maps each student to its
    reference loss (`Population.reference_losses`)."""

    def __init__(self, population: Population, reference: dict[StudentSpec, float]):
        config, specs = population.config, population.specs
        temperatures = population.protocol.temperatures
        self.reference = reference
        self.keys = pd.DataFrame(
            {
                "teacher": [config.teacher_instances[s.instance][0] for s in specs],
                "replicate": [config.teacher_instances[s.instance][1] for s in specs],
                "temperature": [temperatures[s.temperature_index] for s in specs],
                "depth": [s.depth for s in specs],
            }
        )
        self.marks = pd.DataFrame({"start": [s.start for s in specs], "reference_loss": [reference[s] for s in specs]})
        self.train_loss_sum = torch.zeros(len(specs), device=population.device)
        self.steps_since_evaluation = torch.zeros(len(specs), dtype=torch.long, device=population.device)
        self.history = pd.DataFrame()

    def students_in(self, frame: pd.DataFrame) -> torch.Tensor:
        """Which of the population's students have rows in `frame` (a bool per student)."""
        mine = student_index(self.keys.assign(start=self.marks.start))
        return torch.from_numpy(mine.isin(student_index(frame))).to(self.train_loss_sum.device)

    def add(self, losses: torch.Tensor) -> None:
        self.train_loss_sum += losses
        self.steps_since_evaluation += 1

    def record(
        self,
        step: int,
        test_loss: torch.Tensor,
        trainer: Trainer,
        only: torch.Tensor | None = None,
        train_loss: torch.Tensor | None = None,
    ):
        """Add the rows of an evaluation at `step` (of every student, or those `only` marks) to
        `history`, and start their next training-loss mean. Their training loss is the mean since
        the previous evaluation, or `train_loss` when given (a converged student's: the mean over
        the plateau test's last window, the steps where its curve was judged flat)."""
        chosen = np.ones(len(self.keys), bool) if only is None else only.cpu().numpy()
        if train_loss is None:
            train_loss = self.train_loss_sum / self.steps_since_evaluation.clamp_min(1)
        train_loss = train_loss.double().cpu().numpy()

        def steps_or_nan(marks):
            marks = np.zeros(len(self.keys)) if marks is None else marks.cpu().numpy()
            return np.where(marks > 0, marks, np.nan)

        rows = self.keys.assign(
            step=step,
            train_loss=train_loss,  # float64: a checkpoint's copy reads back the same
            test_loss=test_loss.double().cpu().numpy(),
            diverged_at_step=steps_or_nan(trainer.diverged_at),
            converged_at_step=steps_or_nan(trainer.plateaus.converged_at if trainer.plateaus else None),
            **self.marks,
        )[chosen]
        reset = torch.from_numpy(chosen).to(self.train_loss_sum.device)
        self.train_loss_sum[reset] = 0
        self.steps_since_evaluation[reset] = 0
        self.history = pd.concat([self.history, rows], ignore_index=True)

    def state(self) -> dict:
        return {
            "train_loss_sum": self.train_loss_sum,
            "steps_since_evaluation": self.steps_since_evaluation,
            "history": self.history.to_dict("list"),
        }

    def load_state(self, state: dict, students=ALL) -> None:
        """Continue from `state()` (of the students at `students` there, in this order)."""
        self.train_loss_sum = state["train_loss_sum"][students].clone()
        self.steps_since_evaluation = state["steps_since_evaluation"][students].clone()
        self.history = pd.DataFrame(state["history"])

    def without(self, population: Population, students: torch.Tensor) -> "MetricsRecorder":
        """This recorder for `population`, whose students are those at `students` here."""
        recorder = MetricsRecorder(population, self.reference)
        recorder.load_state(self.state(), students)
        return recorder


class TimeSplit:
    """Where a job's wall time went, in seconds by part. Measured by the host's clock: on the CPU
    each part's own time; on a GPU, which runs behind the host, the time the host spent launching."""

    def __init__(self):
        self.seconds = defaultdict(float)

    @contextmanager
    def __call__(self, part: str):
        began = time.perf_counter()
        yield
        self.seconds[part] += time.perf_counter() - began

    def parts(self, labelling_seconds: float) -> dict[str, float]:
        """The split, with the teachers' labelling (inside the steps) taken out of the student steps."""
        split = dict(self.seconds)
        split["student steps"] = max(0.0, split.get("student steps", 0.0) - labelling_seconds)
        return {"labelling": labelling_seconds, **split}
