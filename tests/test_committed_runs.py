"""A committed run is what `reproduce` gives today: a cut-down job of its own config (the students
whose random streams a re-keying redrew, trained one step) gives the committed metrics' first
evaluation of those students, to float precision (the committed run was compiled, this is eager).
Three of the re-runs, the headline regimes and fig3b and teacher24, hold it here (fig4c, rk2 and fig5
passed the same check when they were committed; each case costs seconds of the suite's budget)."""

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from toymodels import run_sweep
from toymodels.results.storage import RunFolder
from toymodels.workflows.experiment import Experiment

pytestmark = pytest.mark.slow  # a one-step job of a committed protocol

FIGURES = Path(__file__).resolve().parent.parent / "figures"
KEYS = ["teacher", "replicate", "temperature", "depth", "start"]


def first_evaluation(metrics: pd.DataFrame) -> pd.DataFrame:
    first = metrics[metrics.step == metrics.step.min()]
    return first.sort_values(KEYS, ignore_index=True)[[*KEYS, "step", "train_loss", "test_loss"]]


@pytest.mark.parametrize(
    "name, cut",
    [
        ("regimes", dict(teachers=["tied"], depths=[4, 8], starts=["zero"])),
        ("fig3b", dict(temperatures=[0.215, 1.0], depths=[4, 8], starts=["zero"])),
        ("teacher24", dict(teachers=["tied"], depths=[4, 8], starts=["zero"])),
    ],
)
def test_a_cut_down_job_of_a_rerun_gives_its_committed_first_evaluation(name, cut, tmp_path):
    folder = RunFolder.open(FIGURES / name / "cpu")
    assert folder.provenance().get("sessions"), f"{name} predates provenance: not re-run"
    own = Experiment.load(name).config("cpu")  # `replace` keeps a field given None: the trained start's run goes here
    config = dataclasses.replace(own, start_from=None, starts=tuple(cut.pop("starts"))).replace(
        **cut, steps=1, compile=False, device="cpu"
    )
    mine = first_evaluation(RunFolder.open(run_sweep(config, tmp_path / name, progress=False).path).metrics())
    committed = first_evaluation(folder.metrics())
    committed = committed.merge(mine[KEYS], on=KEYS)  # the rows the cut-down job covers
    assert (
        len(committed)
        == len(mine)
        == 3 * len(config.temperatures if "temperatures" in cut else [0]) * len(cut["depths"])
    )
    np.testing.assert_allclose(mine[["train_loss", "test_loss"]], committed[["train_loss", "test_loss"]], rtol=1e-5)
