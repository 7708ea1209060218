"""A grid split by replicate (`first_replicate`), each part a run of its own, joined back into one
run (`toymodels join`): the same teachers and samples, so the same numbers and the same fit."""

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner
from test_polish import converged_config

from toymodels import fit_run, run_sweep
from toymodels.api import reproduce
from toymodels.cli.main import main
from toymodels.results.storage import RunFolder

KEYS = ["teacher", "replicate", "depth", "start", "step"]
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def split_grid(tmp_path_factory):
    """The runs of a polished, budget-doubled grid of two teachers: whole, and as two parts."""
    folder = tmp_path_factory.mktemp("runs")
    config = converged_config(polish_batch=64, trained_decays_spent=1, budget_doubling=True)
    quiet = dict(progress=False, echo=lambda line: None)
    whole = run_sweep(config, folder / "whole", **quiet)
    parts = [run_sweep(config.replace(replicates=1, first_replicate=r), folder / f"r{r}", **quiet) for r in (0, 1)]
    return whole, parts


@pytest.mark.slow
def test_the_parts_of_a_grid_join_to_the_run_of_the_whole_grid(split_grid, tmp_path):
    whole, parts = split_grid
    result = CliRunner().invoke(
        main, ["join", str(parts[1].path), str(parts[0].path), "--out", str(tmp_path / "joined")]
    )
    assert result.exit_code == 0, result.output
    joined = RunFolder.open(tmp_path / "joined")
    assert joined.config() == whole.config()
    pd.testing.assert_frame_equal(
        joined.metrics().sort_values(KEYS, ignore_index=True),
        whole.metrics().sort_values(KEYS, ignore_index=True),
        rtol=1e-6,
    )
    fits = [json.loads((run.path / "fit.json").read_text())["fits"] for run in (joined, whole)]
    bounds = [[fit[key] for fit in document for key in ("alpha", "alpha_low", "alpha_high")] for document in fits]
    assert bounds[0] == pytest.approx(bounds[1], rel=1e-6)
    assert "t over 2 teacher replicates" in result.output and "budget doubling, tied:" in result.output
    budget = pd.read_csv(joined.path / "budget_doubling.csv")
    assert sorted(budget.replicate.unique()) == [0, 1]  # the parts' certificates, measured on their students
    assert len(json.loads((joined.path / "provenance.json").read_text())["joined_from"]) == 2


@pytest.mark.slow
def test_parts_that_do_not_make_one_grid_are_refused_with_one_line(split_grid, tmp_path):
    whole, (first, second) = split_grid
    gap = shutil.copytree(second.path, tmp_path / "r2")
    config = json.loads((gap / "config.json").read_text())
    (gap / "config.json").write_text(json.dumps({**config, "first_replicate": 2}))
    other = shutil.copytree(second.path, tmp_path / "other")
    (other / "config.json").write_text(json.dumps({**config, "lr": 0.5}))
    for parts, message in (
        ([first.path, gap], "must follow on from each other"),
        ([first.path, whole.path], "must follow on from each other"),  # replicate 0 twice
        ([first.path, other], "another protocol"),
        ([first.path], "two runs or more"),
    ):
        result = CliRunner().invoke(main, ["join", *map(str, parts), "--out", str(tmp_path / "joined")])
        assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1, result.output
        assert message in result.output
        assert not (tmp_path / "joined").exists()


def joined_experiment(folder, parts: list[str], config) -> str:
    """An experiment file joining the experiments `parts`, whose grid is `config`'s."""
    keys = "\n".join(line for line in config.to_toml().splitlines() if not line.startswith(("#", "preset")))
    path = folder / "joined.toml"
    path.write_text(
        f'[experiment]\ntitle = "joined"\nfigures = ["depth"]\njoined_from = {json.dumps(parts)}\n'
        f'[scales.cpu]\npreset = "paper"\n{keys}\n'
    )
    return str(path)


@pytest.mark.slow
def test_an_experiment_joined_from_its_parts_reproduces_the_whole_grid(split_grid, tmp_path):
    whole, parts = split_grid
    runs = tmp_path / "runs"
    for name, part in zip(("part_a", "part_b"), parts):
        shutil.copytree(part.path, runs / f"{name}-cpu")
    experiment = joined_experiment(tmp_path, ["part_a", "part_b"], whole.config())
    folder, fits, figures = reproduce(
        experiment, "cpu", runs / "joined-cpu", progress=False, reference=tmp_path / "none"
    )
    assert [fit.alpha for fit in fits] == pytest.approx([fit.alpha for fit in fit_run(whole.path)], rel=1e-6)
    assert folder.experiment()["name"] == "joined" and (folder.path / "loss_vs_depth.png") in figures
    wrong = joined_experiment(tmp_path, ["part_a"], whole.config())  # one part: not the grid of two replicates
    result = CliRunner().invoke(main, ["reproduce", wrong, "--out", str(runs / "wrong-cpu")])
    assert result.exit_code == 2 and "two runs or more" in result.output and not (runs / "wrong-cpu").exists()
    shutil.copytree(parts[0].path, runs / "part_c-cpu")
    twice = joined_experiment(tmp_path, ["part_a", "part_c", "part_b"], whole.config())
    result = CliRunner().invoke(main, ["reproduce", twice, "--out", str(runs / "twice-cpu")])
    assert result.exit_code == 2 and "follow on from each other" in result.output


@pytest.mark.slow
def test_a_joined_runs_layer_errors_are_its_parts_splits_and_a_part_without_one_is_named(split_grid, tmp_path):
    _, parts = split_grid
    split = ROOT / "figures" / "paper_depths_independent_r1" / "cpu" / "layer_errors"  # a real split's tables
    copies = [shutil.copytree(part.path, tmp_path / part.path.name) for part in parts]
    shutil.copytree(split, copies[0] / "layer_errors")
    result = CliRunner().invoke(main, ["join", *map(str, copies), "--out", str(tmp_path / "joined")])
    assert result.exit_code == 0, result.output
    result = CliRunner().invoke(main, ["layer-errors", str(tmp_path / "joined")])  # the second part has no split
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1, result.output
    assert f"run `toymodels layer-errors {copies[1]}` first" in result.output
    assert not (tmp_path / "joined" / "layer_errors").exists()
    shutil.copytree(split, copies[1] / "layer_errors")
    result = CliRunner().invoke(main, ["layer-errors", str(tmp_path / "joined")])
    assert result.exit_code == 0, result.output
    joined = pd.read_csv(tmp_path / "joined" / "layer_errors" / "coherence.csv")
    pd.testing.assert_frame_equal(joined, pd.concat([pd.read_csv(split / "coherence.csv")] * 2, ignore_index=True))
    assert (tmp_path / "joined" / "layer_errors" / "error_exponents.csv").is_file()
