"""The stages of a run, each a run of its own in its own folder, all derived from the run's one
protocol, once, before anything is written or trained. `run_sweep` runs them in order; each is
resumable, and each one's wall time is recorded under its name in provenance.json.

- **pretrain** (`pretrain_loss`, in the run's `pretrain/` folder). A KL student of a
  low-temperature target trains slowly toward its best loss from the zero start and from the
  teacher's discretised flow alike: the peaked targets give the layers little to follow. The
  teacher's read-out states (MSE) do not, and a student trained on them is, read out at T, within
  a few per cent of the best KL student (fig4c's kl_bound.csv: 0.89–1.03× at ℓ ≥ 4). So the
  pretrain trains every student's layers on that loss, from `pretrain_starts`, to convergence,
  its students kept; the sweep's `trained` start takes them, at the rate a converged student
  ends at. The folder is where the run is, not part of the protocol (`SweepConfig.protocol`), so a
  run folder moved elsewhere still resumes.
- **sweep**: every start of every student, in the run's own folder.
- **polished** and **doubled** (`polish_batch`, `budget_doubling`; polish.py, certificates.py): each student's best
  start trained on at the polish batch, then again from the same start with twice the budget, in
  `polish/` and `polish_doubled/`, merged into the run's metrics as starts of their own.
- **rung_x<k>** (`budget_rungs`; results/ladder.py): the last stage (the polish, else the sweep)
  again from the same start at k times its budget, in `rung_x<k>/`. Not merged: the run's own fit is
  rung ×1's, and `toymodels ladder` reads the rungs side by side.
"""

from dataclasses import dataclass
from pathlib import Path

from ..config import pretrain_starts_in_place
from ..models.starts import TRAINED_START
from ..results.storage import RunFolder, default_run_path
from ..training.protocol import Protocol
from .polish import (
    DOUBLED_START,
    POLISHED_START,
    SECOND_DESCENTS,
    polish_folder,
    polished,
)

PRETRAIN, SWEEP = "pretrain", "sweep"
RUNG_PREFIX = "rung_x"  # a rung's stage name and folder: rung_x2, rung_x4, …
PRETRAIN_FOLDER = "pretrain"  # the first stage's own run, inside the run's folder


@dataclass(frozen=True)
class RunStage:
    name: str  # pretrain | sweep | polished | doubled | rung_x<k>: its key in provenance.json
    protocol: Protocol
    path: Path  # its run folder: the run's own (the sweep), or one inside it
    rehearsal: Protocol | None  # what `preflight` tries before the run writes anything; None: it starts
    #                             from the sweep's students, which do not exist yet
    announcement: str = ""  # the line the user reads when it starts

    def done(self, run: RunFolder) -> bool:
        """Whether `run` (the sweep's folder) holds this stage's results: its second descent merged,
        a rung its own folder finished, or (the sweep, and so the pretrain before it) the run finished."""
        if self.name in SECOND_DESCENTS:
            return polished(run, self.name)
        return RunFolder(self.path).finished() if self.name.startswith(RUNG_PREFIX) else run.finished()


def run_stages(protocol: Protocol, path=None) -> list[RunStage]:
    """The stages of the run of `protocol` in folder `path` (None: a new one, runs/<time>-<teacher>-<loss>),
    in order: [pretrain,] sweep[, polished[, doubled]][, rung_x<k> …]. The sweep's protocol is the
    run's own, its trained start taking the pretrain's students."""
    config = protocol.config
    path = default_run_path(config) if path is None else Path(path)
    stages = []
    if config.pretrain_loss is not None:
        pretrain = Protocol.of(config.stage(loss=config.pretrain_loss, starts=config.pretrain_starts, start_from=None))
        folder = (path / PRETRAIN_FOLDER).resolve()
        stages.append(
            RunStage(
                PRETRAIN,
                pretrain,
                folder,
                pretrain,
                f"pretrain: every student's layers trained on {config.pretrain_loss} from "
                f"{'/'.join(config.pretrain_starts)} until converged ({folder})",
            )
        )
        # the trained start reads a folder that does not exist yet: its rehearsal takes the pretrain's starts
        rehearsal = Protocol.of(config.stage(starts=pretrain_starts_in_place(config), start_from=None))
        protocol = protocol.replace(start_from=str(folder))
        stages.append(RunStage(SWEEP, protocol, path, rehearsal))
    else:
        stages.append(RunStage(SWEEP, protocol, path, protocol))
    last = protocol
    if config.polish_batch:
        last = polish = protocol.stage(
            starts=(TRAINED_START,), start_from=str(path.resolve()), batch=config.polish_batch
        )
        descents = [(POLISHED_START, polish, "its budget")]
        if config.budget_doubling:  # from the same start, every plateau window and the step cap twice as long
            doubled = polish.replace(check_every=2 * config.check_every, steps=2 * config.steps)
            descents.append((DOUBLED_START, doubled, "twice its budget"))
        for start, descent, length in descents:
            folder = polish_folder(RunFolder(path), start)
            stages.append(
                RunStage(
                    start,
                    descent,
                    folder,
                    None,
                    f"{start}: every student's best start trained on at "
                    f"batch {config.polish_batch}, {length} ({folder})",
                )
            )
    for rung, depths in config.rung_depths().items():
        # from the same start (a pretrain's students, read by the trained start, are not trained again);
        # a plateau test's windows stretch with the budget
        longer = last.stage(
            steps=rung * config.steps,
            depths=depths,
            check_every=rung * config.check_every if config.converge else config.check_every,
        )
        folder = path / f"{RUNG_PREFIX}{rung}"
        stages.append(
            RunStage(
                f"{RUNG_PREFIX}{rung}",
                longer,
                folder,
                None,
                f"rung ×{rung} of the budget ladder: the {'polish' if config.polish_batch else 'sweep'} "
                f"again at {rung}× its budget{depth_note(config, depths)} ({folder})",
            )
        )
    return stages


def depth_note(config, depths: tuple[int, ...]) -> str:
    """ ", at ℓ ≤ 24 only" where a rung trains fewer depths than the run."""
    return "" if depths == config.depths else f", at ℓ ≤ {max(depths)} only"
