"""A committed run is read-only to every command that reads it: fit, plot (which draws into a
folder of the user's choice), diagnose, layer-errors, ladder, reproduce --list and a resume of a
finished run each leave its folder byte for byte as committed."""

import hashlib
from pathlib import Path

import pytest
from click.testing import CliRunner

from toymodels.cli.main import main

pytestmark = pytest.mark.slow  # a dozen commands on committed runs

FIGURES = Path(__file__).resolve().parent.parent / "figures"
RUN, LADDER = FIGURES / "teacher24" / "cpu", FIGURES / "ladder_tied_r0" / "cpu"


def digest(folder: Path) -> dict:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*"))
            if p.is_file()}  # fmt: skip


@pytest.mark.parametrize(
    "command, exit_code",
    [
        (["fit", RUN], 0),
        (["fit", "--json", RUN], 0),
        (["plot", RUN], 2),  # refused: a committed folder is not drawn into
        (["diagnose", RUN], 2),  # no saved students: refused, nothing written
        (["layer-errors", RUN], 2),
        (["run", "--resume", RUN], 0),  # nothing left to train: its fit as recorded
        (["ladder", LADDER], 0),
        (["reproduce", "--list"], 0),
    ],
)
def test_a_command_that_reads_a_committed_run_leaves_it_byte_for_byte(monkeypatch, command, exit_code):
    monkeypatch.chdir(FIGURES.parent)  # where `figures/` is the committed tree
    folders = [RUN, LADDER]
    before = [digest(folder) for folder in folders]
    result = CliRunner().invoke(main, [str(part) for part in command])
    assert result.exit_code == exit_code, result.output
    assert [digest(folder) for folder in folders] == before


def test_plot_draws_a_committed_run_into_the_folder_asked_for(monkeypatch, tmp_path):
    monkeypatch.chdir(FIGURES.parent)
    before = digest(RUN)
    refused = CliRunner().invoke(main, ["plot", str(RUN)])
    assert refused.exit_code == 2 and "--out DIR" in refused.output and len(refused.output.strip().splitlines()) == 1
    drawn = CliRunner().invoke(main, ["plot", str(RUN), "--out", str(tmp_path / "figures")])
    assert drawn.exit_code == 0, drawn.output
    assert any(tmp_path.glob("figures/*.png")) and digest(RUN) == before


def test_a_resume_of_a_finished_run_prints_its_fit_and_writes_nothing(monkeypatch):
    monkeypatch.chdir(FIGURES.parent)
    result = CliRunner().invoke(main, ["run", "--resume", str(RUN), "--compile"])
    assert result.exit_code == 0, result.output
    assert (RUN / "fit.txt").read_text() in result.output
