"""The pretrain: a first descent of every student's layers on another loss (`pretrain_loss`).

A KL student of a low-temperature target trains slowly toward its best loss from the zero start
and from the teacher's discretised flow alike: the peaked targets give the layers little to
follow. The teacher's read-out states (MSE) do not, and a student trained on them is, read out at
T, within a few per cent of the best KL student (fig4c's kl_bound.csv: 0.89–1.03× at ℓ ≥ 4). So a
sweep with `pretrain_loss` first trains every student's layers on that loss, from
`pretrain_starts`, to convergence, as a run of its own in the run's `pretrain/` folder (resumable,
its students kept); the sweep itself then trains from them: the `trained` start, with
`start_from` that folder, at the rate a converged student ends at.

The sweep's config records the folder (`with_pretrain`); it is where the run is, not part of the
protocol (`SweepConfig.protocol`), so a run folder moved elsewhere still resumes.
"""

import dataclasses
from pathlib import Path

from .config import SweepConfig, pretrain_starts_in_place, validate

PRETRAIN_FOLDER = "pretrain"  # the first stage's own run, inside the run's folder


def pretrain_folder(run) -> Path:
    return (Path(run) / PRETRAIN_FOLDER).resolve()


def with_pretrain(config: SweepConfig, run) -> SweepConfig:
    """`config` with its trained start taking the pretrain of the run in folder `run` (unchanged
    without a pretrain): a run's pretrain is its own, wherever the config came from."""
    if config.pretrain_loss is None:
        return config
    return config.replace(start_from=str(pretrain_folder(run)))


def pretrain_config(config: SweepConfig) -> SweepConfig:
    """The first stage of `config`: its pretrain loss from its pretrain starts, to convergence, on
    the sweep's samples, the students kept for the trained start; no second descents."""
    return validate(dataclasses.replace(config, loss=config.pretrain_loss, starts=config.pretrain_starts,
                                        pretrain_loss=None, start_from=None, polish_batch=0, budget_doubling=False,
                                        save_students=True))


def checked_stages(config: SweepConfig) -> list[SweepConfig]:
    """What `preflight` checks before a run of `config` writes anything: the sweep itself, or with a
    pretrain, the pretrain and the sweep with the pretrain's starts in place of the trained start
    (which reads a folder that does not exist yet; its students are of the same architecture)."""
    if config.pretrain_loss is None:
        return [config]
    return [pretrain_config(config), validate(dataclasses.replace(config, starts=pretrain_starts_in_place(config),
                                                                  pretrain_loss=None, start_from=None))]
