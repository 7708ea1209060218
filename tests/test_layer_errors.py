"""The split of a student's output error into its layers' local errors (analysis.layer_errors)."""

import numpy as np
import pandas as pd
import pytest
import torch
from click.testing import CliRunner

from toymodels import resolve_config, run_sweep
from toymodels.analysis.layer_errors import (
    LayerErrorSplit,
    carried_to_end,
    even_boundaries,
    following_boundaries,
    split_errors,
)
from toymodels.cli.main import main
from toymodels.models.blocks import rmsnorm
from toymodels.models.losses import mse_per_model
from toymodels.models.students import StudentSpec
from toymodels.models.teachers import Flow, Teachers, teacher_flow
from toymodels.training.population import Population
from toymodels.training.protocol import Protocol

WIDTH, TEACHER_DEPTH, SAMPLES = 16, 32, 2048


def teacher(name: str):
    """One teacher of `name`: its flow and its states on fixed inputs (ℓ* + 1, samples, width)."""
    protocol = Protocol.of(
        resolve_config(
            "quick", teachers=[name], loss="mse", width=WIDTH, teacher_depth=TEACHER_DEPTH, replicates=1, device="cpu"
        )
    )
    inputs = torch.randn(1, SAMPLES, WIDTH, generator=torch.Generator().manual_seed(1))
    states = torch.stack(Teachers(protocol).hidden_states(inputs))[:, 0]
    return teacher_flow(protocol, name, 0), states


def identity_student(teacher_states, depth):
    """A student whose layers are all the same, zero: it never leaves its input."""
    return teacher_states[0].expand(depth + 1, -1, -1)


def perturbed_teacher_path(layers, teacher_states, depth, size, seed=0):
    """States s_{k+1} = Φ_k(s_k) + ξ_k, each ξ_k an independent random perturbation."""
    generator = torch.Generator().manual_seed(seed)
    boundaries = even_boundaries(depth, TEACHER_DEPTH)
    states = [teacher_states[0]]
    for k in range(depth):
        slot = Flow(
            type(layers.layers)(
                *(
                    w[boundaries[k] : boundaries[k + 1]]
                    for w in (layers.layers.w_in, layers.layers.b_in, layers.layers.w_out)
                )
            )
        )
        stepped = carried_to_end(slot, states[-1][None], torch.zeros(1, dtype=torch.long))[0]
        states.append(stepped + size * torch.randn(stepped.shape, generator=generator))
    return torch.stack(states)


@pytest.mark.parametrize("name", ["independent", "tied"])
@pytest.mark.parametrize("slots", ["even", "following"])
def test_the_split_sums_to_the_output_error(name, slots):
    layers, teacher_states = teacher(name)
    generator = torch.Generator().manual_seed(2)
    depth = 6  # does not divide ℓ* = 32: boundaries rounded to the nearest teacher step
    drift = 0.05 * torch.randn(depth, SAMPLES, WIDTH, generator=generator).cumsum(0)
    states = torch.cat([teacher_states[:1], teacher_states[even_boundaries(depth, TEACHER_DEPTH)[1:]] + drift])
    boundaries = (
        even_boundaries(depth, TEACHER_DEPTH) if slots == "even" else following_boundaries(states, teacher_states)
    )
    split = split_errors(layers, states, teacher_states, boundaries)
    exact = states[-1] - teacher_states[-1]
    assert split.errors.shape == (depth, SAMPLES, WIDTH)
    assert torch.allclose(split.output_error, exact, atol=2e-5)
    assert (split.output_error - exact).abs().max() < 1e-4 * exact.abs().max()


def test_slots_that_follow_the_student_find_the_teacher_steps_it_sits_on():
    _, teacher_states = teacher("tied")
    steps = torch.tensor([0, 2, 3, 9, 20, 21, TEACHER_DEPTH])  # uneven, as a trained student's
    assert following_boundaries(teacher_states[steps], teacher_states).tolist() == steps.tolist()
    assert even_boundaries(6, 32).tolist() == [0, 5, 11, 16, 21, 27, 32]


def test_identical_layers_align_their_errors_and_C_grows_with_depth():
    layers, teacher_states = teacher("tied")
    splits = {
        depth: split_errors(
            layers, identity_student(teacher_states, depth), teacher_states, even_boundaries(depth, TEACHER_DEPTH)
        )
        for depth in (2, 4, 8, 16)
    }
    coherences = [split.coherence() for split in splits.values()]
    # ≈ 0.89: aligned but for the flow's own turn between the first layer's error and the last's
    assert all(split.coherence() / split.aligned_bound() > 0.85 for split in splits.values())
    assert coherences == sorted(coherences) and coherences[-1] > 4 * coherences[0]
    assert all(0.8 * depth < split.coherence() <= split.aligned_bound() for depth, split in splits.items())


@pytest.mark.parametrize("name", ["independent", "tied"])
def test_independent_perturbations_add_like_independent_terms(name):
    layers, teacher_states = teacher(name)
    states = perturbed_teacher_path(layers, teacher_states, 8, size=1e-3)
    split = split_errors(layers, states, teacher_states, even_boundaries(8, TEACHER_DEPTH))
    assert split.coherence() == pytest.approx(1, abs=0.1)
    assert abs(split.lag_cosines()).max() < 0.05
    assert split.aligned_bound() > 6  # far from the aligned case


def test_the_untrained_discretised_student_of_a_tied_teacher_makes_smooth_errors():
    config = resolve_config(
        "quick",
        teachers=["tied"],
        loss="mse",
        teacher_depth=64,
        replicates=1,
        depths=[8, 16],
        test_batches=1,
        test_batch_size=1024,
        device="cpu",
    )
    population = Population(
        config, torch.device("cpu"), specs=[StudentSpec(0, 0, depth, "discretised") for depth in (8, 16)]
    )
    inputs = population.test_inputs
    teacher_states = torch.stack(population.teachers.hidden_states(inputs))[:, 0]
    layers = teacher_flow(population.protocol, "tied", 0)
    for spec, states in zip(population.specs, population.students.hidden_states(rmsnorm(inputs)[[0, 0]])):
        split = split_errors(layers, states, teacher_states, even_boundaries(spec.depth, 64))
        assert split.lag_cosines()[0] > 0.9  # measured ≈ 0.96 at ℓ 16 against ℓ* 128
        assert split.coherence() > 0.5 * spec.depth  # the Euler rule's errors add coherently


def test_a_split_of_errors_that_cancel_reads_as_cancelling():
    away = torch.randn(1, 100, 8)
    carried = torch.cat([torch.zeros_like(away), away, torch.zeros_like(away)])  # the second layer undoes the first
    split = LayerErrorSplit(carried, torch.arange(3), torch.zeros(3))
    assert split.coherence() == pytest.approx(0, abs=1e-6)
    assert split.lag_cosines()[0] == pytest.approx(-1)


@pytest.fixture(scope="module")
def two_start_run(tmp_path_factory):
    config = resolve_config(
        "quick",
        teachers=["independent", "tied"],
        loss="mse",
        depths=[2, 4],
        replicates=1,
        teacher_depth=8,
        steps=20,
        batch=32,
        test_batches=1,
        test_batch_size=128,
        evals=2,
        device="cpu",
        starts=["zero", "discretised"],
        save_students=True,
    )
    return run_sweep(config, tmp_path_factory.mktemp("split") / "run", progress=False).path


@pytest.mark.slow
def test_layer_errors_writes_tables_for_every_start_trained_and_untrained(two_start_run):
    result = CliRunner().invoke(main, ["layer-errors", str(two_start_run), "--samples", "64"])
    assert result.exit_code == 0, result.output
    out = two_start_run / "layer_errors"
    coherence = pd.read_csv(out / "coherence.csv")
    # 2 teachers × 2 depths × 2 starts, trained and untrained, each split two ways, in two spaces
    assert len(coherence) == 2 * 2 * 2 * 2 * 2 * 2
    assert set(coherence.training) == {"trained", "untrained"} and set(coherence.slots) == {"even", "following"}
    assert set(coherence.space) == {"state", "readout"}
    layers = pd.read_csv(out / "error_layers.csv")
    shares = layers.groupby(["teacher", "depth", "start", "training", "slots", "space"]).error_share.sum()
    assert shares.round(6).eq(1).all()
    assert (out / "layer_errors.png").stat().st_size > 1000
    assert "coherence_even" in result.stdout


def test_the_output_errors_exponent_is_the_local_errors_plus_the_coherences():
    from toymodels.analysis.layer_errors import error_exponents, split_tables

    layers, teacher_states = teacher("tied")
    keys = dict(teacher="tied", replicate=0, start="identity", training="untrained", space="state", slots="even")
    rows = [
        split_tables(
            split_errors(
                layers, identity_student(teacher_states, depth), teacher_states, even_boundaries(depth, TEACHER_DEPTH)
            ),
            {**keys, "depth": depth},
        )[0]
        for depth in (2, 4, 8, 16)
    ]
    [exponents] = error_exponents(pd.DataFrame(rows)).to_dict("records")
    assert exponents["alpha_output_error"] == pytest.approx(
        exponents["alpha_local_error_sum"] + exponents["alpha_coherence"]
    )
    # the identity's output error is the teacher's whole travel at every depth; its ℓ aligned pieces
    # shrink as 1/ℓ each, so Σ E‖E_k‖² ∝ 1/ℓ and C ∝ ℓ
    assert exponents["alpha_output_error"] == pytest.approx(0, abs=1e-6)
    assert exponents["alpha_coherence"] == pytest.approx(-1, abs=0.1)


def test_replicates_geometric_means_keep_the_exponents_adding_up():
    """Three replicates whose output errors, local error sums and C differ in scale and slope: the
    exponents of the replicates' means add up exactly (arithmetic means of the three would not)."""
    from toymodels.analysis.layer_errors import error_exponents

    depths = [6, 12, 24, 48]
    rows = []
    for replicate, (scale, slope, c_scale, c_slope) in enumerate(
        [(1.0, 2.0, 0.05, 0.3), (30.0, 2.6, 0.002, -0.2), (0.2, 1.5, 0.4, 0.9)]
    ):
        for depth in depths:
            local, coherence = scale * depth**-slope, c_scale * depth**-c_slope
            rows.append(
                dict(
                    teacher="tied",
                    replicate=replicate,
                    start="zero",
                    training="trained",
                    space="readout",
                    slots="even",
                    depth=depth,
                    local_error_sum=local,
                    coherence=coherence,
                    output_error=coherence * local,
                )
            )
    [exponents] = error_exponents(pd.DataFrame(rows)).to_dict("records")
    assert (
        abs(exponents["alpha_output_error"] - (exponents["alpha_local_error_sum"] + exponents["alpha_coherence"]))
        < 1e-9
    )
    # each is the replicates' mean slope, since every replicate's is a pure power law
    assert exponents["alpha_local_error_sum"] == pytest.approx((2.0 + 2.6 + 1.5) / 3, abs=1e-9)
    assert exponents["alpha_coherence"] == pytest.approx((0.3 - 0.2 + 0.9) / 3, abs=1e-9)
    arithmetic = pd.DataFrame(rows).groupby("depth")[["output_error", "local_error_sum", "coherence"]].mean()
    slope = {name: -np.polyfit(np.log(depths), np.log(arithmetic[name]), 1)[0] for name in arithmetic}
    assert abs(slope["output_error"] - slope["local_error_sum"] - slope["coherence"]) > 0.1  # the old means' gap


@pytest.mark.parametrize("name", ["independent", "tied"])
@pytest.mark.parametrize("size", [1e-3, 0.3])
def test_the_readout_split_sums_exactly_to_what_the_loss_sees(name, size):
    layers, teacher_states = teacher(name)
    states = perturbed_teacher_path(layers, teacher_states, 8, size=size, seed=3)
    split = split_errors(layers, states, teacher_states, even_boundaries(8, TEACHER_DEPTH))
    seen = split.seen_by_readout()
    exact = rmsnorm(states[-1]) - rmsnorm(teacher_states[-1])
    assert (seen.output_error - exact).abs().max() < 1e-5 * exact.abs().max()  # at any error size
    loss = mse_per_model(rmsnorm(states[-1])[None], rmsnorm(teacher_states[-1])[None])[0]
    assert seen.summary()["output_error"] / WIDTH == pytest.approx(float(loss), rel=1e-4)
    radial = LayerErrorSplit(
        split.carried * torch.linspace(0.5, 2, 9)[:, None, None], split.boundaries, split.boundary_distances
    )  # states moved along themselves: the read-out ...
    torch.testing.assert_close(radial.seen_by_readout().errors, seen.errors)  # ... does not see it
