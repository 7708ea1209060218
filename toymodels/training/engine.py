"""The training engine: one process trains a population (a sweep, or one job of it) on one device.

Per step: draw inputs for each teacher instance, run every teacher once (its targets serve all
temperatures and student depths), run the population of students, sum their losses, one
backward, one stacked Adam update. Losses stay on the device between evaluations and checks, so
the step never waits for the host; a student whose loss turns NaN or infinite is marked
diverged on the device, at that step, and its weights stop changing.

With `converge`, every `check_every` steps a plateau test on each student's own training loss
decays its rate or declares it converged; converged students leave the population (it is
rebuilt without them), so the students still training get the compute, and the others' numbers
do not change. `steps` is then the budget: a student still improving when it ends is capped.
With several starts, racing (`racing.RaceRule`, judged after each evaluation) stops a start far
behind its student's converged leader; it leaves as a converged student does.

The pieces: `Trainer` (optimiser, schedule, data, divergence), `PlateauTest`, `MetricsRecorder`
(the training losses between evaluations and the tidy rows of each evaluation) and `train`
(the loop, evaluations, checks, checkpoints). A checkpoint holds everything the remaining steps
depend on, so a resumed job finishes with the numbers an uninterrupted one would have.
"""

import time
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch

from ..config import SweepConfig
from ..models.blocks import seeded_generator
from ..models.students import Students, StudentSpec
from ..models.teachers import POOL_STREAM, TRAIN_DATA_STREAM
from .jobs import Job
from .optim import StackedAdam
from .population import Population, draw_inputs, resolve_device
from .protocol import Protocol
from .racing import RaceRule, mark_stopped, student_index
from .stages import single_stage, stage

POOL_CHUNK = 8192  # inputs drawn at once when a pool is filled
LABEL_CHUNK = 512  # inputs the teachers label at once: 2.2× faster here than 8192, whose hidden states leave the cache


def evaluation_steps(steps: int, evals: int) -> list[int]:
    """Geometrically spaced steps (α against training time is read on a log axis), plus the
    step at 90 % (before schedule S's last tenth, where it anneals fastest), plus the last."""
    spaced = np.geomspace(1, steps, evals).round().astype(int)
    return sorted({*spaced.tolist(), max(1, round(0.9 * steps)), steps})


class TeacherPool:
    """`size` inputs per teacher instance and the teachers' read-outs of them, computed once;
    each step draws its batch from them (with replacement) instead of running the teachers.
    With `pool_refresh`, generation g of the pool (from step g·pool_refresh on) holds fresh inputs
    of its own seeded stream, so a resumed job relabels exactly the pool it had."""

    def __init__(self, population: Population, size: int, generation: int = 0):
        config, device = population.config, population.device
        self.generation = generation
        keys = () if generation == 0 else (generation,)  # generation 0: the stream of pools that never refresh
        generators = [seeded_generator(config.seed, POOL_STREAM, r, *keys, device=device)
                      for _, r in population.teachers.instances]
        self.inputs = torch.cat([draw_inputs(generators, min(POOL_CHUNK, size - start), config.width, device)
                                 for start in range(0, size, POOL_CHUNK)], dim=1)
        chunks = stage(f"labelling a teacher pool of {size} samples", self.inputs.split(LABEL_CHUNK, dim=1))
        self.readouts = torch.cat([population.teacher_readouts(x) for x in chunks], 1)

    def draw(self, generators, batch: int) -> tuple[torch.Tensor, torch.Tensor]:
        """A batch of (inputs, read-outs) per teacher instance."""
        picks = torch.stack([torch.randint(self.inputs.shape[1], (batch,), generator=g, device=g.device)
                             for g in generators])
        rows = torch.arange(len(generators), device=picks.device).view(-1, 1)
        return self.inputs[rows, picks], self.readouts[rows, picks]

    def keep(self, instances: list[int]) -> "TeacherPool":
        self.inputs, self.readouts = self.inputs[instances], self.readouts[instances]
        return self


class FreshSamples:
    """Fresh teacher samples, each used once, from one stream per teacher instance. The inputs of
    the next `steps_ahead` steps are drawn exactly as one step at a time would draw them (the
    same numbers) and the teachers label them at once, so their 128 layers run once per
    LABEL_CHUNK samples, not once per step: at batch 16 that was most of a step's time."""

    def __init__(self, population: Population, streams: list[torch.Generator], batch: int):
        self.population, self.streams, self.batch = population, streams, batch
        self.steps_ahead = max(1, min(LABEL_CHUNK // batch, population.config.steps))  # a short run labels no more
        self.block_start = [g.get_state() for g in streams]  # where the block being used began
        self.inputs = self.readouts = None
        self.used = 0  # steps of the block used so far
        self.labelling_seconds = 0.0  # for the run's time split (`TimeSplit`)

    def draw(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The next batch of (inputs, read-outs) per teacher instance."""
        if self.inputs is None:  # label the block that begins where the streams are (at block_start)
            population, width = self.population, self.population.config.width
            began = time.perf_counter()
            self.inputs = torch.cat([draw_inputs(self.streams, self.batch, width, population.device)
                                     for _ in range(self.steps_ahead)], dim=1)
            with population.precision():
                self.readouts = population.teacher_readouts(self.inputs)
            self.labelling_seconds += time.perf_counter() - began
        rows = slice(self.used * self.batch, (self.used + 1) * self.batch)
        batch = self.inputs[:, rows], self.readouts[:, rows]
        self.used += 1
        if self.used == self.steps_ahead:  # spent: the next block begins where the streams are now
            self.inputs = self.readouts = None
            self.used, self.block_start = 0, [g.get_state() for g in self.streams]
        return batch

    def state(self) -> dict:
        return {"data_streams": self.block_start, "block_steps_used": self.used}

    def load_state(self, state: dict) -> None:
        """Continue from `state()`: the block is drawn and labelled again from where it began (a
        checkpoint written before blocks has the streams after its step, and no block begun)."""
        for generator, saved in zip(self.streams, state["data_streams"]):
            generator.set_state(saved)
        self.inputs, self.used = None, state.get("block_steps_used", 0)

    def keep(self, population: Population, instances: list[int]) -> "FreshSamples":
        """These samples for `population`, which learns from the teacher instances at `instances` here."""
        self.population, self.streams = population, [self.streams[i] for i in instances]
        self.block_start = [self.block_start[i] for i in instances]
        if self.inputs is not None:
            self.inputs, self.readouts = self.inputs[instances], self.readouts[instances]
        return self


class PlateauTest:
    """Each student's mean training loss over the last `check_every` steps against its best:
    `patience` checks without a relative improvement above `plateau_tolerance` make a plateau;
    a plateau decays the student's rate by `lr_decay`, `decays` times, and the plateau after the
    last decay means it has converged: a further decay no longer buys an improvement. A student
    whose start spent some decays (`decays_spent`, one per student) is decayed only the rest of the
    way. Judged on the curve at a constant rate, never on an annealing schedule. All on the device."""

    def __init__(self, config: SweepConfig, decays_spent: torch.Tensor):
        self.config = config
        count, device = len(decays_spent), decays_spent.device
        self.lr_scale = torch.ones(count, device=device)
        self.best = torch.full((count,), float("inf"), device=device)
        self.stale = torch.zeros(count, dtype=torch.long, device=device)
        self.decays_done = decays_spent.clone()
        self.converged_at = torch.zeros(count, dtype=torch.long, device=device)  # 0: still training
        self.window_sum, self.window_steps = torch.zeros(count, device=device), 0
        self.last_window = torch.full((count,), float("nan"), device=device)  # the mean `check` judged last

    def add(self, losses: torch.Tensor) -> None:
        self.window_sum += losses
        self.window_steps += 1

    def check(self, step: int, training: torch.Tensor) -> torch.Tensor:
        """Judge the window that ends at `step`; returns which students converged now."""
        config = self.config
        window = self.window_sum / max(self.window_steps, 1)
        self.last_window = window  # a converged student's training loss (MetricsRecorder.record)
        improved = window < self.best * (1 - config.plateau_tolerance)
        self.best = torch.where(improved, window, self.best)
        self.stale = torch.where(improved, 0, self.stale + 1)
        plateau = training & (self.stale >= config.patience)
        converged = plateau & (self.decays_done >= config.decays)
        decaying = plateau & ~converged
        self.lr_scale = torch.where(decaying, self.lr_scale * config.lr_decay, self.lr_scale)
        self.decays_done += decaying
        self.stale = torch.where(decaying, 0, self.stale)  # the new rate gets its own patience
        self.converged_at = torch.where(converged, step, self.converged_at)
        self.window_sum.zero_()
        self.window_steps = 0
        return converged

    STATE = ("lr_scale", "best", "stale", "decays_done", "converged_at", "window_sum")

    def state(self) -> dict:
        return {**{name: getattr(self, name) for name in self.STATE}, "window_steps": self.window_steps}

    def load_state(self, state: dict, students=slice(None)) -> None:
        """Continue from `state()` (of the students at `students` there, in this order)."""
        for name in self.STATE:
            setattr(self, name, state[name][students].clone())
        self.window_steps = state["window_steps"]


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
    """What training adds to a population: Adam with a depth-scaled rate per student, the rate
    schedule, the training data (a stream per teacher instance, or a pool), each student's
    divergence step, and the plateau test when training to convergence."""

    def __init__(self, population: Population, data_streams=None, pool: TeacherPool | None = None,
                 fresh: FreshSamples | None = None):
        """A fresh trainer of `population`; `data_streams`, `pool` and `fresh` (one per teacher
        instance) are those of a trainer it continues (see `without`)."""
        self.population = population
        config, device, students = population.config, population.device, population.students
        self.config = config
        self.schedule = population.protocol.schedule
        self.optimizer = StackedAdam([(p, self._rates(p), students.owner(p)) for p in students.parameters()],
                                     compiled=config.compile)
        self.data_streams = data_streams or [seeded_generator(config.seed, TRAIN_DATA_STREAM, r, device=device)
                                             for _, r in population.teachers.instances]
        self.pool = pool  # made at the first step that needs it (see `_pool_at`)
        self.fresh = None if config.teacher_pool else fresh or FreshSamples(population, self.data_streams, config.batch)
        self.diverged_at = torch.zeros(len(population.specs), dtype=torch.long, device=device)  # 0: training
        self.stopped_at = torch.zeros_like(self.diverged_at)  # fell behind another start (racing.py); 0: not
        self.plateaus = PlateauTest(config, students.decays_spent) if config.converge else None

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
        return torch.tensor(rates, device=population.device) * config.lr_decay ** spent

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
        population, config = self.population, self.config
        inputs, readouts = (self.pool.draw(self.data_streams, config.batch) if self._pool_at(step)
                            else self.fresh.draw())
        with population.precision():
            losses = population.losses(inputs, population.targets_from_readout(readouts))
        detached = losses.detach()
        diverging = (self.diverged_at == 0) & ~torch.isfinite(detached)
        self.diverged_at.masked_fill_(diverging, step + 1)
        training = self.training()
        torch.where(training, losses, 0).sum().backward()
        # Adam's update count is the schedule's clock: on the device, so the step never waits for the host.
        self.optimizer.step(self.schedule(self.optimizer.steps, config.steps), training,
                            self.plateaus.lr_scale if self.plateaus else None)
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
        return {"students": self.population.students.state_dict(), "optimizer": self.optimizer.state_dict(),
                **streams, "diverged_at": self.diverged_at, "stopped_at": self.stopped_at,
                "plateaus": self.plateaus.state() if self.plateaus else None}

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
        trainer = Trainer(population, [self.data_streams[i] for i in instances],
                          self.pool.keep(instances) if self.pool else None,
                          self.fresh.keep(population, instances) if self.fresh else None)
        rows = population.students.matching_rows(old.students)  # in the order of parameters()
        with torch.no_grad():
            for k, (here, there) in enumerate(rows.values()):
                here, there = here.to(old.device), there.to(old.device)
                trainer.optimizer.exp_avg[k][here] = self.optimizer.exp_avg[k][there]
                trainer.optimizer.exp_avg_sq[k][here] = self.optimizer.exp_avg_sq[k][there]
        trainer.optimizer.steps.copy_(self.optimizer.steps)
        students = population.students.matching_students(old.students)[1].to(old.device)
        trainer.diverged_at, trainer.stopped_at = self.diverged_at[students], self.stopped_at[students]
        trainer.plateaus.load_state(self.plateaus.state(), students)
        return trainer


# The columns of metrics.csv, one row per student × evaluation. Runs written before the engine
# marked when a student diverged or converged lack the MARK_COLUMNS; runs written before starts
# and references lack the CERTIFICATE_COLUMNS (storage reads them as zero starts, no reference).
METRICS_COLUMNS = ("teacher", "replicate", "temperature", "depth", "step", "train_loss", "test_loss")
MARK_COLUMNS = ("diverged_at_step", "converged_at_step")
CERTIFICATE_COLUMNS = ("start", "reference_loss")  # the start; the untrained discretised student's test loss


class MetricsRecorder:
    """Training losses summed on the device between evaluations, and the tidy rows (one per
    student) of every evaluation so far in `history`. `reference` maps each student to its
    reference loss (`Population.reference_losses`)."""

    def __init__(self, population: Population, reference: dict[StudentSpec, float]):
        config, specs = population.config, population.specs
        temperatures = population.protocol.temperatures
        self.reference = reference
        self.keys = pd.DataFrame({
            "teacher": [config.teacher_instances[s.instance][0] for s in specs],
            "replicate": [config.teacher_instances[s.instance][1] for s in specs],
            "temperature": [temperatures[s.temperature_index] for s in specs],
            "depth": [s.depth for s in specs]})
        self.marks = pd.DataFrame({"start": [s.start for s in specs],
                                   "reference_loss": [reference[s] for s in specs]})
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

    def record(self, step: int, test_loss: torch.Tensor, trainer: Trainer, only: torch.Tensor | None = None,
               train_loss: torch.Tensor | None = None):
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
            **self.marks)[chosen]
        reset = torch.from_numpy(chosen).to(self.train_loss_sum.device)
        self.train_loss_sum[reset] = 0
        self.steps_since_evaluation[reset] = 0
        self.history = pd.concat([self.history, rows], ignore_index=True)

    def state(self) -> dict:
        return {"train_loss_sum": self.train_loss_sum, "steps_since_evaluation": self.steps_since_evaluation,
                "history": self.history.to_dict("list")}

    def load_state(self, state: dict, students=slice(None)) -> None:
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


@dataclass(frozen=True)
class TrainedPopulation:
    students: Students  # every student of the job, as trained (converged ones as they converged)
    history: pd.DataFrame  # every evaluation: tidy rows, one per student
    seconds: dict[str, float] = field(default_factory=dict)  # this process's time split (`TimeSplit.parts`)


def train(protocol: SweepConfig | Protocol, job: Job | None = None, device: torch.device | None = None,
          on_evaluation=None, on_progress=None, checkpoints=None) -> TrainedPopulation:
    """Train the students of `job` (default: the whole sweep) of `protocol` (a config is resolved here).

    `on_evaluation(history)` receives every record so far after each evaluation (the run folder
    writes them to disk); `on_progress(step)` is called about 200 times over the run;
    `checkpoints` (with `load_checkpoint()` and `save_checkpoint(state)`, e.g. a run folder's
    job) is where training resumes from and saves to, every `config.checkpoint_every` steps.
    """
    protocol = Protocol.of(protocol)
    config = protocol.config
    job, device = job or Job.whole(protocol), device or resolve_device(config.device)
    saved = checkpoints.load_checkpoint() if checkpoints else None
    specs = [StudentSpec(**spec) for spec in saved["specs"]] if saved else job.students()
    population = Population(protocol, device, job, specs)
    with single_stage("testing the untrained discretised students (the references)"):
        reference = dict(zip(population.specs, population.reference_losses().double().cpu().tolist()))
    trainer, recorder = Trainer(population), MetricsRecorder(population, reference)
    finished = Students(protocol, job.students(), population.students)  # every student's weights, as they leave
    start = 0
    if saved:
        trainer.load_state(saved)
        recorder.load_state(saved)
        finished.load_state_dict(saved["finished"])
        start = saved["step"]
    evaluations = [s for s in evaluation_steps(config.steps, config.evals) if s > start]
    compiling = config.compile  # the next step compiles: the first one, and the first after a rebuild
    rebuilds = Rebuilds(config.compile)
    race = RaceRule.of(config)
    report_every = max(1, config.steps // 200)
    split = TimeSplit()
    for step in range(start + 1, config.steps + 1):
        if compiling:
            began = rebuilds.clock()
            with single_stage("compiling the training step"), split("compiles"):
                recorder.add(trainer.step(step - 1))
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
            rebuilds.compiled_in(rebuilds.clock() - began)
            compiling = False
        else:
            with split("student steps"):
                recorder.add(trainer.step(step - 1))
        # judged before evaluating: a student that converges at an evaluation step gets one row, its converged one
        checked = config.converge and step % config.check_every == 0 and step < config.steps
        with split("plateau checks"):
            converged = trainer.check(step) if checked else None
        if step == evaluations[0]:
            evaluations.pop(0)
            with split("evaluations"):
                recorder.record(step, population.test_losses(), trainer, only=~trainer.done())
            with split("racing"):
                stopping = race.behind(recorder.history, step) if race else None
                if stopping is not None and not stopping.empty:  # their weights stay as they are now
                    recorder.history = mark_stopped(recorder.history, stopping, step)
                    trainer.stopped_at.masked_fill_(recorder.students_in(stopping), step)
                    finished.load_students(population.students)
            if on_evaluation:
                with split("evaluations"):
                    on_evaluation(recorder.history)
        if checked and converged.any():  # one host sync per check, none per step
            with split("evaluations"):
                recorder.record(step, population.test_losses(), trainer, only=converged,
                                train_loss=trainer.plateaus.last_window)
                if on_evaluation:
                    on_evaluation(recorder.history)
                finished.load_students(population.students)
        if checked:
            done = trainer.done()  # now and before, in a compiled run that kept them
            if done.all():
                break
            if rebuilds.due(population.students.depth, done):
                with split("rebuilds"):
                    old_students = population.students
                    trainer = trainer.without(done)
                    population = trainer.population
                    recorder = recorder.without(population, population.students.matching_students(old_students)[1])
                compiling = config.compile
        if checkpoints and step % config.checkpoint_every == 0 and step < config.steps:
            with split("checkpoints"):
                checkpoints.save_checkpoint({"step": step, "specs": [vars(s) for s in population.specs],
                                             "finished": finished.state_dict(), **trainer.state(),
                                             **recorder.state()})
        if on_progress and (step % report_every == 0 or step == config.steps):
            on_progress(step)
    else:
        finished.load_students(population.students)
    if on_progress:
        on_progress(config.steps)
    labelling = trainer.fresh.labelling_seconds if trainer.fresh else 0.0
    return TrainedPopulation(finished, recorder.history, split.parts(labelling))
