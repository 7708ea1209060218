"""Nothing silently wrong: a damaged results file is named, never fitted (a table cut off anywhere,
mid-row or at a row's end, where it still parses, gives one line naming it, exit status 2, and no
result), and a folder that cannot be written is one line too, never a traceback."""

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from toymodels import load_fits
from toymodels.cli.main import main
from toymodels.errors import ToymodelsError
from toymodels.results.storage import CHECKSUMS, RunFolder, read_table, write_table

COMMITTED = Path(__file__).parent.parent / "figures" / "ladder_tied_r0" / "cpu"


def cut(path: Path, where: str) -> None:
    """Cut `path` at half its bytes, at 95 %, in the middle of its last row, or at a row's end."""
    data = path.read_bytes()
    offset = {
        "50 %": len(data) // 2,
        "95 %": int(len(data) * 0.95),
        "mid-row": data.rindex(b"\n", 0, len(data) - 1) + 5,
        "row end": data.rindex(b"\n", 0, len(data) - 1) + 1,
    }[where]
    path.write_bytes(data[:offset])


@pytest.fixture
def committed(tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(COMMITTED, copy)
    return copy


@pytest.mark.parametrize("where", ["50 %", "95 %", "mid-row", "row end"])
@pytest.mark.parametrize("table, command", [("metrics.csv", ["fit"]), ("ladder/ladder.csv", ["ladder"])])
def test_a_cut_off_table_is_named_in_one_line_and_nothing_is_fitted(committed, table, command, where):
    cut(committed / table, where)
    result = CliRunner().invoke(main, [*command, str(committed)])
    assert result.exit_code == 2, result.output
    line = result.output.strip()
    assert len(line.splitlines()) == 1 and str(committed / table) in line
    assert "damaged" in line or "cut off" in line


@pytest.mark.parametrize("where", ["50 %", "mid-row", "row end"])
def test_a_cut_off_fits_table_is_refused_by_the_api(committed, where):
    cut(committed / "fits.csv", where)
    with pytest.raises(ToymodelsError, match="fits.csv is (damaged|cut off)"):
        load_fits(committed)


def test_a_table_without_a_record_must_end_with_a_whole_row(tmp_path):
    import pandas as pd

    write_table(tmp_path / "t.csv", pd.DataFrame({"a": [1, 2], "b": [3.5, 4.25]}))
    assert read_table(tmp_path / "t.csv", "").b.tolist() == [3.5, 4.25]
    (tmp_path / CHECKSUMS).unlink()  # a table from before the record
    assert len(read_table(tmp_path / "t.csv", "")) == 2
    cut(tmp_path / "t.csv", "mid-row")
    with pytest.raises(ToymodelsError, match="cut off"):
        read_table(tmp_path / "t.csv", "")


def assert_one_line(result) -> None:
    assert result.exit_code == 2, result.output
    assert len(result.output.strip().splitlines()) == 1 and "toymodels: error:" in result.output, result.output


@pytest.mark.parametrize("out", ["below a file", "/proc/figures"])
def test_plot_where_it_cannot_write_is_one_line_and_exit_2(committed, tmp_path, out):
    if out == "below a file":
        (tmp_path / "a file").write_text("")
        out = tmp_path / "a file" / "figures"
    assert_one_line(CliRunner().invoke(main, ["plot", str(committed), "--out", str(out)]))


@pytest.fixture(scope="module")
def saved_students(tmp_path_factory):
    """A tiny run that kept its students, as diagnose and layer-errors read."""
    from toymodels import resolve_config, run_sweep

    config = resolve_config(
        "quick",
        teachers=["tied"],
        loss="mse",
        depths=[2, 4],
        replicates=1,
        teacher_depth=8,
        steps=10,
        batch=32,
        test_batches=1,
        test_batch_size=128,
        evals=2,
        device="cpu",
        starts=["discretised"],
        save_students=True,
    )
    return run_sweep(config, tmp_path_factory.mktemp("students") / "run", progress=False).path


@pytest.mark.parametrize("command, folder", [("diagnose", "diagnostics"), ("layer-errors", RunFolder.LAYER_ERRORS)])
def test_an_analysis_whose_tables_cannot_be_written_is_one_line_and_keeps_the_run(
    saved_students, tmp_path, command, folder
):
    run = tmp_path / "run"
    shutil.copytree(saved_students, run)
    (run / folder).write_text("a file where the tables' folder goes")
    before = sorted(path.name for path in run.iterdir())
    assert_one_line(CliRunner().invoke(main, [command, str(run), "--samples", "64"]))
    assert sorted(path.name for path in run.iterdir()) == before


def test_a_ladder_that_cannot_be_written_is_one_line(committed):
    shutil.rmtree(committed / RunFolder.LADDER)
    (committed / RunFolder.LADDER).write_text("a file where the ladder's folder goes")
    assert_one_line(CliRunner().invoke(main, ["ladder", str(committed)]))


@pytest.mark.parametrize("out", ["below a file", "/proc/joined"])
def test_join_and_reproduce_where_they_cannot_write_are_one_line(tmp_path, out):
    if out == "below a file":
        (tmp_path / "a file").write_text("")
        out = tmp_path / "a file" / "joined"
    parts = [str(COMMITTED.parent.parent / f"ladder_tied_r{r}" / "cpu") for r in (0, 1, 2)]
    assert_one_line(CliRunner().invoke(main, ["join", *parts, "--out", str(out)]))
    experiment = tmp_path / "tiny.toml"
    experiment.write_text(
        '[experiment]\ntitle = "tiny"\n[protocol]\nteachers = ["tied"]\n'
        '[scales.quick]\npreset = "quick"\ndepths = [2]\nsteps = 2\n'
    )
    result = CliRunner().invoke(main, ["reproduce", str(experiment), "--scale", "quick", "--out", str(out)])
    assert_one_line(result)
    assert "cannot write" in result.output or "Read-only" in result.output or "No such file" in result.output


def test_docs_where_they_cannot_be_written_is_one_line(tmp_path):
    results, root = tmp_path / "results", tmp_path / "root"
    shutil.copytree(COMMITTED, results / "ladder_tied_r0" / "cpu")
    root.mkdir()
    for name in ("README.md", "mkdocs.yml"):
        shutil.copy(COMMITTED.parents[2] / name, root / name)
    (root / "docs").write_text("a file where the docs' folder goes")
    readme = (root / "README.md").read_text()
    result = CliRunner().invoke(main, ["docs", "--reference", str(results), "--root", str(root)])
    assert_one_line(result)
    assert "docs" in result.output and (root / "README.md").read_text() == readme  # nothing written so far lost
