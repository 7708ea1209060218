"""Fault injection: damaged run folders, bad values, plug-ins that raise or return garbage, absurd
sweeps. Each gets one clear line (exit status 2, or 1 when some jobs failed), never a traceback,
and nothing a finished job wrote is changed."""

import hashlib
import json
import shutil

import pandas as pd
import pytest
from click.testing import CliRunner

from toymodels.cli.main import main
from toymodels.columns import CERTIFICATE_COLUMNS, MARK_COLUMNS, METRICS_COLUMNS
from toymodels.config import resolve_config
from toymodels.results.storage import CHECKSUMS, RunFolder
from toymodels.training.engine import train
from toymodels.training.jobs import Job
from toymodels.training.planning import job_memory_bytes
from toymodels.training.protocol import Protocol
from toymodels.workflows.parallel import saved_jobs

TINY = [
    "--preset",
    "quick",
    "--teacher",
    "tied",
    "--temps",
    "1.0",
    "--depths",
    "2,4",
    "--teacher-depth",
    "8",
    "--steps",
    "40",
    "--batch",
    "32",
    "--replicates",
    "1",
    "--loss",
    "mse",
    "--device",
    "cpu",
    "--quiet",
]

PLUGINS = """
import torch
from dataclasses import dataclass
from toymodels.models.losses import MSE
from toymodels.models.integrators import EULER
from toymodels.models.students import Architecture

class Raises(MSE):
    def losses(self, *arguments):
        raise ValueError("my loss broke")

class OneNumber(MSE):
    def losses(self, readout, *arguments):
        return readout.sum()

class NotFinite(MSE):
    def losses(self, readout, *arguments):
        return readout.sum(dim=(1, 2)) * float("nan")

RAISES, ONE_NUMBER, NOT_FINITE = Raises(), OneNumber(), NotFinite()

def broken_block(h, field):
    raise RuntimeError("my block broke")

BROKEN = Architecture(broken_block, order=1)

@dataclass(frozen=True)
class BreaksAtLayerThree(Architecture):  # a depth-2 student trains; a deeper one fails
    def norm_scale(self, layer):
        if layer >= 2:
            raise RuntimeError("layer 3 broke")
        return 1.0

BREAKS_DEEP = BreaksAtLayerThree(EULER)

def teacher_raises(depth, width, generator):
    raise KeyError("my teacher broke")

def teacher_garbage(depth, width, generator):
    return 42
"""


def invoke(*arguments):
    return CliRunner().invoke(main, [str(a) for a in arguments])


def assert_one_line(result, status: int, message: str):
    assert result.exit_code == status, result.output
    assert message in result.stderr, result.stderr
    assert "Traceback" not in result.output
    if status == 2:
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def fingerprints(folder, leave_out=()) -> dict:
    return {
        path.relative_to(folder): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*"))
        if path.is_file() and path.name not in leave_out
    }


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("faults") / "run"
    result = invoke("run", *TINY, "--checkpoint-every", "10", "--save-students", "--out", out)
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture
def run_copy(finished_run, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(finished_run, copy)
    return copy


def damage_every_job(name: str, data: bytes):
    def damage(run):
        for job in (run / "jobs").iterdir():
            (job / name).write_bytes(data)
        (run / "metrics.csv").unlink()  # the run is taken back to before its merge

    return damage


def unrecorded(run):
    """The run as one written before tables were recorded (checksums.json, and its provenance
    saying so): its tables are read for what they hold, not refused for not being the bytes the
    suite wrote."""
    (run / CHECKSUMS).unlink()
    provenance = json.loads((run / "provenance.json").read_text())
    for session in provenance["sessions"]:
        session.pop("checksums")
    (run / "provenance.json").write_text(json.dumps(provenance))


def foreign_metrics(run):
    unrecorded(run)
    (run / "metrics.csv").write_text("a,b\n1,2\n")


def text_in_losses(run):
    unrecorded(run)
    metrics = pd.read_csv(run / "metrics.csv")
    metrics["test_loss"] = metrics["test_loss"].astype(str) + "x"
    metrics.to_csv(run / "metrics.csv", index=False)


@pytest.mark.parametrize(
    "damage, damaged, command, message",
    [
        (foreign_metrics, "metrics.csv", "fit", "is not a toymodels metrics table (no column teacher"),
        (foreign_metrics, "metrics.csv", "plot", "is not a toymodels metrics table"),
        (
            lambda run: (run / "metrics.csv").write_bytes(b"\xff\xfe\x00garbage"),
            "metrics.csv",
            "fit",
            "is damaged: it is not the file the suite wrote",
        ),
        (
            lambda run: (unrecorded(run), (run / "metrics.csv").write_bytes(b"\xff\xfe,\x00\n\xff,\xfe\n")),
            "metrics.csv",
            "fit",
            "is not readable",
        ),
        (text_in_losses, "metrics.csv", "fit", "has text where numbers belong (column test_loss)"),
        (lambda run: (run / "config.json").write_text("{not json"), "config.json", "fit", "config.json is not valid"),
        (lambda run: (run / "config.json").write_text("[1, 2]"), "config.json", "fit", "must hold keys and values"),
        (
            lambda run: (run / "config.json").write_text('{"steps": "three"}'),
            "config.json",
            "fit",
            "steps must be a whole number, got 'three'",
        ),
        (lambda run: (run / "students.pt").write_bytes(b"junk"), "students.pt", "diagnose", "students.pt is damaged"),
        (damage_every_job("done.json", b"{half"), "done.json", "resume", "done.json is damaged"),
        (damage_every_job("metrics.csv", b"\x00\x01"), "metrics.csv", "resume", "metrics.csv is cut off"),
        (
            lambda run: ((run / "jobs.json").write_text("{oops"), (run / "metrics.csv").unlink()),
            "jobs.json",
            "resume",
            "jobs.json is damaged",
        ),
    ],
)
def test_a_damaged_run_file_is_one_line_and_nothing_else_changes(run_copy, damage, damaged, command, message):
    damage(run_copy)
    before = fingerprints(run_copy)
    arguments = ["run", "--resume", run_copy, "--quiet"] if command == "resume" else [command, run_copy]
    assert_one_line(invoke(*arguments), 2, message)
    after = fingerprints(run_copy, leave_out={".lock", ".owner"})
    assert after == {path: digest for path, digest in before.items() if path.name not in {".lock", ".owner"}}


@pytest.mark.parametrize("older", [CERTIFICATE_COLUMNS, (*MARK_COLUMNS, *CERTIFICATE_COLUMNS)])
def test_a_run_written_before_students_were_marked_or_certified_still_fits(run_copy, older):
    metrics = pd.read_csv(run_copy / "metrics.csv")
    assert list(metrics.columns) == [*METRICS_COLUMNS, *MARK_COLUMNS, *CERTIFICATE_COLUMNS, "gap"]  # written today
    unrecorded(run_copy)
    metrics.drop(columns=[*older, "gap"]).to_csv(run_copy / "metrics.csv", index=False)
    result = invoke("fit", run_copy)
    assert result.exit_code == 0, result.output


def test_a_damaged_progress_file_only_costs_the_progress_bar(run_copy, finished_run):
    damage_every_job("progress", b"zz")(run_copy)
    assert invoke("run", "--resume", run_copy, "--quiet").exit_code == 0
    pd.testing.assert_frame_equal(pd.read_csv(run_copy / "metrics.csv"), pd.read_csv(finished_run / "metrics.csv"))


@pytest.mark.parametrize(
    "option, plugin, message",
    [
        ("--loss", "RAISES", "fails on a test batch: ValueError: my loss broke (at "),
        ("--loss", "ONE_NUMBER", "must give one finite number per student (1 here) at the start of training, got ()"),
        ("--loss", "NOT_FINITE", "must give one finite number per student (1 here) at the start of training, got (1,)"),
        ("--student", "BROKEN", "fails on a test batch: RuntimeError: my block broke"),
        ("--teacher", "teacher_raises", "fails on a test batch: KeyError: 'my teacher broke'"),
        ("--teacher", "teacher_garbage", "returned int 42, not LayerWeights"),
    ],
)
def test_a_plugin_that_raises_or_returns_garbage_is_refused_before_anything_is_written(
    option, plugin, message, tmp_path
):
    (tmp_path / "plugins.py").write_text(PLUGINS)
    result = invoke("run", *TINY, option, f"{tmp_path / 'plugins.py'}:{plugin}", "--out", tmp_path / "never")
    assert_one_line(result, 2, message)
    assert not (tmp_path / "never").exists()


def test_a_plugin_failing_in_one_job_leaves_the_others_results(tmp_path):
    """The depth-4 job fails at its first step; the depth-2 job finishes and is kept."""
    (tmp_path / "plugins.py").write_text(PLUGINS)
    config = resolve_config(
        "quick",
        teachers=("tied",),
        temperatures=(1.0,),
        depths=(2, 4),
        teacher_depth=8,
        steps=40,
        batch=32,
        replicates=1,
        loss="mse",
    )
    protocol = Protocol.of(config)
    gigabytes = 0.9 * job_memory_bytes(protocol, Job.whole(protocol)) / 2**30  # one job per depth
    out = tmp_path / "run"
    result = invoke(
        "run", *TINY, "--student", f"{tmp_path / 'plugins.py'}:BREAKS_DEEP", "--max-memory", gigabytes, "--out", out
    )
    assert_one_line(result, 1, "1 job(s) failed")
    assert "RuntimeError: layer 3 broke" in result.output
    folder = RunFolder(out)
    finished = [job for job in saved_jobs(folder) if folder.job(job.name).done()]
    assert [job.depths for job in finished] == [(2,)]
    assert folder.job(finished[0].name).metrics().step.max() == 40


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--depths", "2,10000000"], "one student of depth 10000000 with its teacher needs"),
        (["--batch", "1000000000"], "with its teacher needs"),
        (["--steps", "1000000000000"], "sweep refused: its matmuls alone"),
    ],
)
def test_an_absurd_sweep_is_refused_with_its_estimate_before_anything_is_written(arguments, message, tmp_path):
    result = invoke("run", "--teacher", "tied", "--temps", "1.0", "--quiet", *arguments, "--out", tmp_path / "never")
    assert_one_line(result, 2, message)
    assert not (tmp_path / "never").exists()


def test_a_run_never_writes_into_a_folder_of_other_files(tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("my notes")
    assert_one_line(invoke("run", *TINY, "--out", mine), 2, "holds files and is not a toymodels run")
    assert [path.name for path in mine.iterdir()] == ["notes.txt"]


@pytest.fixture
def interrupted_run(run_copy):
    """The finished run taken back to step 40 of training with checkpoints at steps 30 (current)
    and 20 (previous), as a run killed after its last checkpoint leaves it."""
    folder = RunFolder(run_copy)
    job = saved_jobs(folder)[0]
    job_folder = folder.job(job.name)
    for name in ("done.json", "metrics.csv", "students.pt"):
        (job_folder.path / name).unlink(missing_ok=True)
    for name in ("metrics.csv", "students.pt", "fit.txt", "fit.json", "fits.csv"):
        (run_copy / name).unlink()
    train(folder.config(), job, checkpoints=job_folder)  # leaves its checkpoints: no `finish` marks it done
    assert (job_folder.path / "checkpoint.pt").is_file() and (job_folder.path / "checkpoint.previous.pt").is_file()
    return run_copy, job_folder.path


def truncate(path):
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


@pytest.mark.parametrize(
    "damaged, said",
    [
        (["checkpoint.pt"], "resumed from checkpoint.previous.pt at step 20"),
        (["checkpoint.pt", "checkpoint.previous.pt"], "no whole checkpoint left: the job starts again from step 0"),
    ],
)
def test_a_damaged_checkpoint_falls_back_and_says_so(interrupted_run, finished_run, damaged, said):
    run, job = interrupted_run
    for name in damaged:
        truncate(job / name)
    result = invoke("run", "--resume", run, "--quiet")
    assert result.exit_code == 0, result.output
    assert "checkpoint.pt was damaged (checksum mismatch), set aside as checkpoint.damaged" in result.output
    assert said in result.output
    assert (job / "checkpoint.damaged").is_file()  # kept for a look, never silently deleted
    pd.testing.assert_frame_equal(pd.read_csv(run / "metrics.csv"), pd.read_csv(finished_run / "metrics.csv"))


def test_a_long_sweep_is_announced_with_its_estimate(monkeypatch, tmp_path):
    monkeypatch.setattr("toymodels.training.preflight.ANNOUNCED_SECONDS", 0)  # this tiny sweep stands for a long one
    result = invoke("run", *TINY, "--out", tmp_path / "run")
    assert result.exit_code == 0, result.output
    assert "a long sweep: its matmuls alone (" in result.output and "GFLOP/s measured" in result.output


def test_an_experiment_whose_job_fails_says_so_in_lines_not_a_traceback(tmp_path):
    """`reproduce` reports failed jobs as `run` does: the finished job fitted, the failed one named."""
    (tmp_path / "plugins.py").write_text(PLUGINS)
    config = resolve_config(
        "quick", teachers=("tied",), depths=(2, 4), teacher_depth=8, steps=40, batch=32, replicates=1, loss="mse"
    )
    gigabytes = 0.9 * job_memory_bytes(Protocol.of(config), Job.whole(Protocol.of(config))) / 2**30
    (tmp_path / "broken.toml").write_text(f"""
[experiment]
title = "a student that breaks past layer 2"
figures = ["depth"]

[protocol]
teachers = ["tied"]
loss = "mse"
student = "{tmp_path / "plugins.py"}:BREAKS_DEEP"

[scales.toy]
preset = "quick"
depths = [2, 4]
teacher_depth = 8
steps = 40
batch = 32
replicates = 1
max_memory_gb = {gigabytes}
""")
    result = invoke("reproduce", tmp_path / "broken.toml", "--scale", "toy", "--out", tmp_path / "run", "--quiet")
    assert_one_line(result, 1, "1 job(s) failed")
    assert "RuntimeError: layer 3 broke" in result.output
