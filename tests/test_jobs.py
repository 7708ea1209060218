"""Sweeps cut into jobs: the same numbers however they run, resume after kill -9, faults contained."""

import json
import os
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest
import torch
from click.testing import CliRunner

from toymodels import RunFolder, ToymodelsError, run_sweep
from toymodels.cli import main
from toymodels.jobs import Job, job_memory_bytes, plan_jobs

KEYS = ["teacher", "replicate", "temperature", "depth", "step"]
TINY = ["--teacher", "tied,independent", "--temps", "0.5,1.0", "--depths", "1,2,3", "--teacher-depth", "8",
        "--batch", "32", "--replicates", "2", "--device", "cpu", "--quiet"]


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
    config = resolve_config("quick", teachers=["tied", "independent"], temperatures=[0.5, 1.0], depths=[1, 2, 3],
                            teacher_depth=8, batch=32, replicates=2, steps=40, device="cpu", save_students=True)
    torch.set_num_threads(1)
    folder = run_sweep(config, tmp_path_factory.mktemp("reference") / "run", progress=False)
    return config, folder.path


def test_every_cut_covers_each_student_once_and_fits_its_budget(reference):
    config, _ = reference
    everyone = sorted(Job.whole(config).students(), key=repr)
    whole = job_memory_bytes(config, Job.whole(config))
    deepest = job_memory_bytes(config, Job("one", (0,), (0,), (3,)))
    for workers, budget in [(1, None), (3, None), (8, None), (50, None), (1, whole // 3), (2, 2 * deepest)]:
        jobs = plan_jobs(config, workers, budget)
        assert sorted((s for job in jobs for s in job.students()), key=repr) == everyone
        assert len(jobs) >= min(workers, len(everyone))
        assert budget is None or all(job_memory_bytes(config, job) <= budget for job in jobs)
        assert len({job.name for job in jobs}) == len(jobs)
    assert [len(job.instances) for job in plan_jobs(config, 4)] == [1, 1, 1, 1]  # teachers are cut first
    with pytest.raises(ToymodelsError, match="one student of depth 3 needs"):
        plan_jobs(config, 1, deepest - 1)


def test_jobs_on_worker_processes_give_the_same_numbers(reference, tmp_path, capsys):
    config, path = reference
    folder = run_sweep(config, tmp_path / "run", progress=False, jobs=3)
    assert len(folder.jobs()) >= 3
    assert capsys.readouterr().out.count(" done in ") == len(folder.jobs())  # a line per finished job
    pd.testing.assert_frame_equal(metrics(path), metrics(folder.path))
    assert_same_students(students(path), students(folder.path))


def test_dask_cluster_gives_the_same_numbers(reference, tmp_path):
    distributed = pytest.importorskip("dask.distributed")
    config, path = reference
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        folder = run_sweep(config, tmp_path / "run", progress=False, backend="dask",
                           scheduler=cluster.scheduler_address)
    assert len(folder.jobs()) >= 2  # one per worker thread of the cluster
    pd.testing.assert_frame_equal(metrics(path), metrics(folder.path))


def test_a_sweep_too_big_for_memory_is_cut_and_says_so(reference, tmp_path):
    config, path = reference
    limit = job_memory_bytes(config, Job.whole(config)) / 4 / 2**30
    result = CliRunner().invoke(main, ["run", "--config", str(path / "config.json"), "--max-memory", f"{limit:.6f}",
                                       "--out", str(tmp_path / "run"), "--quiet"])
    assert result.exit_code == 0, result.output
    assert "more than the" in result.output and "it runs as" in result.output
    assert len(RunFolder(tmp_path / "run").jobs()) >= 4
    pd.testing.assert_frame_equal(metrics(path), metrics(tmp_path / "run"))


def start_run(out, *options):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # the reference trained on one thread too
    return subprocess.Popen([sys.executable, "-m", "toymodels", "run", *TINY, *options, "--out", str(out)],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def wait_for_step(out, step, process, timeout=120):
    deadline = time.monotonic() + timeout
    while RunFolder(out).job("job000").progress() < step:
        assert process.poll() is None, process.stderr.read()
        assert time.monotonic() < deadline, "the run did not get there in time"
        time.sleep(0.05)


@pytest.mark.parametrize("jobs, kills", [(1, (30, 170)), (2, (100,))])
def test_kill_minus_nine_then_resume_gives_the_numbers_of_an_uninterrupted_run(tmp_path, jobs, kills):
    """Killed twice (the second time mid-way through a resumed run), or killed while two worker
    processes train (they outlive the run, and must stop once the resume owns the folder)."""
    options = ["--steps", "300", "--checkpoint-every", "20", "--save-students", "--jobs", str(jobs)]
    uninterrupted = start_run(tmp_path / "whole", *options)
    assert uninterrupted.wait(timeout=300) == 0, uninterrupted.stderr.read()
    out = tmp_path / "killed"
    for step in kills:
        process = start_run(out, *options)
        wait_for_step(out, step, process)
        process.send_signal(signal.SIGKILL)
        process.wait()
    folder = RunFolder(out)
    assert not folder.finished() and folder.job("job000").load_checkpoint()["step"] >= kills[-1] - 20
    partial = CliRunner().invoke(main, ["fit", str(out)])
    assert f"partial run: {jobs} of {jobs} jobs unfinished" in partial.stderr
    resumed = CliRunner().invoke(main, ["run", "--resume", str(out), "--jobs", str(jobs), "--quiet"])
    assert resumed.exit_code == 0, resumed.output
    pd.testing.assert_frame_equal(metrics(tmp_path / "whole"), metrics(out))  # none lost, none twice
    assert_same_students(students(tmp_path / "whole"), students(out))
    assert not list(out.glob("jobs/*/checkpoint.pt"))


def test_a_diverging_student_is_marked_and_left_out_while_the_others_train_on(reference, tmp_path):
    config, path = reference
    result = CliRunner().invoke(main, ["run", "--config", str(path / "config.json"), "--depth-lr", "3=1e9",
                                       "--out", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    assert result.stdout.count("diverged, left out: ℓ=3 r0 at step") == 4  # every teacher and temperature
    diverged = metrics(tmp_path / "run")
    last = diverged[diverged.step == 40]
    assert (last.diverged_at_step.notna() == (last.depth == 3)).all()
    fits = CliRunner().invoke(main, ["fit", str(tmp_path / "run"), "--json"])
    assert all(fit["depths"] == [1, 2] and len(fit["diverged"]) == 2 for fit in json.loads(fits.stdout)["fits"])
    others = diverged.depth < 3  # exactly what they learn without the diverging students beside them
    pd.testing.assert_frame_equal(metrics(path)[others].drop(columns="diverged_at_step"),
                                  diverged[others].drop(columns="diverged_at_step"))


def test_a_failing_job_is_reported_and_the_others_finish(tmp_path):
    plugin = tmp_path / "flaky.py"
    plugin.write_text("from toymodels.teachers import independent\n"
                      "def flaky(depth, width, generator):\n    raise RuntimeError('teacher exploded')\n")
    out = tmp_path / "run"
    options = ["--teacher", f"tied,{plugin}:flaky", "--depths", "1,2,3", "--temps", "1.0", "--teacher-depth", "8",
               "--steps", "20", "--batch", "16", "--replicates", "1", "--device", "cpu", "--jobs", "2", "--quiet"]
    failed = CliRunner().invoke(main, ["run", *options, "--out", str(out)])
    assert failed.exit_code == 1
    assert "FAILED: RuntimeError: teacher exploded" in failed.output and "1 job(s) failed" in failed.stderr
    folder = RunFolder(out)
    broken = [job for job in folder.jobs() if folder.job(job.name).error()]
    assert len(broken) == 1 and '"steps": 20' in folder.job(broken[0].name).error()  # its config is in the report
    assert "tied" in failed.stdout  # the table of what finished
    for command in ("fit", "plot"):
        partial = CliRunner().invoke(main, [command, str(out)])
        assert partial.exit_code == 0 and "partial run: 1 of 2 jobs unfinished" in partial.stderr
        assert "failed" in partial.stderr
    diagnose = CliRunner().invoke(main, ["diagnose", str(out)])
    assert diagnose.exit_code == 2 and "is unfinished" in diagnose.stderr
    plugin.write_text("from toymodels.teachers import independent as flaky\n")  # the cause fixed
    resumed = CliRunner().invoke(main, ["run", "--resume", str(out), "--jobs", "2"])
    assert resumed.exit_code == 0, resumed.output
    assert "1 of 2 jobs finished before" in resumed.output and folder.finished()


def test_two_runs_into_one_folder_are_refused_and_into_two_folders_do_not_interfere(reference, tmp_path):
    config, path = reference
    folder = RunFolder.create(tmp_path / "busy", config)
    with folder.lock():
        refused = CliRunner().invoke(main, ["run", "--config", str(path / "config.json"), "--out", str(folder.path)])
    assert refused.exit_code == 2 and "in use by another toymodels run" in refused.stderr
    side_by_side = [start_run(tmp_path / name, "--steps", "40") for name in ("a", "b")]
    assert all(process.wait(timeout=300) == 0 for process in side_by_side)
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

