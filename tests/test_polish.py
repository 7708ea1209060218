"""The polish: after its starts, each student's best start trains on at a larger batch, and the
certificate takes the best of the starts and the polish."""

import math
import shutil

import numpy as np
import pandas as pd
import pytest
import torch
from click.testing import CliRunner

from toymodels import fit_run, resolve_config, run_sweep
from toymodels.api import missing_jobs, run_protocol
from toymodels.cli.main import main
from toymodels.errors import ToymodelsError
from toymodels.results.report import format_table, protocol_line, uncertified_reasons
from toymodels.results.storage import RunFolder
from toymodels.training.population import Population
from toymodels.training.protocol import Protocol
from toymodels.training.trained_runs import trained_students
from toymodels.training.trainer import Trainer
from toymodels.workflows.polish import POLISHED_START, merge_polish, polish_folder


def converged_config(**changes):
    settings = dict(
        teachers=["tied"],
        loss="mse",
        depths=[2, 3],
        replicates=2,
        teacher_depth=8,
        steps=60,
        batch=16,
        lr=1e-2,
        schedule="constant",
        converge=True,
        check_every=5,
        patience=2,
        decays=2,
        starts=["zero", "discretised"],
        test_batches=1,
        test_batch_size=128,
        evals=5,
        device="cpu",
    )
    return resolve_config("quick", **{**settings, **changes})


@pytest.fixture(scope="module")
def polished_run(tmp_path_factory):
    config = converged_config(polish_batch=64, trained_decays_spent=1)
    return run_sweep(config, tmp_path_factory.mktemp("runs") / "polished", progress=False, echo=lambda line: None)


def test_every_student_gets_one_polished_start_continuing_its_best_starts_curve(polished_run):
    metrics = polished_run.metrics()
    slot = ["replicate", "depth"]
    starts = metrics[metrics.start != POLISHED_START]
    last = starts[starts.step == starts.groupby([*slot, "start"]).step.transform("max")]
    parents = last.loc[last.groupby(slot).test_loss.idxmin()].set_index(slot)
    polished = metrics[metrics.start == POLISHED_START]
    assert len(polished.groupby(slot)) == 4  # 2 replicates × 2 depths
    own = RunFolder(polish_folder(polished_run)).metrics()
    for (replicate, depth), rows in polished.groupby(slot):
        parent = parents.loc[(replicate, depth)]
        mine = own[(own.replicate == replicate) & (own.depth == depth)]
        # its steps are the polish's own, counted on from its parent's last; its losses are the polish's
        np.testing.assert_array_equal(rows.step.to_numpy(), mine.step.to_numpy() + parent.step)
        np.testing.assert_array_equal(rows.test_loss.to_numpy(), mine.test_loss.to_numpy())
        np.testing.assert_array_equal(
            rows.converged_at_step.to_numpy(), mine.converged_at_step.to_numpy() + parent.step
        )
    final = metrics[metrics.step == metrics.groupby([*slot, "start"]).step.transform("max")]
    # gaps are taken anew over every start, the polish's included (and the untrained discretisation)
    best = final.groupby(slot).test_loss.transform("min")
    np.testing.assert_allclose(final.gap, final.test_loss / np.fmin(best, final.reference_loss) - 1)


def test_the_polish_trains_at_the_larger_batch_from_the_runs_own_students(polished_run):
    config = RunFolder(polish_folder(polished_run)).config()
    assert (config.starts, config.batch, config.polish_batch) == (("trained",), 64, 0)
    assert config.start_from == str(polished_run.path.resolve())


def test_the_fit_takes_the_best_of_the_starts_and_the_polish(polished_run):
    metrics = polished_run.metrics()
    final = metrics[metrics.step == metrics.groupby(["replicate", "depth", "start"]).step.transform("max")]
    best = final.loc[final.groupby(["replicate", "depth"]).test_loss.idxmin()]
    [fit] = fit_run(polished_run.path)
    fitted = {(s["replicate"], s["depth"]): (s["start"], s["test_loss"]) for s in fit.students if s["fitted"]}
    assert fitted == {(row.replicate, row.depth): (row.start, row.test_loss) for row in best.itertuples()}
    assert "polished until converged × batch 64, from its rate × 0.25^1" in protocol_line(run_protocol(polished_run))


def test_a_finished_polished_run_is_reused_as_it_is(polished_run):
    before = polished_run.metrics()
    again = run_sweep(RunFolder(polished_run.path).config(), polished_run.path, progress=False, echo=lambda line: None)
    pd.testing.assert_frame_equal(again.metrics(), before)


def test_merging_the_polish_again_replaces_it_and_counts_from_the_best_start():
    run = pd.DataFrame(
        {
            "teacher": "tied",
            "temperature": math.nan,
            "replicate": 0,
            "depth": 2,
            "start": ["zero", "zero", "discretised", "discretised"],
            "step": [10, 40, 10, 30],
            "train_loss": 1.0,
            "test_loss": [3.0, 2.0, 1.5, 1.0],
            "converged_at_step": [None, 40, None, 30],
            "reference_loss": 5.0,
        }
    )
    polish = run[run.start == "zero"].assign(
        start="trained", step=[1, 8], test_loss=[0.9, 0.5], converged_at_step=[None, 8]
    )
    merged = merge_polish(run, polish)
    rows = merged[merged.start == POLISHED_START]
    assert rows.step.tolist() == [31, 38] and rows.converged_at_step.tolist()[-1] == 38  # after discretised's 30
    assert merged.loc[merged.start == "discretised", "gap"].iloc[-1] == pytest.approx(1.0)  # twice the polish's 0.5
    pd.testing.assert_frame_equal(merge_polish(merged, polish), merged)


def test_a_trained_start_spends_only_the_decays_it_is_told(polished_run):
    config = converged_config(starts=["zero", "trained"], start_from=str(polished_run.path), trained_decays_spent=1)
    trainer = Trainer(Population(config, torch.device("cpu")))
    by_start = {(spec.instance, spec.depth, spec.start): m for m, spec in enumerate(trainer.population.specs)}
    rate = dict(zip(trainer.optimizer.owners[0].tolist(), trainer.optimizer.rates[0].flatten().tolist()))
    for (instance, depth, start), m in by_start.items():
        if start == "trained":
            assert rate[m] == pytest.approx(rate[by_start[(instance, depth, "zero")]] * config.lr_decay)


def test_a_trained_start_takes_the_students_of_its_own_temperature_and_their_head(tmp_path):
    kl = converged_config(
        loss="kl", temperatures=[0.1, 1.0], depths=[2], replicates=1, decays=1, starts=["zero"], save_students=True
    )
    source = run_sweep(kl, tmp_path / "kl", progress=False, echo=lambda line: None)
    students = trained_students(str(source.path), Protocol.of(kl).config)
    (cold, cold_head), (warm, warm_head) = students[("tied", 0, 0.1, 2)], students[("tied", 0, 1.0, 2)]
    assert not torch.equal(cold.w_out, warm.w_out)
    best = source.metrics().groupby("temperature").test_loss.last().idxmin()
    torch.testing.assert_close(students[("tied", 0, "any", 2)][0].w_out, (cold if best == 0.1 else warm).w_out)
    # a polish of a KL run continues each student's trained head, not the teacher's head / T
    polish = kl.replace(starts=["trained"], start_from=str(source.path), trained_decays_spent=0)
    population = Population(polish, torch.device("cpu"))
    trained_heads = {0.1: cold_head, 1.0: warm_head}
    for m, spec in enumerate(population.specs):
        torch.testing.assert_close(
            population.students.head[m], trained_heads[population.protocol.temperatures[spec.temperature_index]]
        )


@pytest.mark.parametrize(
    "changes, message",
    [
        (dict(converge=False), "polish batch must be 0 .* without --converge"),
        (dict(polish_batch=-1), "polish batch must be a whole number ≥ 0, got -1"),
        (dict(trained_decays_spent=3), "trained decays spent must be between 0 and decays \\(2\\)"),
    ],
)
def test_a_polish_without_its_plateau_test_is_one_clear_line(changes, message):
    with pytest.raises(ToymodelsError, match=message):
        converged_config(**{"polish_batch": 64, **changes})


def test_a_run_whose_polish_is_not_merged_yet_says_so(polished_run, tmp_path):
    copy = RunFolder(shutil.copytree(polished_run.path, tmp_path / "run"))
    assert missing_jobs(copy.path) == []
    copy.save_metrics(copy.metrics().query("start != @POLISHED_START"))
    [line] = missing_jobs(copy.path)
    assert "the polished descent (every student's best start at batch 64" in line and "not merged yet" in line
    result = CliRunner().invoke(main, ["fit", str(copy.path)])
    assert result.exit_code == 0 and "partial run: its polish is not merged yet" in result.stderr


def test_a_student_the_doubled_budget_moves_beyond_the_noise_is_not_budget_certified():
    from toymodels.workflows.certificates import DOUBLING_MARGIN, budget_table

    keys = dict(teacher="tied", temperature=np.nan, replicate=0)
    metrics = pd.DataFrame(
        [
            {**keys, "depth": depth, "start": start, "step": step, "test_loss": loss}
            for depth, moved in ((4, 0.01), (8, 0.20))
            for start, step, loss in (("discretised", 100, 2.0), ("polished", 200, 1.0), ("doubled", 300, 1.0 - moved))
        ]
    )
    noise = pd.DataFrame([{**keys, "depth": depth, "relative_noise": 0.02} for depth in (4, 8)])
    table = budget_table(metrics, noise).set_index("depth")
    assert table.move.to_dict() == pytest.approx({4: -0.01, 8: -0.20})
    assert table.budget_certified.to_dict() == {4: True, 8: False}
    assert 0.20 > 0.02 + DOUBLING_MARGIN > 0.01


def test_the_fit_withholds_the_certificate_of_a_student_the_doubled_budget_moved():
    from toymodels.results.fitting import fit_depth_exponents
    from toymodels.workflows.certificates import budget_table

    keys = dict(teacher="tied", temperature=np.nan, replicate=0)
    metrics = pd.DataFrame(
        [
            {
                **keys,
                "depth": depth,
                "start": start,
                "step": step,
                "train_loss": loss,
                "test_loss": loss,
                "reference_loss": 10 * loss,
                "converged_at_step": step,
            }
            for depth, moved in ((4, 0.01), (8, 0.30), (16, 0.30))
            for start, step, loss in (("polished", 200, 16 / depth**2), ("doubled", 300, 16 / depth**2 * (1 - moved)))
        ]
    )
    noise = pd.DataFrame([{**keys, "depth": depth, "relative_noise": 0.02} for depth in (4, 8, 16)])
    (unchecked,) = fit_depth_exponents(metrics)
    (fit,) = fit_depth_exponents(metrics, budget=budget_table(metrics, noise))
    assert unchecked.certified and unchecked.uncertified_depths == []
    assert (
        not fit.certified and fit.uncertified_depths == [8, 16] and fit.regime.startswith("undetermined (not certified")
    )
    assert {(s["depth"], s["start"]): s["budget_certified"] for s in fit.students if s["depth"] == 16} == {
        (16, "polished"): False,
        (16, "doubled"): False,
    }
    assert uncertified_reasons(fit) == ["ℓ=8, 16 (1/1 moved beyond the noise with twice the budget)"]
    protocol = Protocol.of(
        converged_config(teachers=["tied"], depths=[4, 8, 16], replicates=1, polish_batch=64, budget_doubling=True)
    )
    assert "twice the budget still moved them" in format_table([fit], protocol)


@pytest.mark.slow
def test_budget_doubling_polishes_again_from_the_same_start_with_twice_the_budget(tmp_path):
    config = converged_config(polish_batch=64, trained_decays_spent=1, budget_doubling=True)
    run = run_sweep(config, tmp_path / "run", progress=False, echo=lambda line: None)
    doubled = RunFolder(polish_folder(run, "doubled")).config()
    polish = RunFolder(polish_folder(run)).config()
    assert (doubled.check_every, doubled.steps) == (2 * polish.check_every, 2 * polish.steps)
    assert doubled.start_from == polish.start_from and doubled.batch == polish.batch  # the same start and batch
    metrics = run.metrics()
    assert set(metrics.start) == {"zero", "discretised", "polished", "doubled"}
    table = pd.read_csv(run.path / "budget_doubling.csv")
    assert len(table) == 4 and table.budget_certified.dtype == bool
    last = metrics[metrics.step == metrics.groupby(["replicate", "depth", "start"]).step.transform("max")]
    losses = last.set_index(["replicate", "depth", "start"]).test_loss
    for row in table.itertuples():
        assert row.doubled_loss == losses[(row.replicate, row.depth, "doubled")]
        assert row.polished_loss == losses[(row.replicate, row.depth, "polished")]
    assert "budget doubling, tied:" in (run.path / "fit.txt").read_text()
    moved = {(row.replicate, row.depth) for row in table.itertuples() if not row.budget_certified}
    (fit,) = fit_run(run.path)  # a student the doubled budget moved is not certified: α is a lower bound
    assert {(s["replicate"], s["depth"]) for s in fit.students if s["fitted"] and not s["certified"]} >= moved
