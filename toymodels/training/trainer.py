"""What training adds to a population (`Trainer`): Adam with a depth-scaled rate per student, the
rate schedule, the training samples, each student's divergence step, the plateau test that
decays a student's rate and declares it converged (`PlateauTest`), and when a population is
rebuilt without its converged students (`Rebuilds`)."""

import math
import time

import torch
from scipy import stats

from ..config import SweepConfig
from ..models.streams import TRAIN_DATA_STREAM, seeded_generator
from .optim import Stacked
from .population import Population
from .samples import FreshSamples, TeacherPool

ALL = slice(None)  # every student: the index of a whole population's rows


class PlateauTest:
    """Each student's mean training loss over the last `check_every` steps against its best:
    `patience` checks without a relative improvement above `plateau_tolerance` make a plateau;
    a plateau decays the student's rate by `lr_decay`, `decays` times, and the plateau after the
    last decay means it has converged: a further decay no longer buys an improvement. A student
    whose start spent some decays (`decays_spent`, one per student) is decayed only the rest of the
    way. Judged on the curve at a constant rate, never on an annealing schedule. All on the device.

    What makes a plateau is `flat`, the one part the rules differ in (`PLATEAU_TESTS`)."""

    def __init__(self, config: SweepConfig, decays_spent: torch.Tensor):
        self.config = config
        count, device = len(decays_spent), decays_spent.device
        self.lr_scale = torch.ones(count, device=device)
        self.best = torch.full((count,), float("inf"), device=device)
        self.stale = torch.zeros(count, dtype=torch.long, device=device)
        self.decays_done = decays_spent.clone()
        self.converged_at = torch.zeros(count, dtype=torch.long, device=device)  # 0: still training
        self.window_sum = torch.zeros(count, device=device)
        self.window_steps = torch.zeros((), dtype=torch.long, device=device)  # counted by the step, on the device
        self.last_window = torch.full((count,), float("nan"), device=device)  # the mean `check` judged last

    def add(self, losses: torch.Tensor) -> None:
        self.window_sum += losses
        self.window_steps += 1  # in place, on the device: a captured step replays it

    def flat(self, window: torch.Tensor) -> torch.Tensor:
        """Whether each student's curve is flat at this check, given its window's mean loss:
        `patience` windows in a row none of which beat its best by `plateau_tolerance`. A noisy
        window mean that falls below its trend lowers the best for good, so the larger a student's
        noise relative to its loss, the sooner the windows after it look flat."""
        improved = window < self.best * (1 - self.config.plateau_tolerance)
        # in place: a captured step (cuda_graphs.py) reads the rates and marks from these same tensors
        self.best.copy_(torch.where(improved, window, self.best))
        self.stale.copy_(torch.where(improved, 0, self.stale + 1))
        return self.stale >= self.config.patience

    def check(self, step: int, training: torch.Tensor) -> torch.Tensor:
        """Judge the window that ends at `step`; returns which students converged now."""
        config = self.config
        window = self.window_sum / self.window_steps.clamp(min=1)
        self.last_window = window  # a converged student's training loss (MetricsRecorder.record)
        plateau = training & self.flat(window)
        converged = plateau & (self.decays_done >= config.decays)
        decaying = plateau & ~converged
        self.lr_scale.copy_(torch.where(decaying, self.lr_scale * config.lr_decay, self.lr_scale))
        self.decays_done += decaying
        self.stale.copy_(torch.where(decaying, 0, self.stale))  # the new rate gets its own patience
        self.converged_at.copy_(torch.where(converged, step, self.converged_at))
        self.window_sum.zero_()
        self.window_steps.zero_()
        return converged

    STATE = ("lr_scale", "best", "stale", "decays_done", "converged_at", "window_sum")

    def state(self) -> dict:
        return {**{name: getattr(self, name) for name in self.STATE}, "window_steps": self.window_steps}

    def load_state(self, state: dict, students=ALL) -> None:
        """Continue from `state()` (of the students at `students` there, in this order)."""
        for name in self.STATE:
            getattr(self, name).copy_(state[name][students])
        self.window_steps.copy_(torch.as_tensor(state["window_steps"]))  # a number in checkpoints written before


class TrendPlateauTest(PlateauTest):
    """A plateau relative to the student's own noise: the trend of log(window mean) over its last
    `patience` + 1 windows at this rate (least squares), and its standard error from the scatter of
    those windows about it. Flat once the improvement over `patience` windows is below
    `plateau_tolerance` with 95 % confidence (the relative rule's flatness, judged on a trend: the
    upper bound of −slope·patience under log(1/(1 − tolerance))). Noise widens the
    bound, so it delays the verdict instead of hastening it: students whose losses differ 100× in
    scale and in relative noise stop at the same relative flatness."""

    STATE = (*PlateauTest.STATE, "history")

    def __init__(self, config: SweepConfig, decays_spent: torch.Tensor):
        super().__init__(config, decays_spent)
        span = 2 * config.patience
        self.history = torch.full((len(decays_spent), span), float("nan"), device=decays_spent.device)
        positions = torch.arange(span, dtype=torch.float32, device=decays_spent.device)
        self.centred = positions - positions.mean()
        self.t_critical = float(stats.t.ppf(0.95, span - 2))
        self.threshold = -math.log(1 - config.plateau_tolerance) / config.patience  # per window

    def flat(self, window: torch.Tensor) -> torch.Tensor:
        # the windows since the last decay (`stale` counts them; a decay resets it), newest last
        self.history.copy_(torch.cat([self.history[:, 1:], window.log()[:, None]], dim=1))
        self.stale += 1
        slope = (self.history * self.centred).sum(1) / self.centred.square().sum()
        residuals = self.history - self.history.mean(1, keepdim=True) - slope[:, None] * self.centred
        error = (residuals.square().sum(1) / (len(self.centred) - 2) / self.centred.square().sum()).sqrt()
        return (self.stale >= len(self.centred)) & (-slope + self.t_critical * error < self.threshold)


RULES = {"relative": PlateauTest, "trend": TrendPlateauTest}  # config.PLATEAU_TESTS, by the name a config gives


class Rebuilds:
    """When a population sheds its converged students. Eager: as soon as any converge, a rebuild
    costs nothing. Compiled: the smaller population's step compiles anew (tens of seconds), and
    until then converged students stay, frozen, costing their share of the population's layers of
    every step. The rule is ski rental: rebuild once the time they have cost reaches the time the
    last compile took — never more than twice the best choice in hindsight. (Waiting instead for
    converged students to hold half the layers spent 14–23 % of the cpu sweeps' steps on them.)"""

    def __init__(self, compiled: bool, clock=time.perf_counter):
        self.compiled, self.clock = compiled, clock
        self.compile_seconds = 0.0  # the last compile's: the price of a rebuild
        self.frozen_seconds = 0.0  # what the frozen students have cost since then
        self.frozen_share, self.checked_at = 0.0, None

    def compiled_in(self, seconds: float) -> None:
        self.compile_seconds = seconds
        self.frozen_seconds, self.frozen_share, self.checked_at = 0.0, 0.0, self.clock()

    def due(self, depths: torch.Tensor, converged: torch.Tensor) -> bool:
        """At a check: whether to rebuild the population of students of `depths` without those
        `converged` (now or before)."""
        now = self.clock()
        if self.checked_at is not None:
            self.frozen_seconds += (now - self.checked_at) * self.frozen_share
        self.checked_at, self.frozen_share = now, float(depths[converged].sum() / depths.sum())
        return bool(converged.any()) and (not self.compiled or self.frozen_seconds >= self.compile_seconds)


class Trainer:
    """What training adds to a population: its optimiser with a depth-scaled rate per student, the rate
    schedule, the training data (a stream per teacher instance, or a pool), each student's
    divergence step, and the plateau test when training to convergence."""

    def __init__(
        self,
        population: Population,
        data_streams=None,
        pool: TeacherPool | None = None,
        fresh: FreshSamples | None = None,
    ):
        """A fresh trainer of `population`; `data_streams`, `pool` and `fresh` (one per teacher
        instance) are those of a trainer it continues (see `without`)."""
        self.population = population
        config, device, students = population.config, population.device, population.students
        self.config = config
        self.schedule = population.protocol.schedule
        self.optimizer = population.protocol.optimizer(
            [
                Stacked(p, self._rates(p), students.owner(p), p is not students.head and p.dim() == 3 and p.size(1) > 1)
                for p in students.parameters()
            ],
            compiled=config.compile,
        )
        self.data_streams = data_streams or [
            seeded_generator(config.seed, TRAIN_DATA_STREAM, r, device=device) for _, r in population.teachers.instances
        ]
        self.pool = pool  # made at the first step that needs it (see `_pool_at`)
        self.fresh = None if config.teacher_pool else fresh or FreshSamples(population, self.data_streams, config.batch)
        self.diverged_at = torch.zeros(len(population.specs), dtype=torch.long, device=device)  # 0: training
        self.stopped_at = torch.zeros_like(self.diverged_at)  # fell behind another start (racing.py); 0: not
        self.plateaus = RULES[config.plateau_test](config, students.decays_spent) if config.converge else None

    def _rates(self, param) -> torch.Tensor:
        """Learning rate of each slice of `param`: its student's depth decides it (a trained head's
        by `SweepConfig.head_lr`, not depth-scaled unless asked), times lr_decay for each decay its
        start spent."""
        population, config = self.population, self.population.config
        owners = population.students.owner(param)
        depths = [population.specs[m].depth for m in owners.tolist()]
        if param is population.students.head:
            rates = [config.head_lr(d) for d in depths]
        else:
            multiplier = population.students.architecture.lr_multiplier
            rates = [config.student_lr(d) * multiplier(d) for d in depths]
        spent = population.students.decays_spent[owners]
        return torch.tensor(rates, device=population.device) * config.lr_decay**spent

    def _pool_at(self, step: int) -> TeacherPool | None:
        """The teacher pool step `step` draws from: labelled anew every `pool_refresh` steps."""
        config = self.config
        if not config.teacher_pool:
            return None
        generation = step // config.pool_refresh if config.pool_refresh else 0
        if self.pool is None or self.pool.generation != generation:
            self.pool = TeacherPool(self.population, config.teacher_pool, generation)
        return self.pool

    def step(self, step: int) -> torch.Tensor:
        """Step `step` (0-based) of every student still training; returns the losses."""
        return self.update(*self.batch(step))

    def batch(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Step `step`'s (inputs, teacher read-outs) per teacher instance."""
        return self.pool.draw(self.data_streams, self.config.batch) if self._pool_at(step) else self.fresh.draw()

    def update(self, inputs: torch.Tensor, readouts: torch.Tensor) -> torch.Tensor:
        """One step of every student still training on this batch; returns the losses. Device work
        alone, the same ops on the same tensors at every step: no step number baked in (Adam's
        update count, on the device, is the clock), no host sync, and every tensor it keeps
        updated in place, so a CUDA graph captures it once and replays it (cuda_graphs.py)."""
        population, config = self.population, self.config
        with population.precision():
            losses = population.losses(inputs, population.targets_from_readout(readouts))
        detached = losses.detach()
        diverging = (self.diverged_at == 0) & ~torch.isfinite(detached)
        self.diverged_at.copy_(torch.where(diverging, self.optimizer.steps.long() + 1, self.diverged_at))
        training = self.training()
        torch.where(training, losses, 0).sum().backward()
        self.optimizer.step(
            self.schedule(self.optimizer.steps, config.steps),
            training,
            self.plateaus.lr_scale if self.plateaus else None,
        )
        self.optimizer.zero_grad()
        if self.plateaus:
            self.plateaus.add(detached)
        return detached

    def converged(self) -> torch.Tensor:
        """Which students of the population have converged: between checks none in an eager run,
        which drops them at once; a compiled run keeps them, frozen, until a rebuild pays."""
        return self.plateaus.converged_at > 0 if self.plateaus else torch.zeros_like(self.diverged_at, dtype=torch.bool)

    def done(self) -> torch.Tensor:
        """Which students left training for good, converged or stopped behind another start."""
        return self.converged() | (self.stopped_at > 0)

    def training(self) -> torch.Tensor:
        """Which students still train: neither diverged, converged nor stopped."""
        return (self.diverged_at == 0) & ~self.done()

    def check(self, step: int) -> torch.Tensor:
        """The plateau test at `step`: which students converged now."""
        return self.plateaus.check(step, self.training())

    def state(self) -> dict:
        streams = self.fresh.state() if self.fresh else {"data_streams": [g.get_state() for g in self.data_streams]}
        return {
            "students": self.population.students.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            **streams,
            "diverged_at": self.diverged_at,
            "stopped_at": self.stopped_at,
            "plateaus": self.plateaus.state() if self.plateaus else None,
        }

    def load_state(self, state: dict) -> None:
        self.population.students.load_state_dict(state["students"])
        self.optimizer.load_state_dict(state["optimizer"])
        if self.fresh:
            self.fresh.load_state(state)
        else:
            for generator, saved in zip(self.data_streams, state["data_streams"]):
                generator.set_state(saved)
        self.diverged_at.copy_(state["diverged_at"])
        self.stopped_at.copy_(state.get("stopped_at", torch.zeros_like(self.stopped_at)))  # older: none stopped
        if self.plateaus:
            self.plateaus.load_state(state["plateaus"])

    def without(self, leaving: torch.Tensor) -> "Trainer":
        """A trainer of this population less the students `leaving` (a bool per student), with
        everything the others' training depends on carried over unchanged."""
        old = self.population
        staying = [spec for spec, gone in zip(old.specs, leaving.tolist()) if not gone]
        population = Population(old.protocol, old.device, old.job, staying, reuse=old, weights_from=old.students)
        instances = [old.teachers.instances.index(instance) for instance in population.teachers.instances]
        trainer = Trainer(
            population,
            [self.data_streams[i] for i in instances],
            self.pool.keep(instances) if self.pool else None,
            self.fresh.keep(population, instances) if self.fresh else None,
        )
        rows = population.students.matching_rows(old.students)  # in the order of parameters()
        with torch.no_grad():
            for mine, theirs, (here, there) in zip(
                trainer.optimizer.row_state(), self.optimizer.row_state(), rows.values()
            ):
                for new, old_state in zip(mine, theirs):
                    new[here.to(old.device)] = old_state[there.to(old.device)]
        trainer.optimizer.steps.copy_(self.optimizer.steps)
        students = population.students.matching_students(old.students)[1].to(old.device)
        trainer.diverged_at, trainer.stopped_at = self.diverged_at[students], self.stopped_at[students]
        trainer.plateaus.load_state(self.plateaus.state(), students)
        return trainer
