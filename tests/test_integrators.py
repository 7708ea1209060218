"""Teachers and students as integrators that carry their own state (models/integrators.py): the
worked examples (a leapfrog and an RK4 student, a heavy-ball teacher) against independent
computations of the rules they claim to be."""

from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from toymodels import LayerWeights, ToymodelsError, register_teacher, resolve_config
from toymodels.analysis.layer_errors import carried_to_end
from toymodels.cli.main import main
from toymodels.models.blocks import euler_block, layer_field, rmsnorm
from toymodels.models.students import STUDENTS, Students, StudentSpec
from toymodels.models.teachers import Teachers, teacher_flow, tied
from toymodels.training.protocol import Protocol

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
WIDTH, TEACHER_DEPTH = 16, 64


def protocol(teacher="tied", student="euler"):
    return Protocol.of(
        resolve_config(
            "quick",
            teachers=[teacher],
            loss="mse",
            width=WIDTH,
            teacher_depth=TEACHER_DEPTH,
            replicates=1,
            device="cpu",
            student=student,
        )
    )


def inputs(samples=256, seed=0):
    return torch.randn(1, samples, WIDTH, generator=torch.Generator().manual_seed(seed))


def discretised(protocol, depths, dtype=torch.float32):
    """The untrained students of `depths` from the discretised start, and a lookup depth → index."""
    students = Students(protocol, [StudentSpec(0, 0, depth, "discretised") for depth in depths]).to(dtype)
    return students, {spec.depth: m for m, spec in enumerate(students.specs)}


def field(protocol, teacher="tied", dtype=torch.float32):
    """The teacher's vector field in the depth's unit time, written out: ℓ* × its layer's update."""
    layers = teacher_flow(protocol, teacher, 0).layers
    w_in, b_in, w_out = (w[0].to(dtype) for w in (layers.w_in, layers.b_in, layers.w_out))
    return lambda h: torch.relu(rmsnorm(h) @ w_in + b_in).square() @ w_out * TEACHER_DEPTH


def test_a_leapfrog_students_discretised_start_is_the_leapfrog_rule_on_the_teachers_field(registries):
    run = protocol(student=f"{EXAMPLES / 'leapfrog_student.py'}:leapfrog")
    assert run.architecture.order == 2
    depths = [3, 8, 16]
    students, index = discretised(run, depths)
    x = inputs()
    h0 = rmsnorm(x)
    with torch.no_grad():
        outputs = students(h0.expand(len(depths), -1, -1))
    states = students.hidden_states(h0.expand(len(depths), -1, -1))
    v, targets = field(run), Teachers(run).forward(x)[0]
    for depth in depths:
        dt, before, h = 1 / depth, h0[0], h0[0] + field(run)(h0[0]) / depth  # an Euler first step, then
        for _ in range(depth - 1):
            before, h = h, before + 2 * dt * v(h)  # h_{k+1} = h_{k−1} + 2Δ·f(h_k)
        m = index[depth]
        assert len(states[m]) == depth + 1 and torch.equal(states[m][-1], outputs[m])
        assert torch.allclose(outputs[m], h, atol=1e-5, rtol=1e-4)
        student_loss = (rmsnorm(outputs[m]) - targets).square().mean()
        rule_loss = (rmsnorm(h) - targets).square().mean()
        assert float(student_loss) == pytest.approx(float(rule_loss), rel=1e-3)
    losses = [float((rmsnorm(outputs[index[d]]) - targets).square().mean()) for d in depths]
    assert losses == sorted(losses, reverse=True)  # a finer leapfrog follows the teacher's flow more closely


def test_a_removed_layer_of_a_student_with_state_passes_its_whole_state(registries):
    run = protocol(student=f"{EXAMPLES / 'leapfrog_student.py'}:leapfrog")
    students, index = discretised(run, [6])
    h0 = rmsnorm(inputs())
    with students.without_layers({0: [2]}):
        removed = students.hidden_states(h0)[0]
    intact = students.hidden_states(h0)[0]
    assert torch.equal(removed[3], removed[2]) and torch.equal(removed[2], intact[2])
    # the state before the last passed too: layer 3 steps (h_1, h_2) as layer 2 did, and the
    # tied teacher's layers are all alike
    assert torch.allclose(removed[4], intact[3], atol=1e-6)
    assert not torch.allclose(removed[4], intact[4], atol=1e-4)


def error_slope(student: str, depths=(4, 8, 16, 32)) -> float:
    """How the error of `student`'s untrained discretisation falls with its depth (the slope of
    log error against log ℓ) on a smooth teacher: a field whose ReLU² units stay almost all active
    along the flow (biases shifted up, a shorter flow), against the flow solved finely."""

    @register_teacher("active")
    def active(depth, width, generator):
        layers = tied(depth, width, generator)
        return LayerWeights(layers.w_in, layers.b_in + 2, layers.w_out / 10)

    run = protocol(teacher="active", student=student)
    students, index = discretised(run, depths, torch.float64)
    h0 = rmsnorm(inputs().double())
    with torch.no_grad():
        outputs = students(h0.expand(len(depths), -1, -1))
    v, h, dt = field(run, "active", torch.float64), h0[0], 1 / 2048
    for _ in range(2048):  # the classical rule at 2 048 steps: the flow to far below the students' errors
        k1 = v(h)
        k2 = v(h + dt * k1 / 2)
        k3 = v(h + dt * k2 / 2)
        h = h + dt * (k1 + 2 * k2 + 2 * k3 + v(h + dt * k3)) / 6
    errors = [float((outputs[index[d]] - h).square().mean().sqrt()) for d in depths]
    return np.polyfit(np.log(depths), np.log(errors), 1)[0]


def test_an_rk4_students_untrained_discretisation_is_fourth_order_on_a_smooth_teacher(registries):
    run = protocol(student=f"{EXAMPLES / 'rk4_student.py'}:rk4")
    assert run.architecture.order == 4 and run.architecture.positions == (0, 0.5, 0.5, 1)
    assert error_slope(f"{EXAMPLES / 'rk4_student.py'}:rk4") == pytest.approx(-4, rel=0.1)


@pytest.mark.parametrize("theta", [0.0, 0.5])
def test_the_two_step_examples_untrained_rule_is_second_order_for_its_parameter(registries, theta):
    student = f"{EXAMPLES / 'ab2_student.py'}:ab2(theta={theta})"
    run = protocol(student=student)
    assert run.architecture.order == 2 and run.architecture.integrator.theta == theta
    assert error_slope(student) == pytest.approx(-2, rel=0.1)


@pytest.mark.parametrize(
    "value, problem", [("1.5", "theta must be between 0 and 1, got 1.5"), ("'x'", "theta must be"), ("", None)]
)
def test_a_students_parameter_outside_its_declaration_is_refused_in_one_line(tmp_path, value, problem):
    spec = (
        f"{EXAMPLES / 'ab2_student.py'}:ab2(theta={value})" if value else f"{EXAMPLES / 'ab2_student.py'}:ab2(beta=1)"
    )
    result = CliRunner().invoke(main, ["run", "--preset", "quick", "--student", spec, "--out", str(tmp_path / "run")])
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1, result.output
    assert (problem or "it takes no parameter 'beta'; it takes theta") in result.output
    assert not (tmp_path / "run").exists()


def test_a_student_with_stage_positions_that_do_not_fit_its_stages_is_refused(registries, tmp_path):
    plugin = tmp_path / "bad_positions.py"
    plugin.write_text(
        "from toymodels import register_student\nfrom toymodels.models.students import rk2_block\n"
        "register_student('bad', stages=2, stage_positions=(0, 0.5, 1))(rk2_block)\n"
    )
    result = CliRunner().invoke(
        main, ["run", "--preset", "quick", "--student", f"{plugin}:bad", "--out", str(tmp_path / "run")]
    )
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1, result.output
    assert "stage_positions must give each of its 2 MLPs a place" in result.output


def test_a_heavy_ball_teacher_without_inertia_is_the_tied_teacher_bit_for_bit(registries):
    name = f"{EXAMPLES / 'heavy_ball_teacher.py'}:heavy_ball"
    x = inputs(seed=3).expand(2, -1, -1)
    still = Protocol.of(
        resolve_config(
            "quick",
            teachers=["tied", f"{name}(inertia=0.0)"],
            loss="mse",
            width=WIDTH,
            teacher_depth=TEACHER_DEPTH,
            replicates=1,
            device="cpu",
        )
    )
    states = Teachers(still).hidden_states(x)
    assert all(torch.equal(state[0], state[1]) for state in states)  # the two instances, layer by layer
    rolling = Protocol.of(still.config.replace(teachers=["tied", f"{name}(inertia=0.5)"]))
    rolling_teachers = Teachers(rolling)
    moved = rolling_teachers.hidden_states(x)
    assert torch.equal(moved[-1][0], states[-1][0])  # the tied teacher beside it is untouched
    assert not torch.allclose(moved[-1][1], states[-1][1], atol=1e-3)
    # its states are h, the velocity's running sum: each layer's move keeps half the one before
    moves = [later[1] - earlier[1] for earlier, later in zip(moved, moved[1:])]
    push = (
        euler_block(
            moved[1][1][None],
            layer_field(
                *[w[1, 1][None, None] for w in (rolling_teachers.w_in, rolling_teachers.b_in, rolling_teachers.w_out)]
            ),
        )[0]
        - moved[1][1]
    )
    assert torch.allclose(moves[1], 0.5 * moves[0] + push, atol=1e-6)


def test_a_teacher_with_state_has_diagnostics_and_its_layer_error_split_is_refused_in_one_line(registries):
    run = Protocol.of(
        resolve_config(
            "quick",
            teachers=[f"{EXAMPLES / 'heavy_ball_teacher.py'}:heavy_ball"],
            loss="mse",
            width=WIDTH,
            teacher_depth=TEACHER_DEPTH,
            replicates=1,
            device="cpu",
        )
    )
    teachers = Teachers(run)
    states = teachers.hidden_states(inputs())
    assert len(states) == TEACHER_DEPTH + 1 and torch.equal(rmsnorm(states[-1]), teachers.forward(inputs()))
    flow = teacher_flow(run, run.config.teachers[0], 0)
    with pytest.raises(ToymodelsError, match="carries more than h"):
        carried_to_end(flow, torch.stack(states)[:, 0], torch.zeros(TEACHER_DEPTH + 1, dtype=torch.long))


def test_every_built_in_student_is_a_one_state_integrator_of_a_declared_order():
    from toymodels.cli.options import BUILT_IN_NAMES  # STUDENTS may hold a plug-in a committed run loaded

    for name in BUILT_IN_NAMES["student"]:
        architecture = STUDENTS[name]
        assert len(architecture.integrator.start(torch.zeros(1, 2, 3))) == 1, name
        assert architecture.order == (2 if name == "rk2" else 1), name


@pytest.mark.parametrize(
    "body, problem",
    [
        ("@dataclass(frozen=True)\nclass Idle(Integrator):\n    order = 1\n", "must define step(state, layer, field)"),
        (
            "@dataclass\nclass Loose(Integrator):\n    order = 1\n    def step(self, state, layer, field):\n"
            "        return state\n",
            "must be hashable (a @dataclass(frozen=True))",
        ),
        (
            "@dataclass(frozen=True)\nclass Flat(Integrator):\n    order = 1\n    def start(self, h0):\n"
            "        return (h0, h0[0])\n    def step(self, state, layer, field):\n        return state\n",
            "shaped (models, batch, width)",
        ),
    ],
)
def test_an_integrator_that_breaks_a_plugin_rule_is_refused_in_one_line(tmp_path, body, problem):
    plugin = tmp_path / "rule.py"
    name = body.split("class ")[1].split("(")[0]
    plugin.write_text(
        "from dataclasses import dataclass\nfrom toymodels import Integrator, register_student\n"
        f"{body}\nregister_student('broken')({name})\n"
    )
    result = CliRunner().invoke(
        main, ["run", "--preset", "quick", "--student", f"{plugin}:broken", "--out", str(tmp_path / "run")]
    )
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1, result.output
    assert problem in result.output and not (tmp_path / "run").exists()


def test_looking_up_a_plugin_leaves_the_registries_as_they_were():
    before = dict(STUDENTS)
    architecture = STUDENTS.lookup(f"{EXAMPLES / 'rk4_student.py'}:rk4")
    assert architecture.order == 4 and dict(STUDENTS) == before and "rk4" not in STUDENTS
