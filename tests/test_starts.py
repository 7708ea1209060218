"""Starts and certificates: the `discretised` start is the teacher's own flow in ℓ steps (checked
against the Euler and midpoint rules written out here), and a student is certified only when
nothing its architecture reached on the same teacher beats it by more than 10 %."""

import math
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import torch

from toymodels import resolve_config, run_sweep
from toymodels.errors import ToymodelsError
from toymodels.models.blocks import mlp, rmsnorm
from toymodels.models.students import StudentSpec
from toymodels.models.teachers import teacher_flow, teacher_head
from toymodels.plotting.fit_figures import plot_step_mismatch
from toymodels.results.certification import GAP_TOLERANCE, certify
from toymodels.results.depth_fit import DepthFit
from toymodels.results.exponents import mismatch_constant
from toymodels.results.fitting import fit_depth_exponents
from toymodels.results.storage import RunFolder
from toymodels.training.engine import train
from toymodels.training.population import Population
from toymodels.training.protocol import Protocol
from toymodels.training.trainer import Trainer

TEACHER_DEPTH = 12


def config_for(student="euler", teacher="tied", loss="mse", **changes):
    settings = dict(
        temperatures=[0.5],
        depths=[1, 2, 3, 4, 6, 12],
        replicates=1,
        teacher_depth=TEACHER_DEPTH,
        test_batches=1,
        test_batch_size=256,
        device="cpu",
    )
    return resolve_config("quick", teachers=[teacher], student=student, loss=loss, **{**settings, **changes})


def discretised_readouts(config, depths, x):
    """Read-outs rmsnorm(h_ℓ) of discretised students of `depths` on inputs x (batch, width)."""
    population = Population(config, torch.device("cpu"), specs=[StudentSpec(0, 0, d, "discretised") for d in depths])
    readouts = rmsnorm(population.students(rmsnorm(x).expand(len(depths), *x.shape)))
    return {spec.depth: readouts[m] for m, spec in enumerate(population.specs)}, population


def field(layers, k, h):
    """Teacher layer k's update at h (output projection × 1/√ℓ* included)."""
    return mlp(rmsnorm(h)[None], layers.w_in[k : k + 1], layers.b_in[k : k + 1], layers.w_out[k : k + 1])[0]


@pytest.mark.parametrize("teacher", ["tied", "independent", "smooth(anchors=3)"])
def test_a_discretised_student_as_deep_as_its_teacher_is_the_teacher(teacher):
    config = config_for(teacher=teacher)
    x = torch.randn(256, config.width, generator=torch.Generator().manual_seed(1))
    readouts, population = discretised_readouts(config, [TEACHER_DEPTH], x)
    assert torch.equal(readouts[TEACHER_DEPTH], population.teachers.forward(x[None])[0])


@pytest.mark.parametrize("teacher", ["tied", "independent"])
def test_at_the_paper_teacher_depth_the_discretised_student_has_no_loss_at_all(teacher):
    """ℓ = ℓ* = 128, the paper's teacher: the untrained discretisation is the teacher, loss 0 in fp32
    (not merely small), so a sweep toward ℓ* ends there at the teacher itself."""
    config = config_for(teacher=teacher, depths=[64, 128], teacher_depth=128)
    population = Population(config, torch.device("cpu"), specs=[StudentSpec(0, 0, d, "discretised") for d in (64, 128)])
    loss = dict(zip([spec.depth for spec in population.specs], population.test_losses().tolist()))
    assert loss[128] == 0.0 and loss[64] > 1e-6


def test_at_half_the_teacher_depth_each_student_layer_is_an_euler_step_over_two_teacher_layers():
    """ℓ = ℓ*/2: hidden state j + 1 of the student is h_j + 2·f_{2j}(h_j), the field of the first
    of its two teacher layers taken for both (written out here, layer by layer)."""
    config = config_for(depths=[TEACHER_DEPTH // 2])
    layers = teacher_flow(Protocol.of(config), "tied", 0).layers
    x = torch.randn(64, config.width, generator=torch.Generator().manual_seed(4))
    population = Population(config, torch.device("cpu"), specs=[StudentSpec(0, 0, TEACHER_DEPTH // 2, "discretised")])
    states = population.students.hidden_states(rmsnorm(x)[None])[0]
    for j in range(TEACHER_DEPTH // 2):
        step = states[j] + 2 * field(layers, 2 * j, states[j])
        torch.testing.assert_close(states[j + 1], step, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("student", ["euler", "lns", "depth-mup", "ode"])
def test_a_shallower_discretised_euler_student_is_the_euler_rule_on_the_teachers_layers(student):
    config = config_for(student=student, teacher="smooth(anchors=3)")
    layers = teacher_flow(Protocol.of(config), "smooth(anchors=3)", 0).layers
    x = torch.randn(64, config.width, generator=torch.Generator().manual_seed(2))
    readouts, _ = discretised_readouts(config, [2, 3, 4], x)
    for depth in (2, 3, 4):
        step, h = TEACHER_DEPTH / depth, rmsnorm(x)
        for j in range(depth):  # Euler: the field where the step begins, times the step
            h = h + step * field(layers, int(j * step), h)
        torch.testing.assert_close(readouts[depth], rmsnorm(h), rtol=1e-5, atol=1e-5)


def test_a_discretised_rk2_student_is_the_midpoint_rule():
    config = config_for(student="rk2", teacher="smooth(anchors=3)")
    layers = teacher_flow(Protocol.of(config), "smooth(anchors=3)", 0).layers
    x = torch.randn(64, config.width, generator=torch.Generator().manual_seed(3))
    readouts, _ = discretised_readouts(config, [1, 2, 3], x)
    for blocks in (1, 2, 3):
        step, h = TEACHER_DEPTH / blocks, rmsnorm(x)
        for j in range(blocks):
            midpoint = h + 0.5 * step * field(layers, int(j * step), h)
            h = h + step * field(layers, int((j + 0.5) * step), midpoint)
        torch.testing.assert_close(readouts[blocks], rmsnorm(h), rtol=1e-5, atol=1e-5)


def test_the_midpoint_rule_beats_the_euler_rule_on_a_tied_teacher_and_both_converge_with_depth():
    losses = {}
    for student in ("euler", "rk2"):
        config = config_for(student=student, depths=[2, 3, 4])
        population = Population(
            config, torch.device("cpu"), specs=[StudentSpec(0, 0, d, "discretised") for d in (2, 3, 4)]
        )
        losses[student] = dict(zip([s.depth for s in population.specs], population.test_losses().tolist()))
    for depth in (2, 3, 4):
        assert losses["rk2"][depth] < losses["euler"][depth] / 4
    assert losses["euler"][2] > losses["euler"][3] > losses["euler"][4]


@pytest.mark.parametrize("loss", ["kl", "kl-fixed-head"])
def test_a_discretised_kl_student_as_deep_as_its_teacher_matches_its_targets(loss):
    config = config_for(loss=loss, depths=[TEACHER_DEPTH])
    population = Population(config, torch.device("cpu"), specs=[StudentSpec(0, 0, TEACHER_DEPTH, "discretised")])
    assert population.test_losses().item() == pytest.approx(0, abs=1e-5)  # the trained head starts at head / T
    zero = Population(config, torch.device("cpu"), specs=[StudentSpec(0, 0, TEACHER_DEPTH, "zero")])
    assert zero.test_losses().item() > 0.1


@pytest.mark.slow
def test_every_student_carries_the_untrained_discretisations_loss_as_its_reference():
    config = config_for(depths=[2, 4], steps=3, evals=2, starts=["zero", "discretised"])
    history = train(config).history
    first = history[history.step == 1]
    assert set(first.start) == {"zero", "discretised"}
    for depth in (2, 4):
        rows = first[first.depth == depth]
        assert rows.reference_loss.nunique() == 1  # one reference per teacher instance and depth
        reference = Population(config, torch.device("cpu"), specs=[StudentSpec(0, 0, depth, "discretised")])
        assert rows.reference_loss.iloc[0] == pytest.approx(reference.test_losses().item(), rel=1e-6)


@pytest.mark.slow
def test_a_deliberately_undertrained_student_has_a_gap_above_tolerance_and_is_not_certified():
    config = config_for(
        depths=[3, 6],
        steps=20,
        batch=32,
        evals=2,
        starts=["zero", "discretised"],
        converge=True,
        check_every=5,
        patience=1,
        decays=0,
    )  # converges (flattens) almost at once
    (fit,) = fit_depth_exponents(train(config).history, teacher_depth=TEACHER_DEPTH)
    zero = [s for s in fit.students if s["start"] == "zero"]
    assert all(s["gap"] > GAP_TOLERANCE and not s["certified"] for s in zero)
    assert set(fit.best_starts) == {"discretised"}


def synthetic_last(losses: dict, reference: float, converged=True, test_over_train=1.0) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "replicate": 0,
                "depth": 4,
                "start": start,
                "step": 100,
                "train_loss": loss / test_over_train,
                "test_loss": loss,
                "reference_loss": reference,
                "converged_at_step": 100 if converged else np.nan,
            }
            for start, loss in losses.items()
        ]
    )


@pytest.mark.parametrize(
    "losses, reference, converged, test_over_train, reused_samples, certified",
    [
        ({"zero": 1.0, "discretised": 1.05}, 2.0, True, 1.0, True, {"zero": True, "discretised": True}),
        ({"zero": 1.0, "discretised": 1.2}, 2.0, True, 1.0, True, {"zero": True, "discretised": False}),
        (
            {"zero": 1.0},
            0.5,
            True,
            1.0,
            True,
            {"zero": False},
        ),  # ends above the discretisation it could have started from
        ({"zero": 1.0}, 2.0, False, 1.0, True, {"zero": False}),  # still improving
        ({"zero": 1.0}, 2.0, True, 1.08, True, {"zero": False}),  # fits its pool: tests 8 % above its training loss
        ({"zero": 1.0}, 2.0, True, 1.08, False, {"zero": True}),  # fresh samples: it cannot fit them; test set noise
    ],
)
def test_certify_compares_each_student_with_the_best_any_start_reached(
    losses, reference, converged, test_over_train, reused_samples, certified
):
    last = certify(synthetic_last(losses, reference, converged, test_over_train), reused_samples=reused_samples)
    assert dict(zip(last.start, last.certified)) == certified
    best = min(min(losses.values()), reference)
    assert dict(zip(last.start, last.gap)) == pytest.approx({s: loss / best - 1 for s, loss in losses.items()})
    assert last.fitted.sum() == 1 and last.test_loss[last.fitted].item() == min(losses.values())


def test_the_step_mismatch_fit_recovers_a_pure_discretisation_error_that_log_log_overstates():
    depths, teacher_depth = [6, 12, 16, 24, 32, 48], 128
    rows = [
        {
            "teacher": "tied",
            "temperature": math.nan,
            "replicate": r,
            "depth": d,
            "step": 10,
            "train_loss": 1.0,
            "test_loss": (1 / d - 1 / teacher_depth) ** 2 * (1 + 0.01 * r),
            "converged_at_step": 10,
        }
        for r in range(3)
        for d in depths
    ]
    (fit,) = fit_depth_exponents(pd.DataFrame(rows), teacher_depth=teacher_depth)
    assert fit.mismatch_alpha == pytest.approx(2.0, abs=1e-6)
    assert fit.alpha == pytest.approx(2.4, abs=0.05)  # science.md §8: (1/ℓ − 1/ℓ*)² reads as 2.4 over 6–48


def test_the_pure_mismatch_law_is_fitted_with_its_one_constant_and_drawn_beside_the_discretisation(tmp_path):
    depths, teacher_depth = [16, 32, 64, 96], 128
    trained = [0.09 * (1 / d - 1 / teacher_depth) ** 2 for d in depths]
    assert mismatch_constant(depths, trained, teacher_depth) == pytest.approx(0.09, rel=1e-12)
    untrained = [10 * loss * d / 16 for loss, d in zip(trained, depths)]  # beaten by more as ℓ grows
    fit = DepthFit(
        teacher="tied",
        temperature=math.nan,
        alpha=2.5,
        alpha_low=2.4,
        alpha_high=2.6,
        interval="t",
        replicates=3,
        steps=10,
        depths=depths,
        losses=trained,
        local_slopes=[],
        floor_fit=None,
        certified=True,
        uncertified_depths=[],
        alpha_over_training=[],
        reference_losses=untrained,
        teacher_depth=teacher_depth,
    )
    assert [p.suffix for p in plot_step_mismatch([fit], "caption", tmp_path / "mismatch")] == [".png", ".pdf"]
    assert plot_step_mismatch([DepthFit(**{**vars(fit), "reference_losses": []})], "caption", tmp_path / "none") == []


@pytest.fixture(scope="module")
def mse_run(tmp_path_factory):
    """A finished MSE run from two starts that kept its students: the trained start's source."""
    config = config_for(
        teacher="independent",
        depths=[2, 3],
        replicates=2,
        steps=30,
        batch=64,
        evals=3,
        starts=["zero", "discretised"],
        save_students=True,
    )
    return run_sweep(config, tmp_path_factory.mktemp("runs") / "mse", progress=False).path


def test_a_trained_start_takes_each_students_best_layers_from_the_run_and_the_teachers_head_over_t(mse_run):
    mse = Population(RunFolder(mse_run).config(), torch.device("cpu"))
    mse.students.load_state_dict(RunFolder(mse_run).students()["state_dict"])
    last = RunFolder(mse_run).metrics().groupby(["replicate", "depth", "start"]).test_loss.last()
    kl = config_for(
        teacher="independent",
        loss="kl",
        depths=[2, 3],
        replicates=2,
        temperatures=[0.1, 1.0],
        starts=["trained"],
        start_from=str(mse_run),
    )
    population = Population(kl, torch.device("cpu"))
    for m, spec in enumerate(population.specs):
        replicate = kl.teacher_instances[spec.instance][1]
        best = last.loc[(replicate, spec.depth)].idxmin()
        twin = mse.specs.index(StudentSpec(spec.instance, 0, spec.depth, best))
        for name in ("w_in", "b_in", "w_out"):
            mine = getattr(population.students, name)[population.students.row_student == m]
            torch.testing.assert_close(mine, getattr(mse.students, name)[mse.students.row_student == twin])
        temperature = population.protocol.temperatures[spec.temperature_index]
        torch.testing.assert_close(
            population.students.head[m], teacher_head(population.protocol, replicate) / temperature
        )


def test_a_trained_start_polishes_at_the_rate_a_converged_student_ends_at(mse_run):
    kl = config_for(
        teacher="independent",
        loss="kl",
        depths=[2],
        replicates=1,
        temperatures=[0.1],
        decays=3,
        starts=["zero", "trained"],
        start_from=str(mse_run),
    )
    trainer = Trainer(Population(kl, torch.device("cpu")))
    by_start = {spec.start: m for m, spec in enumerate(trainer.population.specs)}
    for rates, owners in zip(trainer.optimizer.rates, trainer.optimizer.owners):
        rate = dict(zip(owners.tolist(), rates.flatten().tolist()))
        assert rate[by_start["trained"]] == pytest.approx(rate[by_start["zero"]] * kl.lr_decay**3)


@pytest.mark.parametrize(
    "changes, message",
    [
        (dict(starts=["zero", "trained"], start_from=None), "give both or neither"),
        (dict(starts=["zero"]), "give both or neither"),
        (dict(teacher_depth=TEACHER_DEPTH + 1), "differs from this sweep in teacher_depth"),
        (dict(student="rk2"), "differs from this sweep in student"),
        (dict(depths=[4]), "has no trained student of the independent teacher, replicate 0, at depth 4"),
    ],
)
def test_a_trained_start_from_another_sweeps_students_is_one_clear_line(mse_run, changes, message):
    changes = {"starts": ["trained"], "start_from": str(mse_run), **changes}
    with pytest.raises(ToymodelsError, match=message):
        Population(config_for(teacher="independent", loss="kl", **{"depths": [2], **changes}), torch.device("cpu"))


def test_an_unknown_start_is_one_clear_line():
    with pytest.raises(ToymodelsError, match="unknown start 'warm'"):
        Protocol.of(config_for(starts=["zero", "warm"]))
    with pytest.raises(ToymodelsError, match="distinct"):
        config_for(starts=["zero", "zero"])
    with pytest.raises(ToymodelsError, match="pool refresh"):
        config_for(pool_refresh=10)


@pytest.mark.slow
@pytest.mark.parametrize("refresh, fits_its_samples", [(8, False), (0, True)])
def test_a_converged_student_tests_as_it_trains_unless_its_pool_is_never_relabelled(refresh, fits_its_samples):
    pool, steps = (1024, 2000) if refresh else (256, 400)  # a 256-sample pool is memorised long before convergence
    config = resolve_config(
        "quick",
        teachers=["tied"],
        loss="mse",
        depths=[3],
        replicates=1,
        teacher_depth=8,
        steps=steps,
        batch=128,
        lr=1e-2,
        schedule="constant",
        converge=True,
        check_every=25,
        patience=2,
        decays=1,
        teacher_pool=pool,
        pool_refresh=refresh,
        test_batches=4,
        test_batch_size=1024,
        evals=3,
        device="cpu",
    )
    last = train(config).history.tail(1)
    ratio = (last.test_loss / last.train_loss).item()  # converged: over the plateau test's last window
    if fits_its_samples:
        assert ratio > 2
    else:
        assert last.converged_at_step.notna().item() and abs(ratio - 1) <= 0.05, ratio


@pytest.mark.slow
def test_the_engine_alone_trains_a_trained_start_in_a_fresh_interpreter(tmp_path):
    """The trained start's reader comes with the protocol (training/trained_runs.py), not with
    whichever module happened to import toymodels.results first."""
    settings = dict(
        teachers=["tied"],
        loss="mse",
        depths=[2, 3],
        replicates=1,
        teacher_depth=8,
        steps=5,
        batch=16,
        test_batches=1,
        test_batch_size=32,
        evals=2,
        device="cpu",
    )
    source = run_sweep(
        resolve_config("quick", starts=["discretised"], save_students=True, **settings),
        tmp_path / "source",
        progress=False,
        echo=lambda line: None,
    )
    script = (
        f"import sys; import toymodels.training.engine as engine; from toymodels.config import resolve_config; "
        f"config = resolve_config('quick', starts=['trained'], start_from={str(source.path)!r}, **{settings!r}); "
        f"history = engine.train(config).history; "
        f"assert 'toymodels.results' not in sys.modules, 'results/ was imported'; "
        f"print(sorted(set(history.start)))"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['trained']"
