"""Long stages say what they are doing: from the code that does the work, through the job's folder, to the bar."""

import sys

from toymodels import run_sweep
from toymodels.results.storage import JobFolder, RunFolder
from toymodels.training.engine import train
from toymodels.training.progress import listening_to_stages, stage
from toymodels.training.samples import LABEL_CHUNK
from toymodels.workflows.parallel import ProgressMonitor


def test_stages_report_each_chunk_and_their_end_to_the_listener(tiny_config):
    reports = []
    config = tiny_config.replace(teacher_pool=3 * LABEL_CHUNK, steps=2, compile=False)
    with listening_to_stages(lambda *report: reports.append(report)):
        train(config)
    pool = [
        (done, total)
        for what, done, total in reports
        if what == f"labelling a teacher pool of {3 * LABEL_CHUNK} samples"
    ]
    assert pool == [(0, 3), (1, 3), (2, 3), (3, 3)]
    test_set = [(done, total) for what, done, total in reports if what == "labelling the test set"]
    assert test_set == [(0, 2), (1, 2), (2, 2)]
    assert ("testing the untrained discretised students (the references)", 1, 1) in reports
    assert list(stage("nobody listens", [1, 2])) == [1, 2]  # outside the block: no listener, same items


def test_a_job_folder_holds_its_unfinished_stage_only(tmp_path):
    folder = JobFolder(tmp_path)
    assert folder.stage() is None
    folder.write_stage("labelling the test set", 1, 4)
    assert folder.stage() == ("labelling the test set", 1, 4)
    folder.write_stage("labelling the test set", 4, 4)
    assert folder.stage() is None and not (tmp_path / JobFolder.STAGE).exists()
    folder.write_stage("labelling a teacher pool of 512 samples", 0, 1)
    folder.start()  # a killed job's stage is not shown when it starts again
    assert folder.stage() is None


def test_the_run_bar_shows_the_stage_a_job_is_in_and_drops_it_after(tmp_path, tiny_config, monkeypatch):
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)  # bars are for terminals
    run = RunFolder(tmp_path / "run")
    folder = run.job("job000")
    folder.path.mkdir(parents=True)
    monitor = ProgressMonitor(run, [], tiny_config.steps, "students", enabled=True)  # (a disabled bar counts nothing)
    monitor.folders = [folder]
    folder.write_stage("labelling a teacher pool of 1024 samples", 1, 2)
    monitor.refresh()
    assert monitor.stage_description == "labelling a teacher pool of 1024 samples"
    assert (monitor.stage_bar.n, monitor.stage_bar.total) == (1, 2)
    folder.write_stage("labelling a teacher pool of 1024 samples", 2, 2)
    monitor.refresh()
    assert monitor.stage_bar is None and monitor.stage_description is None


def test_a_run_leaves_no_stage_behind(tmp_path, tiny_config):
    run_sweep(tiny_config.replace(teacher_pool=LABEL_CHUNK, steps=2), out=tmp_path / "run", progress=False)
    assert not list((tmp_path / "run").rglob(JobFolder.STAGE))
