"""The certified preset and its pretrain: `toymodels run`'s default names the regime."""

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from toymodels import resolve_config, run_sweep
from toymodels.api import fit_run
from toymodels.cli.main import main
from toymodels.config import PRESETS
from toymodels.errors import ToymodelsError
from toymodels.results.storage import RunFolder
from toymodels.training.protocol import Protocol
from toymodels.workflows.stages import PRETRAIN_FOLDER, run_stages


def certified_miniature(**changes):
    """The certified preset's stages on tiny teachers (depth 32, width 16): seconds, not minutes."""
    return resolve_config(
        "certified",
        depths=[2, 4, 8],
        teacher_depth=32,
        width=16,
        vocab=16,
        batch=64,
        test_batches=2,
        test_batch_size=256,
        check_every=20,
        steps=4000,
        evals=8,
        device="cpu",
        **changes,
    )


@pytest.fixture(scope="module")
def certified_run(tmp_path_factory):
    path = tmp_path_factory.mktemp("certified") / "run"
    return run_sweep(certified_miniature(teachers=["independent", "tied"]), path, progress=False)


def test_run_defaults_to_the_certified_preset_and_the_smoke_test_keeps_its_name():
    run = main.get_command(None, "run")  # loaded as `toymodels run` loads it
    assert next(p for p in run.params if p.name == "preset").default == "certified"
    assert PRESETS["certified"].converge and PRESETS["certified"].pretrain_loss == "mse"
    assert not PRESETS["quick"].converge  # the smoke test: a minute, never a certificate


@pytest.mark.slow
def test_the_certified_stages_name_both_regimes_with_every_student_certified(certified_run):
    fits = {(fit.teacher, fit.temperature): fit for fit in fit_run(certified_run.path)}
    assert len(fits) == 4
    assert all(fit.certified for fit in fits.values())
    for (teacher, _), fit in fits.items():
        assert fit.regime == {"independent": "ensemble", "tied": "procedural"}[teacher], fit
    summary = (certified_run.path / RunFolder.FIT_TXT).read_text()
    assert "not certified" not in summary and "layers first trained on mse from discretised" in summary


@pytest.mark.slow
def test_the_pretrain_is_a_run_of_its_own_whose_students_the_trained_start_takes(certified_run):
    pretrain = RunFolder.open(certified_run.path / PRETRAIN_FOLDER)
    assert pretrain.finished() and (pretrain.path / RunFolder.STUDENTS).is_file()
    assert pretrain.config().loss == "mse" and pretrain.config().starts == ("discretised",)
    assert set(pretrain.metrics().start) == {"discretised"}
    assert pretrain.metrics().temperature.isna().all()  # one student per teacher and depth, for every T
    config = certified_run.config()
    assert config.start_from == str(pretrain.path.resolve()) and config.pretrain_loss == "mse"
    assert set(certified_run.metrics().start) == {"trained"}
    first = (
        certified_run.metrics().sort_values("step").groupby(["teacher", "replicate", "depth", "temperature"]).first()
    )
    assert (first.test_loss < first.reference_loss).all()  # from the pretrained layers, below the discretisation


@pytest.mark.slow
def test_a_moved_run_folder_resumes_with_its_own_pretrain(certified_run, tmp_path):
    moved = tmp_path / "moved"
    shutil.copytree(certified_run.path, moved)
    again = run_sweep(certified_run.config(), moved, progress=False)  # the same protocol: reused, nothing trained
    assert again.config().start_from == str(certified_run.config().start_from)
    pd.testing.assert_frame_equal(again.metrics(), certified_run.metrics())


def test_the_pretrain_feeds_only_the_trained_start_of_another_loss():
    assert resolve_config("certified").starts == ("trained",)
    mse = resolve_config("certified", loss="mse")  # the pretrain is the sweep itself: its starts train directly
    assert (mse.starts, mse.pretrain_loss) == (("discretised",), None)
    zero = resolve_config("certified", starts=["zero"])  # nothing to feed
    assert (zero.starts, zero.pretrain_loss) == (("zero",), None)
    both = resolve_config("certified", starts=["zero", "trained"], pretrain_starts=["zero", "discretised"])
    assert both.pretrain_loss == "mse"
    pretrain, sweep = run_stages(Protocol.of(both), "run")
    assert [stage.rehearsal.config.starts for stage in (pretrain, sweep)] == [("zero", "discretised")] * 2
    first = pretrain.protocol.config
    assert (first.loss, first.pretrain_loss, first.start_from, first.save_students) == ("mse", None, None, True)
    assert sweep.protocol.config.start_from == str(pretrain.path) == str(Path("run", PRETRAIN_FOLDER).resolve())


def test_a_pretrain_outside_a_run_to_convergence_is_one_clear_line():
    with pytest.raises(ToymodelsError, match="give --converge"):
        PRESETS["certified"].replace(converge=False)
    result = CliRunner().invoke(main, ["run", "--pretrain-start", "trained", "--out", "unused"])
    assert result.exit_code == 2 and "pretrain starts must be" in result.output


def test_a_bad_pretrain_loss_is_refused_before_anything_is_written(tmp_path):
    result = CliRunner().invoke(main, ["run", "--pretrain-loss", "nonsense", "--out", str(tmp_path / "run")])
    assert result.exit_code == 2 and "nonsense" in result.output
    assert not (tmp_path / "run").exists()


def test_the_smoke_preset_says_it_is_not_certified(tmp_path):
    config = resolve_config(
        "quick",
        depths=[1, 2, 3],
        replicates=2,
        teacher_depth=8,
        steps=30,
        batch=32,
        test_batches=2,
        test_batch_size=64,
        evals=5,
        device="cpu",
    )
    folder = run_sweep(config, tmp_path / "smoke", progress=False)
    summary = (folder.path / RunFolder.FIT_TXT).read_text()
    assert "not certified" in summary and "--pretrain-loss mse --start trained" in summary
    assert json.loads((folder.path / RunFolder.CONFIG).read_text())["converge"] is False
