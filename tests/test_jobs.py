"""Sweeps cut into jobs: the same numbers however they run, resume after kill -9, faults contained."""

import json
import os
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pandas as pd
import pytest
import torch
from click.testing import CliRunner

from toymodels import RunFolder, ToymodelsError, run_sweep
from toymodels.cli.main import main
from toymodels.training.jobs import Job
from toymodels.training.planning import job_memory_bytes, plan_jobs
from toymodels.training.protocol import Protocol
from toymodels.workflows.parallel import saved_jobs

KEYS = ["teacher", "replicate", "temperature", "depth", "step"]


def metrics(path) -> pd.DataFrame:
    return pd.read_csv(path / "metrics.csv").sort_values(KEYS, ignore_index=True)


def students(path) -> dict:
    return torch.load(path / "students.pt")["state_dict"]


def assert_same_students(a, b):
    for name in a:
        assert torch.equal(a[name], b[name]), name


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The tiny two-teacher sweep trained as one job, in this process."""
    from toymodels import resolve_config

    config = resolve_config(
        "quick",
        teachers=["tied", "independent"],
        temperatures=[0.5, 1.0],
        depths=[1, 2, 3],
        teacher_depth=8,
        batch=32,
        replicates=2,
        steps=40,
        test_batches=1,
        test_batch_size=64,
        evals=5,
        device="cpu",
        save_students=True,
    )
    torch.set_num_threads(1)
    folder = run_sweep(config, tmp_path_factory.mktemp("reference") / "run", progress=False)
    return config, folder.path


def test_every_cut_covers_each_student_once_and_fits_its_budget(reference):
    protocol = Protocol.of(reference[0])
    everyone = sorted(Job.whole(protocol).students(), key=repr)
    whole = job_memory_bytes(protocol, Job.whole(protocol))
    deepest = job_memory_bytes(protocol, Job("one", (0,), (0,), (3,)))
    for workers, budget in [(1, None), (3, None), (8, None), (50, None), (1, whole // 3), (2, 2 * deepest)]:
        jobs = plan_jobs(protocol, workers, budget)
        assert sorted((s for job in jobs for s in job.students()), key=repr) == everyone
        assert len(jobs) >= min(workers, len(everyone))
        assert budget is None or all(job_memory_bytes(protocol, job) <= budget for job in jobs)
        assert len({job.name for job in jobs}) == len(jobs)
    assert [len(job.instances) for job in plan_jobs(protocol, 4)] == [1, 1, 1, 1]  # teachers are cut first
    with pytest.raises(ToymodelsError, match="one student of depth 3 with its teacher needs"):
        plan_jobs(protocol, 1, deepest - 1)


@pytest.mark.slow
def test_jobs_on_worker_processes_give_the_same_numbers(reference, tmp_path, capsys):
    config, path = reference
    folder = run_sweep(config, tmp_path / "run", progress=False, jobs=3)
    assert len(folder.jobs()) >= 3
    assert capsys.readouterr().out.count(" done in ") == len(folder.jobs())  # a line per finished job
    pd.testing.assert_frame_equal(metrics(path), metrics(folder.path))
    assert_same_students(students(path), students(folder.path))


@pytest.mark.slow
def test_a_teachers_numbers_do_not_depend_on_where_it_sits(reference, tmp_path):
    """Every stream is keyed by what it serves: the tied teacher's students, at T 1.0 and replicate 1,
    train bit for bit alike in the reference (first of two teachers, two temperatures, two
    replicates, one job), alone (one temperature, one replicate), and after a plug-in teacher in
    three jobs."""
    config, path = reference
    plug_in = f"{Path(__file__).resolve().parent.parent / 'examples' / 'custom_teacher.py'}:drifting"
    alone = run_sweep(
        config.replace(teachers=["tied"], temperatures=[1.0], replicates=1, first_replicate=1),
        tmp_path / "alone",
        progress=False,
    )
    after = run_sweep(
        config.replace(teachers=[plug_in, "tied"], temperatures=[1.0, 0.25]), tmp_path / "after", progress=False, jobs=3
    )
    assert len(after.jobs()) == 3

    def tied_rows(folder_path):
        rows = metrics(folder_path).query("teacher == 'tied' and temperature == 1.0 and replicate == 1")
        return rows.drop(columns=[c for c in rows if c.endswith("seconds")]).reset_index(drop=True)

    first = tied_rows(path)
    assert len(first) > 0 and first.start.eq("zero").all()  # a start drawn from the student's own stream
    pd.testing.assert_frame_equal(tied_rows(alone.path), first, check_exact=True)
    pd.testing.assert_frame_equal(tied_rows(after.path), first, check_exact=True)


def test_dask_cluster_gives_the_same_numbers(reference, tmp_path):
    distributed = pytest.importorskip("dask.distributed")
    config, path = reference
    # Worker threads in this process: worker processes are covered by the test above, and cost seconds to start.
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None
    ) as cluster:
        folder = run_sweep(
            config, tmp_path / "run", progress=False, backend="dask", scheduler=cluster.scheduler_address
        )
    assert len(folder.jobs()) >= 2  # one per worker thread of the cluster
    pd.testing.assert_frame_equal(metrics(path), metrics(folder.path))


def test_a_sweep_too_big_for_memory_is_cut_and_says_so(reference, tmp_path):
    config, path = reference
    protocol = Protocol.of(config)
    limit = job_memory_bytes(protocol, Job.whole(protocol)) / 4 / 2**30
    result = CliRunner().invoke(
        main,
        [
            "run",
            "--config",
            str(path / "config.json"),
            "--max-memory",
            f"{limit:.6f}",
            "--out",
            str(tmp_path / "run"),
            "--quiet",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "more than the" in result.output and "it runs as" in result.output
    assert len(RunFolder(tmp_path / "run").jobs()) >= 4
    pd.testing.assert_frame_equal(metrics(path), metrics(tmp_path / "run"))


def start_run(out, config_file, *options, env=None):
    """`toymodels run` in a process of its own, as a user types it."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}  # the reference trains on one thread too
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "toymodels",
            "run",
            "--config",
            str(config_file),
            *options,
            "--quiet",
            "--out",
            str(out),
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


# Loaded by every Python process the test starts (the run and its worker processes): each job,
# once it has written its checkpoint at step HOLD_AT, prints a line and holds still until another
# run owns the folder. The test kills the run on that line: no sleep races the training.
HOLD = """
import os, time
from toymodels.results import storage
save_checkpoint = storage.JobFolder.save_checkpoint

def save_then_hold(folder, state):
    save_checkpoint(folder, state)
    if state["step"] == int(os.environ["HOLD_AT"]):
        run = storage.RunFolder(folder.path.parent.parent)
        owner = run.owner()
        print(f"held {folder.path.name} at {state['step']}", flush=True)
        while run.owner() == owner:
            time.sleep(0.01)

storage.JobFolder.save_checkpoint = save_then_hold
"""


def kill_when_held(out, config_file, options, step, jobs, hooks):
    """Start a run, wait until `jobs` of its jobs hold at `step`, then kill -9 the run."""
    (hooks / "sitecustomize.py").write_text(HOLD)
    path = os.pathsep.join(filter(None, [str(hooks), os.environ.get("PYTHONPATH")]))
    process = start_run(out, config_file, *options, env={"PYTHONPATH": path, "HOLD_AT": str(step)})
    held = set()
    while len(held) < jobs:
        line = process.stdout.readline()
        assert line, f"the run ended before step {step}: {process.stderr.read()}"
        held |= {line.split()[1]} if line.startswith("held ") else set()
    process.send_signal(signal.SIGKILL)
    process.wait()


@pytest.mark.slow
def test_kill_minus_nine_then_resume_gives_the_numbers_of_an_uninterrupted_run(reference, tmp_path):
    """Killed while two worker processes train (they outlive the run, and must stop once another
    run owns the folder), then killed again mid-way through the run that resumed it; the last
    resume ends with the numbers of an uninterrupted run: no evaluation lost or written twice."""
    config, path = reference
    whole = run_sweep(config.replace(steps=100, checkpoint_every=20), tmp_path / "whole", progress=False).path
    out, hooks = tmp_path / "killed", tmp_path / "hooks"
    hooks.mkdir()
    options = ["--steps", "100", "--checkpoint-every", "20"]
    kill_when_held(out, path / "config.json", [*options, "--jobs", "2"], 20, 2, hooks)
    kill_when_held(out, path / "config.json", [*options, "--jobs", "1"], 60, 1, hooks)  # the same command resumes
    folder = RunFolder(out)
    assert not folder.finished()
    assert [folder.job(job.name).load_checkpoint()["step"] for job in saved_jobs(folder)] == [60, 20]
    kept = {job.name: folder.job(job.name).load_checkpoint()["seconds"] for job in saved_jobs(folder)}
    assert all(seconds > 0 for seconds in kept.values())  # the killed processes' training time
    partial = CliRunner().invoke(main, ["fit", str(out)])
    assert "partial run: 2 of 2 jobs unfinished" in partial.stderr
    resumed = CliRunner().invoke(main, ["run", "--resume", str(out), "--quiet"])
    assert resumed.exit_code == 0, resumed.output
    pd.testing.assert_frame_equal(metrics(whole), metrics(out))
    assert_same_students(students(whole), students(out))
    assert not list(out.glob("jobs/*/checkpoint.pt"))
    assert all(folder.job(name).done()["seconds"] > seconds for name, seconds in kept.items())  # summed over resumes


def test_a_diverging_student_is_marked_and_left_out_while_the_others_train_on(reference, tmp_path):
    config, path = reference
    result = CliRunner().invoke(
        main, ["run", "--config", str(path / "config.json"), "--depth-lr", "3=1e9", "--out", str(tmp_path / "run")]
    )
    assert result.exit_code == 0, result.output
    assert result.stdout.count("diverged, left out: ℓ=3 r0 at step") == 4  # every teacher and temperature
    diverged = metrics(tmp_path / "run")
    last = diverged[diverged.step == 40]
    assert (last.diverged_at_step.notna() == (last.depth == 3)).all()
    fits = CliRunner().invoke(main, ["fit", str(tmp_path / "run"), "--json"])
    assert all(fit["depths"] == [1, 2] and len(fit["diverged"]) == 2 for fit in json.loads(fits.stdout)["fits"])
    others = diverged.depth < 3  # exactly what they learn without the diverging students beside them
    pd.testing.assert_frame_equal(
        metrics(path)[others].drop(columns="diverged_at_step"), diverged[others].drop(columns="diverged_at_step")
    )


@pytest.mark.slow
def test_a_failing_job_is_reported_and_the_others_finish(tmp_path):
    plugin = tmp_path / "flaky.py"  # passes the rehearsal in this process, fails in its job's worker process
    plugin.write_text(
        f"import os\nfrom toymodels.models.teachers import independent\n"
        f"def flaky(depth, width, generator):\n"
        f"    if os.getpid() != {os.getpid()}:\n        raise RuntimeError('teacher exploded')\n"
        f"    return independent(depth, width, generator)\n"
    )
    out = tmp_path / "run"
    options = [
        "--preset",
        "quick",
        "--teacher",
        f"tied,{plugin}:flaky",
        "--depths",
        "1,2,3",
        "--temps",
        "1.0",
        "--teacher-depth",
        "8",
        "--steps",
        "20",
        "--batch",
        "16",
        "--replicates",
        "1",
        "--device",
        "cpu",
        "--jobs",
        "2",
        "--quiet",
    ]
    failed = CliRunner().invoke(main, ["run", *options, "--out", str(out)])
    assert failed.exit_code == 1
    assert "FAILED: RuntimeError: teacher exploded" in failed.output and "1 job(s) failed" in failed.stderr
    folder = RunFolder(out)
    broken = [job for job in saved_jobs(folder) if folder.job(job.name).error()]
    assert len(broken) == 1 and '"steps": 20' in folder.job(broken[0].name).error()  # its config is in the report
    assert "tied" in failed.stdout  # the table of what finished
    for command in ("fit", "plot"):
        partial = CliRunner().invoke(main, [command, str(out)])
        assert partial.exit_code == 0 and "partial run: 1 of 2 jobs unfinished" in partial.stderr
        assert "failed" in partial.stderr
    diagnose = CliRunner().invoke(main, ["diagnose", str(out)])
    assert diagnose.exit_code == 2 and "is unfinished" in diagnose.stderr
    plugin.write_text("from toymodels.models.teachers import independent as flaky\n")  # the cause fixed
    resumed = CliRunner().invoke(main, ["run", "--resume", str(out), "--jobs", "2"])
    assert resumed.exit_code == 0, resumed.output
    assert "1 of 2 jobs finished before" in resumed.output and folder.finished()


def test_two_runs_into_one_folder_are_refused_and_into_two_folders_do_not_interfere(reference, tmp_path):
    config, path = reference
    folder = RunFolder.create(tmp_path / "busy", config)
    with folder.lock():
        refused = CliRunner().invoke(main, ["run", "--config", str(path / "config.json"), "--out", str(folder.path)])
    assert refused.exit_code == 2 and "in use by another toymodels run" in refused.stderr
    with ThreadPoolExecutor(2) as pool:  # two runs at once, into two folders
        list(pool.map(lambda name: run_sweep(config, tmp_path / name, progress=False), ("a", "b")))
    pd.testing.assert_frame_equal(metrics(tmp_path / "a"), metrics(tmp_path / "b"))
    pd.testing.assert_frame_equal(metrics(path), metrics(tmp_path / "a"))


def test_resume_refuses_protocol_options_and_folders_without_a_run(reference, tmp_path):
    _, path = reference
    mixed = CliRunner().invoke(main, ["run", "--resume", str(path), "--steps", "10"])
    assert mixed.exit_code == 2 and "drop --steps" in mixed.stderr
    empty = CliRunner().invoke(main, ["run", "--resume", str(tmp_path)])
    assert empty.exit_code == 2 and "holds no run to resume" in empty.stderr
    finished = CliRunner().invoke(main, ["run", "--resume", str(path), "--quiet"])
    assert finished.exit_code == 0 and "α_ℓ" in finished.stdout


def test_a_run_whose_jobs_all_failed_says_why(tmp_path):
    """A loss that passes the rehearsal (batch 4) and fails on the run's batches."""
    plugin = tmp_path / "broken.py"
    plugin.write_text(
        "from toymodels.models.losses import MSE\n"
        "class SmallBatchesOnly(MSE):\n"
        "    def losses(self, readout, *arguments):\n"
        "        if readout.shape[1] > 4:\n"
        "            raise RuntimeError('loss exploded')\n"
        "        return super().losses(readout, *arguments)\n"
        "broken = SmallBatchesOnly()\n"
    )
    result = CliRunner().invoke(
        main,
        [
            "run",
            "--preset",
            "quick",
            "--loss",
            f"{plugin}:broken",
            "--depths",
            "1,2",
            "--temps",
            "1.0",
            "--teacher-depth",
            "8",
            "--steps",
            "5",
            "--batch",
            "8",
            "--replicates",
            "1",
            "--device",
            "cpu",
            "--quiet",
            "--out",
            str(tmp_path / "run"),
        ],
    )
    assert result.exit_code == 1
    assert "every job failed; the first with RuntimeError: loss exploded" in result.stderr
    assert "no evaluations" not in result.output
