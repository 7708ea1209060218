import numpy as np
import pandas as pd
import pytest
import torch
from click.testing import CliRunner

from toymodels.analysis.diagnostics import (
    angular_distance,
    effective_layers,
    layer_profile,
    trajectory_groups,
)
from toymodels.cli.main import main
from toymodels.config import SweepConfig
from toymodels.models.teachers import Teachers
from toymodels.training.protocol import Protocol


@pytest.fixture(scope="module")
def teacher_profiles():
    teachers = Teachers(
        Protocol.of(
            SweepConfig().replace(
                teachers=["independent", "tied"], replicates=1, teacher_depth=128, width=32, vocab=128
            )
        )
    )
    states = torch.stack(teachers.hidden_states(torch.randn(2, 1024, 32, generator=torch.Generator().manual_seed(3))))
    return [layer_profile(s) for s in states.unbind(1)]


@pytest.mark.parametrize(
    "index, update_angle, rotation, end_angle",
    [
        (0, (1.54, 1.60), (0.018, 0.022), (0.20, 0.26)),  # independent: orthogonal updates, a random walk
        (1, (0.008, 0.014), (0.008, 0.012), (1.10, 1.25)),  # tied: a smooth flow
    ],
)
def test_teacher_diagnostics_match_the_spec(teacher_profiles, index, update_angle, rotation, end_angle):
    profile = teacher_profiles[index]
    assert update_angle[0] < profile.update_angle.mean() < update_angle[1]
    assert rotation[0] < profile.rotation.mean() < rotation[1]
    assert end_angle[0] < profile.angle_to_end[0] < end_angle[1]
    assert profile.progress.iloc[0] == pytest.approx(0) and profile.progress.iloc[-1] == pytest.approx(1)
    assert profile.angle_to_end.iloc[-1] == pytest.approx(0, abs=1e-3)


def test_angular_distance_is_a_distance_matrix():
    states = torch.randn(6, 50, 8).cumsum(0)
    matrix = angular_distance(states)
    assert matrix.shape == (6, 6)
    assert np.allclose(np.diag(matrix), 0, atol=1e-3) and np.allclose(matrix, matrix.T, atol=1e-6)
    assert (matrix >= 0).all() and (matrix <= 1).all()


def test_effective_layers_counts_contributing_layers():
    even = torch.randn(1, 20, 8) + torch.arange(9.0).view(9, 1, 1) * torch.ones(1, 20, 8)
    assert effective_layers(even) == pytest.approx(8)
    one_jump = torch.cat([torch.zeros(5, 20, 8), torch.ones(4, 20, 8)])
    assert effective_layers(one_jump) == pytest.approx(1)


def test_trajectory_groups_find_an_early_exit_minority():
    rng = torch.Generator().manual_seed(0)
    width, layers = 16, 12
    evenly = torch.randn(1, 900, width, generator=rng).repeat(layers + 1, 1, 1)
    evenly += 0.05 * torch.randn(layers + 1, 900, width, generator=rng).cumsum(0)
    early = torch.randn(1, 100, width, generator=rng).repeat(layers + 1, 1, 1)
    early[1:3] += 2.0 * torch.randn(2, 100, width, generator=rng)
    early[3:] = early[2]
    groups = trajectory_groups(torch.cat([evenly, early], 1))
    assert groups.share.tolist() == pytest.approx([0.9, 0.1], abs=0.02)
    assert groups.rotation_centre[1] < 0.3 < groups.rotation_centre[0]


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("diagnose") / "run"
    result = CliRunner().invoke(
        main,
        [
            "run",
            "--preset",
            "quick",
            "--teacher",
            "independent,tied",
            "--loss",
            "mse",
            "--depths",
            "2,4",
            "--teacher-depth",
            "8",
            "--steps",
            "30",
            "--batch",
            "32",
            "--replicates",
            "1",
            "--device",
            "cpu",
            "--save-students",
            "--quiet",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    return out


@pytest.mark.slow
def test_diagnose_writes_tables_and_figures(trained_run):
    result = CliRunner().invoke(main, ["diagnose", str(trained_run), "--samples", "64"])
    assert result.exit_code == 0, result.output
    out = trained_run / "diagnostics"
    networks = pd.read_csv(out / "networks.csv")
    assert len(networks) == 2 + 4  # two teachers, four students
    students = networks[networks.network == "student"]
    assert students.middle_drop_increase.notna().all()
    drop = pd.read_csv(out / "drop_one.csv")
    assert len(drop) == 2 * (2 + 4)  # every layer of every student removed once
    for name in ("layer_angles", "rotation_vs_depth", "angular_distance", "layer_drop", "effective_layers"):
        assert (out / f"{name}.png").stat().st_size > 1000
    assert "middle_update_angle" in result.stdout


@pytest.mark.parametrize("command", ["diagnose", "layer-errors"])
def test_an_analysis_of_a_run_without_saved_students_is_one_line_and_changes_nothing(tmp_path, trained_run, command):
    bare = tmp_path / "bare"
    bare.mkdir()
    for name in ("config.json", "metrics.csv"):
        (bare / name).write_bytes((trained_run / name).read_bytes())
    before = {path: path.stat().st_mtime_ns for path in bare.rglob("*")}
    result = CliRunner().invoke(main, [command, str(bare)])
    assert result.exit_code == 2 and "--save-students" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert {path: path.stat().st_mtime_ns for path in bare.rglob("*")} == before


@pytest.mark.slow
def test_a_run_with_two_starts_is_diagnosed_on_the_best_start_of_each_student(tmp_path):
    from toymodels import resolve_config, run_sweep
    from toymodels.analysis.diagnostics import load_trained

    config = resolve_config(
        "quick",
        teachers=["tied"],
        loss="mse",
        depths=[2, 3],
        replicates=2,
        teacher_depth=6,
        steps=8,
        batch=16,
        test_batches=1,
        test_batch_size=64,
        evals=2,
        device="cpu",
        starts=["zero", "discretised"],
        save_students=True,
    )
    folder = run_sweep(config, tmp_path / "run", progress=False)
    population = load_trained(folder)
    metrics = folder.metrics()
    last = metrics[metrics.step == 8]
    assert len(population.specs) == 4  # one of the two starts of each (replicate, depth)
    for spec in population.specs:
        rows = last[(last.replicate == spec.instance) & (last.depth == spec.depth)]
        assert rows.set_index("start").test_loss.idxmin() == spec.start
    measured = population.test_losses().tolist()
    expected = [
        last[(last.replicate == s.instance) & (last.depth == s.depth) & (last.start == s.start)].test_loss.item()
        for s in population.specs
    ]
    assert measured == pytest.approx(expected, rel=1e-5)  # the trained weights, not fresh ones
    from toymodels.analysis.diagnostics import network_keys

    students = [key for key in network_keys(population) if key["network"] == "student"]
    assert [key["start"] for key in students] == [s.start for s in population.specs]  # the tables name it


@pytest.mark.slow
def test_converged_students_test_within_the_noise_of_their_training_loss(tmp_path):
    from toymodels import resolve_config, run_sweep
    from toymodels.analysis.diagnostics import test_set_noise

    config = resolve_config(
        "quick",
        teachers=["independent"],
        loss="mse",
        depths=[1, 2],
        replicates=2,
        teacher_depth=6,
        steps=1500,
        batch=32,
        test_batches=2,
        test_batch_size=256,
        evals=3,
        device="cpu",
        converge=True,
        check_every=25,
        patience=4,
        decays=1,
        schedule="constant",
        save_students=True,
    )
    noise = test_set_noise(run_sweep(config, tmp_path / "run", progress=False), chunk=16)
    assert len(noise) == 4  # every student converged, each measured once (its best start)
    assert (noise.test_se > 0).all()
    # the window saw 25 × 32 = 800 samples, the test set 512: its mean is the less noisy one
    assert noise.train_se.to_numpy() == pytest.approx(noise.test_se.to_numpy() * (512 / 800) ** 0.5)
    # fresh samples: test and train estimate one loss, so they differ by the noise alone
    assert (noise.z.abs() < 4).all(), noise[["depth", "train_loss", "test_loss", "test_se", "z"]]
