"""Every record of a run is checked before anything is read from it, and its absence is a finding:
checksums.json deleted (where the run's provenance says it wrote one), emptied or cut off, fit.json
or provenance.json cut off, and a run a newer suite wrote are each refused in one line with exit
status 2, nothing printed before it, and the folder left as it was."""

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from toymodels.cli.main import main

pytestmark = pytest.mark.slow  # one tiny run, then a command per damage

TINY = "--preset quick --teacher tied --temps 1.0 --depths 2,4 --teacher-depth 8 --steps 40 --batch 32 --replicates 2"
TINY = [*TINY.split(), "--loss", "mse", "--device", "cpu", "--quiet"]


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "tiny"
    result = CliRunner().invoke(main, ["run", *TINY, "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture
def run(finished, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(finished, copy)
    return copy


def digest(folder: Path) -> dict:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.rglob("*") if p.is_file()
    }


def cut(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])


def edit_provenance(**changes):
    def edit(path: Path) -> None:
        document = json.loads(path.read_text())
        document["sessions"][-1].update(changes)
        path.write_text(json.dumps(document))

    return edit


DAMAGES = {
    "checksums deleted": ("checksums.json", Path.unlink, "checksums.json is missing, and"),
    "checksums emptied": ("checksums.json", lambda path: path.write_text("{}"), "checksums.json records no table"),
    "checksums cut": ("checksums.json", cut, "checksums.json is damaged"),
    "fit.json cut": ("fit.json", cut, "fit.json is damaged"),
    "provenance cut": ("provenance.json", cut, "provenance.json is damaged"),
    "newer version": (
        "provenance.json",
        edit_provenance(toymodels="9.0.0"),
        "written by a newer toymodels (version 9.0.0)",
    ),
    "newer stream keys": ("provenance.json", edit_provenance(stream_keys=99), "stream_keys 99"),
}


@pytest.mark.parametrize("damage", DAMAGES)
@pytest.mark.parametrize("command", [["fit"], ["plot"]])
def test_a_damaged_or_newer_record_is_refused_in_one_line_before_anything_is_printed(run, damage, command):
    name, damage_it, message = DAMAGES[damage]
    damage_it(run / name)
    before = digest(run)
    result = CliRunner().invoke(main, [*command, str(run)])
    assert result.exit_code == 2, result.output
    assert len(result.output.strip().splitlines()) == 1 and message in result.output, result.output
    assert digest(run) == before  # nothing written, nothing restored behind the user's back


def test_an_edited_table_is_refused_while_its_record_stands_and_a_run_before_records_says_so_once(run):
    metrics = run / "metrics.csv"
    metrics.write_text(metrics.read_text().replace("tied,0,", "tied,1,", 1))
    assert CliRunner().invoke(main, ["fit", str(run)]).exit_code == 2
    # a run made before records: no checksums.json, no provenance saying it wrote one
    (run / "checksums.json").unlink()
    provenance = json.loads((run / "provenance.json").read_text())
    for session in provenance["sessions"]:
        del session["checksums"]
    (run / "provenance.json").write_text(json.dumps(provenance))
    metrics.write_text(metrics.read_text().replace("tied,1,", "tied,0,", 1))
    result = CliRunner().invoke(main, ["fit", str(run)])
    assert result.exit_code == 0, result.output
    notes = [line for line in result.output.splitlines() if "has no checksums.json" in line]
    assert len(notes) == 1 and "complete last row only" in notes[0]
