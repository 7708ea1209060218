"""New teacher dynamics, student architectures and the plug-in path for users' own teachers."""

import math
from pathlib import Path

import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from click.testing import CliRunner

from toymodels import ToymodelsError
from toymodels.analysis.diagnostics import layer_profile
from toymodels.cli.main import main
from toymodels.config import SweepConfig
from toymodels.models.blocks import rmsnorm
from toymodels.models.students import STUDENTS, Students, StudentSpec
from toymodels.models.teachers import Teachers, teacher_dynamics
from toymodels.training.protocol import Protocol

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "custom_teacher.py"


def teacher_statistics(spec):
    teachers = Teachers(
        Protocol.of(SweepConfig().replace(teachers=[spec], replicates=1, teacher_depth=128, width=32, vocab=128))
    )
    states = torch.stack(teachers.hidden_states(torch.randn(1, 1024, 32, generator=torch.Generator().manual_seed(5))))[
        :, 0
    ]
    profile = layer_profile(states)
    return profile.update_angle.mean(), F.mse_loss(rmsnorm(states[0]), rmsnorm(states[-1])).item()


@pytest.mark.parametrize(
    "spec, update_angle, identity_mse",
    [
        ("correlated(rho=0)", (1.54, 1.60), (0.045, 0.06)),  # = independent
        ("correlated(rho=1)", (0.008, 0.014), (1.1, 1.35)),  # = tied
    ],
)
def test_correlated_teacher_interpolates_the_papers_two(spec, update_angle, identity_mse):
    angle, mse = teacher_statistics(spec)
    assert update_angle[0] < angle < update_angle[1]
    assert identity_mse[0] < mse < identity_mse[1]


def test_correlation_orders_the_update_angle():
    angles = [teacher_statistics(f"correlated(rho={rho})")[0] for rho in (0.0, 0.5, 0.9, 1.0)]
    assert angles == sorted(angles, reverse=True)


def test_correlated_rho_one_and_grouped_one_group_are_tied():
    for spec in ("correlated(rho=1)", "grouped(groups=1)"):
        weights = teacher_dynamics(spec)(16, 8, torch.Generator().manual_seed(0))
        assert torch.allclose(weights.w_in[0], weights.w_in[-1]) and torch.allclose(weights.w_out[3], weights.w_out[9])


def test_grouped_teacher_is_tied_inside_groups_and_independent_across():
    weights = teacher_dynamics("grouped(groups=4)")(16, 8, torch.Generator().manual_seed(0))
    assert torch.equal(weights.w_in[0], weights.w_in[3]) and not torch.equal(weights.w_in[3], weights.w_in[4])


def test_smooth_teacher_varies_smoothly_and_keeps_the_scale():
    weights = teacher_dynamics("smooth(anchors=4)")(128, 32, torch.Generator().manual_seed(0))
    steps = (weights.w_in[1:] - weights.w_in[:-1]).norm(dim=(1, 2))
    assert steps.max() < 0.1 * weights.w_in[0].norm()  # neighbouring layers are close...
    assert (weights.w_in[0] - weights.w_in[-1]).norm() > weights.w_in[0].norm()  # ...the ends are not
    scales = weights.w_in.std(dim=(1, 2))
    assert scales.min() > 0.9 * scales.max()


@pytest.mark.parametrize(
    "spec, message",
    [
        ("correlated(rho=2)", "rho must be between 0 and 1, got 2"),
        ("smooth(anchors=9)", "anchors must be at most the teacher's depth 8, got 9"),
        ("grouped(groups=1.5)", "groups must be a whole number, got 1.5"),
        ("correlated(sigma=1)", "unexpected keyword argument 'sigma'"),
        ("correlated(rho=x)", "is not key=number"),
        ("nope.py:f", "cannot load teacher"),
    ],
)
def test_bad_teacher_specs_are_clear_errors(spec, message):
    with pytest.raises(ToymodelsError, match=message.replace("[", r"\[").replace("]", r"\]")):
        Teachers(Protocol.of(SweepConfig().replace(teachers=[spec], replicates=1, teacher_depth=8, width=8, vocab=16)))


def test_lns_scales_the_normalised_input_of_block_l_by_one_over_sqrt_l():
    lns = STUDENTS["lns"]
    assert [lns.norm_scale(layer) for layer in range(4)] == pytest.approx([1, 1 / math.sqrt(2), 1 / math.sqrt(3), 0.5])
    students = Students(Protocol.of(SweepConfig().replace(student="lns", width=8, loss="mse")), [StudentSpec(0, 0, 3)])
    h0 = rmsnorm(torch.randn(1, 4, 8))
    assert torch.equal(students(h0), h0)  # zero output projections: still the identity at start


def test_branch_multipliers_and_their_learning_rate_corrections():
    depth = torch.tensor([4.0, 16.0])
    mup, ode = STUDENTS["depth-mup"], STUDENTS["ode"]
    assert mup.branch_scale(depth).flatten().tolist() == pytest.approx([0.5, 0.25])
    assert ode.branch_scale(depth).flatten().tolist() == pytest.approx([0.25, 1 / 16])
    assert mup.lr_multiplier(depth).tolist() == pytest.approx([0.5, 0.25]) and ode.lr_multiplier(
        depth
    ) == pytest.approx(1)


def test_scaled_init_starts_away_from_the_identity_with_shrinking_projections():
    students = Students(
        Protocol.of(SweepConfig().replace(student="scaled-init", width=8, loss="mse")),
        [StudentSpec(0, 0, d) for d in (2, 32)],
    )
    deep, shallow = students.w_out[0], students.w_out[students.active[0] - 1]  # layer 0 of depth 32 and of depth 2
    assert deep.abs().max() < shallow.abs().max()
    assert deep.abs().max() <= 1 / math.sqrt(32) / math.sqrt(64) + 1e-7
    h0 = rmsnorm(torch.randn(2, 4, 8))
    assert not torch.allclose(students(h0), h0)


@pytest.mark.parametrize("student", sorted(STUDENTS))
def test_every_architecture_trains_from_the_cli(student, tmp_path):
    result = CliRunner().invoke(
        main,
        [
            "run",
            "--preset",
            "quick",
            "--student",
            student,
            "--teacher",
            "tied",
            "--loss",
            "mse",
            "--depths",
            "1,2",
            "--teacher-depth",
            "8",
            "--steps",
            "40",
            "--batch",
            "16",
            "--replicates",
            "1",
            "--lr",
            "0.01",
            "--device",
            "cpu",
            "--quiet",
            "--out",
            str(tmp_path / student),
        ],
    )
    assert result.exit_code == 0, result.output
    assert (tmp_path / student / "students.pt").is_file()  # small: kept by default
    metrics = pd.read_csv(tmp_path / student / "metrics.csv")
    first, last = (metrics[metrics.step == s].test_loss.to_numpy() for s in (metrics.step.min(), metrics.step.max()))
    assert (last < first).all()


def test_a_users_own_teacher_file_runs_through_the_cli(tmp_path):
    spec = f"{EXAMPLE}:drifting(memory=0.5)"
    result = CliRunner().invoke(
        main,
        [
            "run",
            "--preset",
            "quick",
            "--teacher",
            f"{spec},tied",
            "--loss",
            "mse",
            "--depths",
            "1,2",
            "--teacher-depth",
            "8",
            "--steps",
            "20",
            "--batch",
            "16",
            "--replicates",
            "1",
            "--device",
            "cpu",
            "--quiet",
            "--out",
            str(tmp_path / "own"),
        ],
    )
    assert result.exit_code == 0, result.output
    metrics = pd.read_csv(tmp_path / "own" / "metrics.csv")
    assert set(metrics.teacher) == {spec, "tied"}  # the data name it whole; the table by its own name
    rows = [
        line.split()[0]
        for line in result.output.splitlines()
        if line.split()[:1] in (["drifting(memory=0.5)"], ["tied"])
    ]
    assert rows == ["drifting(memory=0.5)", "tied"] and str(EXAMPLE) not in result.output.splitlines()[1]


def test_help_names_every_teacher_and_student():
    text = "".join(CliRunner().invoke(main, ["run", "--help"]).stdout.split())  # undo line wrapping
    from toymodels.cli.options import BUILT_IN_NAMES  # STUDENTS may hold a plug-in a committed run loaded

    for name in (*BUILT_IN_NAMES["teacher"], *BUILT_IN_NAMES["student"]):
        assert name in text, name
