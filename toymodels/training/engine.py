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

The pieces, each in its own module: the samples (`samples`: fresh or a pool), the `Trainer`
(`trainer`: optimiser, schedule, divergence, the plateau test, rebuilds), what is recorded
(`recording`: the evaluation steps, the `MetricsRecorder`, the time split), and here `train`, the
loop, whose phases (a step, an evaluation with racing, the students converged at a check, a
rebuild, a checkpoint) are the methods of `TrainingRun`. A checkpoint holds everything the remaining steps
depend on, so a resumed job finishes with the numbers an uninterrupted one would have.
"""

from dataclasses import dataclass, field

import pandas as pd
import torch

from ..config import SweepConfig
from ..errors import ToymodelsError
from ..models.students import Students, StudentSpec
from .cuda_graphs import Stepper
from .jobs import Job
from .population import Population
from .progress import single_stage
from .protocol import Protocol
from .racing import RaceRule, mark_stopped
from .recording import MetricsRecorder, TimeSplit, evaluation_steps
from .trainer import Rebuilds, Trainer


@dataclass(frozen=True)
class TrainedPopulation:
    students: Students  # every student of the job, as trained (converged ones as they converged)
    history: pd.DataFrame  # every evaluation: tidy rows, one per student
    seconds: dict[str, float] = field(default_factory=dict)  # this process's time split (`TimeSplit.parts`)


class TrainingRun:
    """One job's training in progress: the population and its trainer, recorder and finished
    students (all replaced together when converged students leave), and the loop's phases, each
    a method: a step, an evaluation (with racing), the record of students that converged at a
    check, a rebuild without the students that are done, a checkpoint."""

    def __init__(self, protocol: Protocol, job: Job, device: torch.device, saved: dict | None, on_evaluation):
        config = protocol.config
        specs = [StudentSpec(**spec) for spec in saved["specs"]] if saved else job.students()
        self.population = Population(protocol, device, job, specs)
        with single_stage("testing the untrained discretised students (the references)"):
            reference = self.population.reference_losses().double().cpu().tolist()
        self.trainer = Trainer(self.population)
        self.recorder = MetricsRecorder(self.population, dict(zip(self.population.specs, reference)))
        self.finished = Students(protocol, job.students(), self.population.students)  # every student, as it leaves
        self.start = 0
        if saved:
            refuse_another_device_type(saved, device)
            self.trainer.load_state(saved)
            self.recorder.load_state(saved)
            self.finished.load_state_dict(saved["finished"])
            self.start = saved["step"]
        self.stepper = Stepper(self.trainer)  # after a load: a graph captures the loaded state's tensors
        self.config, self.device, self.on_evaluation = config, device, on_evaluation
        self.compiling = config.compile  # the next step compiles: the first one, and the first after a rebuild
        # A rebuild's price: its compile and its graph's capture (the rule is eager's where neither costs)
        self.rebuilds = Rebuilds(config.compile or self.stepper.captures)
        self.build_seconds = 0.0  # what the present population's compile and capture took so far
        self.race, self.split = RaceRule.of(config), TimeSplit()

    def step(self, step: int) -> None:
        capturing = self.stepper.capturing_next()
        if not (self.compiling or capturing):
            with self.split("student steps"):
                self.recorder.add(self.stepper(step - 1))
            return
        began = self.rebuilds.clock()
        what = "compiling the training step" if self.compiling else "capturing the training step as a CUDA graph"
        with single_stage(what), self.split("compiles"):
            self.recorder.add(self.stepper(step - 1))
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
        self.build_seconds += self.rebuilds.clock() - began
        self.rebuilds.compiled_in(self.build_seconds)
        self.compiling = False

    def evaluate(self, step: int) -> None:
        """Every student still training tested; then the starts far behind their leader stop
        (racing), with their weights as they are now."""
        trainer, recorder = self.trainer, self.recorder
        with self.split("evaluations"):
            recorder.record(step, self.population.test_losses(), trainer, only=~trainer.done())
        with self.split("racing"):
            stopping = self.race.behind(recorder.history, step) if self.race else None
            if stopping is not None and not stopping.empty:
                recorder.history = mark_stopped(recorder.history, stopping, step)
                trainer.stopped_at.masked_fill_(recorder.students_in(stopping), step)
                self.finished.load_students(self.population.students)
        with self.split("evaluations"):
            self.report()

    def record_converged(self, step: int, converged: torch.Tensor) -> None:
        """The students that converged at this check: tested, their training loss that of the
        plateau test's last window, their weights kept as they are."""
        with self.split("evaluations"):
            self.recorder.record(
                step,
                self.population.test_losses(),
                self.trainer,
                only=converged,
                train_loss=self.trainer.plateaus.last_window,
            )
            self.report()
            self.finished.load_students(self.population.students)

    def report(self) -> None:
        """Every evaluation so far to `on_evaluation` (the run folder writes them to disk)."""
        if self.on_evaluation:
            self.on_evaluation(self.recorder.history)

    def rebuild_if_due(self, done: torch.Tensor) -> None:
        """The population rebuilt without the students that are done, when that pays."""
        if not self.rebuilds.due(self.population.students.depth, done):
            return
        with self.split("rebuilds"):
            old_students = self.population.students
            self.stepper.release()
            self.trainer = self.trainer.without(done)
            self.stepper = Stepper(self.trainer)
            self.build_seconds = 0.0
            self.population = self.trainer.population
            kept = self.population.students.matching_students(old_students)[1]
            self.recorder = self.recorder.without(self.population, kept)
        self.compiling = self.config.compile

    def checkpoint(self, step: int, checkpoints) -> None:
        with self.split("checkpoints"):
            checkpoints.save_checkpoint(
                {
                    "step": step,
                    "device_type": self.device.type,
                    "specs": [vars(s) for s in self.population.specs],
                    "finished": self.finished.state_dict(),
                    **self.trainer.state(),
                    **self.recorder.state(),
                }
            )

    def result(self) -> "TrainedPopulation":
        fresh = self.trainer.fresh
        return TrainedPopulation(
            self.finished, self.recorder.history, self.split.parts(fresh.labelling_seconds if fresh else 0.0)
        )


def checkpoint_device_type(saved: dict) -> str:
    """The device type whose generators' states a checkpoint's data streams are: kept in it, or,
    in a checkpoint from before, told by their size (a CPU generator's Mersenne Twister state is
    thousands of bytes, a CUDA generator's Philox seed and offset 16)."""
    if "device_type" in saved:
        return saved["device_type"]
    return "cpu" if len(saved["data_streams"][0]) == len(torch.Generator().get_state()) else "cuda"


def refuse_another_device_type(saved: dict, device: torch.device) -> None:
    """A checkpoint resumes only on the device type that wrote it: its data streams are that type's
    generator states, which another type's generators cannot take, and would not draw the same
    numbers from if they could."""
    written = checkpoint_device_type(saved)
    if written != device.type:
        raise ToymodelsError(
            f"the checkpoint at step {saved['step']} was written on a {written} device and cannot "
            f"resume on {device.type}: its random streams are {written} generators'; resume with "
            f"--device {written}, or start the run again on {device.type}"
        )


def train(
    protocol: SweepConfig | Protocol,
    job: Job | None = None,
    device: torch.device | None = None,
    on_evaluation=None,
    on_progress=None,
    checkpoints=None,
) -> TrainedPopulation:
    """Train the students of `job` (default: the whole sweep) of `protocol` (a config is resolved here).

    `on_evaluation(history)` receives every record so far after each evaluation (the run folder
    writes them to disk); `on_progress(step)` is called about 200 times over the run;
    `checkpoints` (with `load_checkpoint()` and `save_checkpoint(state)`, e.g. a run folder's
    job) is where training resumes from and saves to, every `config.checkpoint_every` steps.
    """
    protocol = Protocol.of(protocol)
    config = protocol.config
    job, device = job or Job.whole(protocol), device or protocol.device
    run = TrainingRun(protocol, job, device, checkpoints.load_checkpoint() if checkpoints else None, on_evaluation)
    evaluations = [s for s in evaluation_steps(config.steps, config.evals) if s > run.start]
    report_every = max(1, config.steps // 200)
    for step in range(run.start + 1, config.steps + 1):
        run.step(step)
        # judged before evaluating: a student that converges at an evaluation step gets one row, its converged one
        checked = config.converge and step % config.check_every == 0 and step < config.steps
        with run.split("plateau checks"):
            converged = run.trainer.check(step) if checked else None
        if step == evaluations[0]:
            evaluations.pop(0)
            run.evaluate(step)
        if checked and converged.any():  # one host sync per check, none per step
            run.record_converged(step, converged)
        if checked:
            done = run.trainer.done()  # now and before, in a compiled run that kept them
            if done.all():
                break
            run.rebuild_if_due(done)
        if checkpoints and step % config.checkpoint_every == 0 and step < config.steps:
            run.checkpoint(step, checkpoints)
        if on_progress and (step % report_every == 0 or step == config.steps):
            on_progress(step)
    else:
        run.finished.load_students(run.population.students)
    if on_progress:
        on_progress(config.steps)
    return run.result()
