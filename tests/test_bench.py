"""The benchmark's arithmetic and plumbing (not its timings: those belong in `toymodels bench`)."""

import json

import pytest
from click.testing import CliRunner

from toymodels.cli.main import main
from toymodels.performance.bench import bench_config, sweep_products
from toymodels.training.planning import sweep_flops_per_step
from toymodels.training.protocol import Protocol


def test_flop_count_of_a_sweep(tiny_config):
    config = tiny_config.replace(loss="mse", replicates=1, depths=[1, 3])
    d, batch = config.width, config.batch
    mlp = 16 * d * d * batch  # two d×4d matmuls, 2 FLOPs per multiply-add
    # one teacher forward; MSE has no temperatures, so one student per depth, forward + backward = 3×
    assert sweep_flops_per_step(Protocol.of(config)) == config.teacher_depth * mlp + (1 + 3) * 3 * mlp


@pytest.mark.parametrize("changes", [dict(loss="kl"), dict(loss="mse", student="rk2"), dict(loss="kl-fixed-head")])
def test_the_ceiling_times_exactly_the_sweeps_matmul_work(tiny_config, changes):
    protocol = Protocol.of(tiny_config.replace(depths=[1, 3], **changes))
    assert sum(flops for _, flops in sweep_products(protocol, "cpu")) == sweep_flops_per_step(protocol)


@pytest.mark.slow
def test_bench_command_reports_both_ways():
    result = CliRunner().invoke(
        main,
        [
            "bench",
            "--depths",
            "1,2",
            "--temperature-count",
            "2",
            "--batch",
            "16",
            "--steps",
            "2",
            "--baseline-steps",
            "1",
            "--device",
            "cpu",
            "--jobs",
            "2",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert set(report["rows"]) == {"baseline", "matmuls only (the ceiling)", "population", "population, 2 jobs"}
    assert report["students"] == 4
    peaks = report["matmul_peak_gflop_per_s"]  # measured around every row: a shared machine's drifts
    assert 0 < peaks["min"] <= peaks["max"]
    for row in report["rows"].values():
        assert row["sweep_steps_per_s"] > 0 and row["effective_gflop_per_s"] > 0
        assert peaks["min"] <= row["matmul_peak_gflop_per_s"] <= peaks["max"]
        assert row["fraction_of_matmul_peak"] == pytest.approx(
            row["effective_gflop_per_s"] / row["matmul_peak_gflop_per_s"]
        )


def test_bench_times_named_sweeps_and_changes_them_by_option():
    result = CliRunner().invoke(
        main,
        [
            "bench",
            "--sweep",
            "tiny",
            "--steps",
            "2",
            "--baseline-steps",
            "1",
            "--device",
            "cpu",
            "--jobs",
            "1",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert (report["students"], report["batch"], report["depths"]) == (2, 16, [1, 2])
    assert set(report["rows"]) == {"baseline", "matmuls only (the ceiling)", "population"}
    wider = bench_config("tiny", batch=32, depths=None)  # what `--batch 32` gives; an option left out keeps the sweep's
    assert (wider.batch, wider.depths, wider.loss) == (32, (1, 2), "mse")
