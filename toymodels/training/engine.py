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
loop: steps, evaluations, checks, racing, checkpoints. A checkpoint holds everything the remaining steps
depend on, so a resumed job finishes with the numbers an uninterrupted one would have.
"""

from dataclasses import dataclass, field

import pandas as pd
import torch

from ..config import SweepConfig
from ..models.students import Students, StudentSpec
from .jobs import Job
from .population import Population, resolve_device
from .protocol import Protocol
from .racing import RaceRule, mark_stopped
from .recording import MetricsRecorder, TimeSplit, evaluation_steps
from .stages import single_stage
from .trainer import Rebuilds, Trainer


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
