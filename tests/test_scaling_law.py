"""The decomposed scaling law: recovers known exponents, reproduces the paper on the Chinchilla shapes, and its CLI."""

import json

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from toymodels.analysis.scaling_law import (
    bootstrap_scaling_law,
    depth_part,
    fit_scaling_law,
    holdout_check,
    load_chinchilla,
)
from toymodels.cli.main import OneLineErrors
from toymodels.cli.scaling_law import scaling_law_command
from toymodels.plotting.scaling_law import plot_alpha_summary, plot_depth_term


@pytest.fixture(scope="module")
def runs():
    return load_chinchilla(drop_top=40)


@pytest.fixture(scope="module")
def fit(runs):
    return fit_scaling_law(runs)


@pytest.fixture
def cli():
    """A throwaway group with the CLI's one-line error handling, whether or not `main` has registered the command."""
    group = OneLineErrors("toymodels", commands=[scaling_law_command])
    return lambda *args: CliRunner().invoke(group, ["scaling-law", *args])


def synthetic_runs(noise: float, n=300) -> pd.DataFrame:
    """Runs of a known law: α_m = 0.9, α_ℓ = 1.3, α_D = 0.35, L₀ = 1.7, with multiplicative noise."""
    rng = np.random.default_rng(1)
    shapes = pd.DataFrame(
        {
            "m": np.exp(rng.uniform(np.log(256), np.log(8192), n)),
            "l": np.exp(rng.uniform(np.log(200), np.log(6400), n)),
            "D": np.exp(rng.uniform(np.log(100), np.log(1e5), n)),
        }
    )
    loss = 300 * shapes.m**-0.9 + 3000 * shapes.l**-1.3 + 10 * shapes.D**-0.35 + 1.7
    return shapes.assign(loss=loss * np.exp(rng.normal(0, noise, n)))


def test_recovers_known_exponents_from_synthetic_runs():
    recovered = fit_scaling_law(synthetic_runs(noise=0.002))  # 0.2 % multiplicative noise

    for name, truth in {"alpha_m": 0.9, "alpha_l": 1.3, "alpha_D": 0.35, "L0": 1.7}.items():
        assert getattr(recovered, name) == pytest.approx(truth, abs=0.05)
        assert abs(getattr(recovered, name) - truth) < 4 * recovered.stderr[name]  # the errors are honest


def test_dropping_the_40_highest_losses_leaves_203_runs(runs):
    assert len(runs) == 203
    assert len(load_chinchilla(drop_top=0)) == 245


def test_reproduces_the_paper_on_the_chinchilla_shapes(fit):
    assert fit.n_rows == 203
    assert fit.alpha_l == pytest.approx(1.2, abs=0.3)
    assert fit.alpha_l == pytest.approx(1.32, abs=0.02)  # the fully converged optimum
    assert fit.alpha_m == pytest.approx(0.98, abs=0.1)
    assert fit.alpha_D == pytest.approx(0.30, abs=0.02)
    assert fit.L0 == pytest.approx(1.75, abs=0.1)
    assert fit.stderr["alpha_l"] == pytest.approx(0.3, abs=0.05)
    assert fit.mean_relative_error < 0.006


def test_counting_depth_as_layers_minus_two_lowers_alpha_l(fit):
    offset_fit = fit_scaling_law(load_chinchilla(drop_top=40, depth_offset=2))
    assert offset_fit.alpha_l < fit.alpha_l
    assert offset_fit.alpha_l == pytest.approx(1.1, abs=0.3)


def test_bootstrap_brackets_the_fit_and_holdout_error_stays_small(runs, fit):
    intervals = bootstrap_scaling_law(runs, fit, n=10, seed=0)
    for name, (low, high) in intervals.items():
        assert low <= getattr(fit, name) <= high
    holdout = holdout_check(runs, fit, splits=3, seed=0)
    assert holdout["test_mean_relative_error"] < 0.006


def test_depth_part_is_the_true_depth_term_of_a_known_law():
    runs = synthetic_runs(noise=0.0)
    np.testing.assert_allclose(depth_part(runs, fit_scaling_law(runs)), 3000 * runs.l**-1.3, rtol=0.02)


@pytest.mark.slow
def test_figures_are_written_with_and_without_toy_results(runs, fit, tmp_path):
    paths = plot_depth_term(runs, fit, tmp_path / "depth", drop_top=40, depth_offset=0)
    paths += plot_alpha_summary(fit, [], tmp_path / "llm_alone")
    paths += plot_alpha_summary(
        fit, [("independent teacher", 1.0, 0.9, 1.1)], tmp_path / "with_toys", llm_interval=(1.0, 1.8)
    )
    assert all(path.stat().st_size > 0 for path in paths) and len(paths) == 6


@pytest.mark.slow
def test_cli_prints_the_table_beside_the_paper(cli):
    result = cli("--bootstrap", "5")
    assert result.exit_code == 0, result.output
    assert "alpha_l" in result.output and "1.20 ± 0.30" in result.output
    assert "holdout" in result.output and "fit against K" in result.output


@pytest.mark.slow
def test_cli_json_parses_and_holds_everything(cli):
    result = cli("--bootstrap", "5", "--json")
    document = json.loads(result.output)
    assert document["fit"]["n_rows"] == 203
    assert set(document) >= {"protocol", "fit", "bootstrap_95", "holdout", "scan_drop_top", "paper"}
    assert [row["K"] for row in document["scan_drop_top"]] == [0, 20, 40, 60, 80]


@pytest.mark.parametrize(
    "args", [("--drop-top", "-1"), ("--drop-top", "245"), ("--bootstrap", "-1"), ("--depth-offset", "9")]
)
def test_cli_bad_input_exits_2_with_one_line(cli, args):
    result = cli(*args)
    assert result.exit_code == 2
    assert len(result.output.strip().splitlines()) == 1 and "error" in result.output
