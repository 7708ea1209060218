"""A run on a shared machine trains on the cores other processes leave free (performance/threads.py),
which changes its speed and never its numbers."""

import subprocess
import sys
import time

import pandas as pd
import pytest
import torch

from toymodels.api import run_sweep
from toymodels.performance import threads
from toymodels.training.engine import train

CPU = torch.device("cpu")


def test_a_busy_process_is_seen_as_a_busy_core():
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)
        assert threads.cores_busy_elsewhere() > 0.6
    finally:
        busy.kill()
        busy.wait()


@pytest.fixture
def two_threads_by_default(monkeypatch):
    """torch at its default of 2 threads on a 2-core machine whose other process keeps 1 core busy."""
    monkeypatch.setattr(threads, "default_threads", lambda: 2)
    monkeypatch.setattr(threads, "cores_busy_elsewhere", lambda: 1.0)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(1)  # as conftest leaves every test


def test_a_busy_core_leaves_the_run_the_other_one_until_it_ends(two_threads_by_default):
    said = []
    with threads.shared_cores(CPU, said.append) as count:
        assert count == torch.get_num_threads() == 1
    assert torch.get_num_threads() == 2 and "training on 1 thread(s) (set OMP_NUM_THREADS to choose)" in said[0]


@pytest.mark.parametrize("chosen", ["environment", "torch", "gpu"])
def test_a_count_the_user_chose_stands(chosen, two_threads_by_default, monkeypatch):
    if chosen == "environment":
        monkeypatch.setenv("OMP_NUM_THREADS", "2")
    if chosen == "torch":
        monkeypatch.setattr(threads, "default_threads", lambda: 4)  # 2 is the user's own call
    said = []
    with threads.shared_cores(torch.device("cuda") if chosen == "gpu" else CPU, said.append) as count:
        assert count == torch.get_num_threads() == 2
    assert said == []


@pytest.mark.slow  # two trainings
def test_the_numbers_are_the_same_on_one_thread_as_on_two(tiny_config):
    torch.set_num_threads(1)
    one = train(tiny_config)
    torch.set_num_threads(2)
    try:
        two = train(tiny_config)
    finally:
        torch.set_num_threads(1)
    pd.testing.assert_frame_equal(one.history, two.history)
    for name, tensor in one.students.state_dict().items():
        assert torch.equal(tensor, two.students.state_dict()[name]), name


@pytest.mark.slow  # a sweep
def test_a_sweep_beside_a_busy_core_trains_on_the_other_and_records_it(two_threads_by_default, tiny_config, tmp_path):
    said = []
    folder = run_sweep(tiny_config, tmp_path / "run", progress=False, echo=said.append)
    assert sum("training on 1 thread(s)" in line for line in said) == 1
    assert folder.provenance()["sessions"][-1]["device_name"].endswith(", 1 torch threads")
    assert torch.get_num_threads() == 2  # the process's own count again
