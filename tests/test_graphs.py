"""The training step as a CUDA graph needs it (issue: paper scale on a GPU), checked on the CPU as far
as the CPU can: the step restructured for capture trains to the numbers it gave before, bit for bit;
consecutive steps issue the same ops with the same scalar arguments and no syncing op; every tensor a
step reads but does not make keeps its storage across steps, checks, evaluations, checkpoints and
loads; labelling in blocks gives the same inputs; a compiled step never recompiles from its warm-up
through its capture (a CPU stand-in for the graph, performance/replay.py); the comparison of a
replayed run with an eager one fails when it should; a checkpoint resumes only on its device type.
A CUDA-only test replays the captured step.
"""

import copy
import functools
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from torch._dynamo.utils import counters

from toymodels import resolve_config
from toymodels.errors import ToymodelsError
from toymodels.performance.replay import (
    PROBE_STEPS,
    RerunGraph,
    compare_replay,
    record_steps,
)
from toymodels.performance.step_trace import (
    launches,
    signature,
    storages_read,
    syncs,
    trace,
)
from toymodels.results.storage import JobFolder, write_checkpoint
from toymodels.training.cuda_graphs import WARMUP_STEPS, Stepper
from toymodels.training.engine import train
from toymodels.training.jobs import Job
from toymodels.training.planning import job_memory_bytes
from toymodels.training.population import Population
from toymodels.training.protocol import Protocol
from toymodels.training.samples import LABEL_SAMPLES
from toymodels.training.trainer import Trainer
from toymodels.workflows.parallel import refuse_resume_elsewhere

sys.path.insert(0, str(Path(__file__).parent))
from test_golden import TINY, machine_signature  # noqa: E402 - the golden records' machine kinds

STEP_RECORD = Path(__file__).with_name("golden") / f"step-{machine_signature()}.json"
# 50 steps to convergence: ℓ = 3 diverges (its rate 1e9), the others decay once and converge at
# different checks, so the population is rebuilt without the students that are done
FIFTY_STEPS = dict(
    teachers=["tied"],
    loss="kl",
    student="euler",
    depths=[1, 2, 3],
    converge=True,
    steps=50,
    check_every=5,
    patience=1,
    decays=1,
    plateau_tolerance=0.15,
    depth_lr=[[3, 1e9]],
    evals=10,
    schedule="constant",
)


def fifty_steps() -> dict:
    """The losses of every evaluation and a digest of every student's weights after FIFTY_STEPS."""
    trained = train(resolve_config("quick", **{**TINY, **FIFTY_STEPS}))
    history = trained.history.sort_values(["temperature", "replicate", "depth", "step"], ignore_index=True)
    digest = hashlib.sha256()
    for name, tensor in sorted(trained.students.state_dict().items()):
        digest.update(name.encode() + tensor.detach().cpu().contiguous().numpy().tobytes())
    losses = history[["depth", "step", "train_loss", "test_loss", "diverged_at_step", "converged_at_step"]].astype(
        float
    )
    return {
        "losses": [[None if value != value else value for value in row] for row in losses.values.tolist()],
        "weights_sha256": digest.hexdigest(),
    }


if __name__ == "__main__" and sys.argv[1:] == ["--record"]:
    torch.set_num_threads(1)  # as the tests run (conftest)
    STEP_RECORD.write_text(json.dumps(fifty_steps(), indent=0))


def test_the_restructured_step_trains_to_the_numbers_recorded_before_it_bit_for_bit():
    """Recorded by the step before it was made capturable (device counters, state updated in place),
    and again when a student's own stream was keyed by what it is (issue 68: a zero start draws other
    layers): a forced divergence, a decay, convergence and a rebuild. Bit for bit on the machine kind that
    recorded it; elsewhere the students that never diverged within 1e-5 (another CPU rounds float32
    differently: tests/test_golden.py)."""
    numbers = fifty_steps()
    records = sorted(STEP_RECORD.parent.glob("step-*.json"))
    assert records, "no record: python tests/test_graphs.py --record, on the step before a change"
    if STEP_RECORD.exists():
        assert numbers == json.loads(STEP_RECORD.read_text())
        return
    recorded = np.array(json.loads(records[0].read_text())["losses"], float)
    now = np.array(numbers["losses"], float)
    np.testing.assert_array_equal(np.isnan(now), np.isnan(recorded))
    never_diverged = recorded[:, 0] != FIFTY_STEPS["depth_lr"][0][0]
    np.testing.assert_allclose(now[never_diverged], recorded[never_diverged], rtol=1e-5)


def tiny_trainer(**changes) -> Trainer:
    """A trainer of FIFTY_STEPS' population, none diverging."""
    config = resolve_config("quick", **{**TINY, **FIFTY_STEPS, "depth_lr": [], **changes})
    return Trainer(Population(config, torch.device("cpu")))


def test_consecutive_steps_issue_the_same_ops_with_the_same_scalars_and_never_sync():
    trainer = tiny_trainer()
    batch = trainer.batch(0)
    trainer.update(*batch)  # Adam's first update, as a graph's warm-up steps
    first, second = (trace(trainer.update, *batch)[0] for _ in range(2))
    assert launches(first) > 100
    assert signature(first) == signature(second)
    assert syncs(first) == []


def test_every_tensor_a_step_reads_keeps_its_storage_across_checks_evaluations_checkpoints_and_loads(tmp_path):
    trainer = tiny_trainer()
    batch = trainer.batch(0)
    trainer.update(*batch)
    before = storages_read(trace(trainer.update, *batch)[0])
    trainer.check(5)  # the plateau test: rates decayed, students converged
    trainer.population.test_losses()  # an evaluation
    torch.save(trainer.state(), tmp_path / "checkpoint.pt")  # a checkpoint, and a load of it
    trainer.load_state(torch.load(tmp_path / "checkpoint.pt", weights_only=False))
    after = storages_read(trace(trainer.update, *batch)[0])
    assert after == before
    assert {
        tensor.untyped_storage().data_ptr()
        for tensor in (trainer.plateaus.lr_scale, trainer.diverged_at, trainer.optimizer.steps)
    } <= before


def blocks_of(steps_ahead: int, monkeypatch, steps: int = 24) -> tuple[list, list, list]:
    """The inputs, read-outs and losses of `steps` steps labelled `steps_ahead` steps at a time."""
    monkeypatch.setitem(LABEL_SAMPLES, "cpu", steps_ahead * TINY["batch"])
    trainer = tiny_trainer()
    assert trainer.fresh.steps_ahead == steps_ahead
    batches = [trainer.batch(step) for step in range(steps)]
    losses = [trainer.update(*batch) for batch in batches]
    return [inputs for inputs, _ in batches], [readouts for _, readouts in batches], losses


def test_labelling_in_blocks_gives_the_same_inputs_and_the_same_losses(monkeypatch):
    inputs, readouts, losses = blocks_of(1, monkeypatch)
    block_inputs, block_readouts, block_losses = blocks_of(16, monkeypatch)  # the GPU's block
    assert all(torch.equal(a, b) for a, b in zip(inputs, block_inputs))
    assert all(batch.is_contiguous() for batch in block_inputs + block_readouts)  # as a graph's buffers are
    torch.testing.assert_close(torch.stack(block_readouts), torch.stack(readouts), rtol=1e-6, atol=0)
    torch.testing.assert_close(torch.stack(block_losses), torch.stack(losses), rtol=1e-6, atol=0)


def test_a_resume_in_the_middle_of_a_block_labels_the_block_it_was_in(monkeypatch):
    monkeypatch.setitem(LABEL_SAMPLES, "cpu", 16 * TINY["batch"])
    trainer = tiny_trainer()
    for step in range(5):  # 5 of a block of 16
        trainer.step(step)
    saved = copy.deepcopy(trainer.state())  # as a checkpoint on disk holds it
    assert (saved["block_steps"], saved["block_steps_used"]) == (16, 5)
    rest = [trainer.step(step) for step in range(5, 30)]
    monkeypatch.setitem(LABEL_SAMPLES, "cpu", TINY["batch"])  # resumed where blocks are one step long
    resumed = tiny_trainer()
    resumed.load_state(saved)
    assert resumed.fresh.steps_ahead == 16  # the run's blocks, as its checkpoint says
    assert all(torch.equal(a, b) for a, b in zip(rest, [resumed.step(step) for step in range(5, 30)]))


def test_cuda_graphs_ask_nothing_of_a_cpu_run():
    eager = train(resolve_config("quick", **{**TINY, **FIFTY_STEPS}))
    asked = train(resolve_config("quick", **{**TINY, **FIFTY_STEPS, "cuda_graphs": True}))
    pd.testing.assert_frame_equal(asked.history, eager.history)


@pytest.mark.parametrize("loss", ["kl", "mse"])
def test_a_compiled_step_never_recompiles_from_its_warm_up_through_its_capture_and_a_relabel(monkeypatch, loss):
    """Dynamo with the eager backend (its guards, without inductor's compile time): the step
    compiles at the first warm-up step and never again, through the capture, the replays after it
    and the next labelling block; and a run without the graph compiles as many graphs. (Before the
    blocks were laid out steps first, the capture's contiguous buffers failed the stride guard of
    the block's slices: one recompile of `losses` per run, for both losses.)"""
    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="eager"))
    compiled = {}
    for graph_kind in (None, RerunGraph):
        torch._dynamo.reset()
        counters.clear()
        stepper = Stepper(tiny_trainer(compile=True, loss=loss), graph_kind)
        assert stepper.trainer.fresh.steps_ahead < 40  # the steps below cross a relabel
        stepper(0)
        compiled[graph_kind] = counters["stats"]["unique_graphs"]
        counters.clear()
        for step in range(1, 40):
            stepper(step)
        assert counters["frames"]["total"] == 0, f"recompiled with {graph_kind}: {dict(counters['frames'])}"
    assert compiled[None] == compiled[RerunGraph] > 0


def test_a_recompile_during_the_capture_is_one_clear_error(monkeypatch):
    """A batch whose layout differs from the warm-up's fails a guard: the capture raises instead of
    compiling inside a graph."""
    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="eager"))
    torch._dynamo.reset()
    stepper = Stepper(tiny_trainer(compile=True), RerunGraph)
    for step in range(WARMUP_STEPS):
        stepper(step)
    stepper.inputs = stepper.inputs.transpose(1, 2).contiguous().transpose(1, 2)  # another stride
    with pytest.raises(RuntimeError, match="fail_on_recompile"):
        stepper(WARMUP_STEPS)


def replay_records() -> tuple[dict, dict]:
    """Twelve steps of FIFTY_STEPS' population without a graph and with the CPU stand-in."""
    return tuple(record_steps(Stepper(tiny_trainer(), graph_kind), 12) for graph_kind in (None, RerunGraph))


def test_the_replay_comparison_passes_a_faithful_replay_and_fails_a_nan_and_a_stale_input():
    eager, graphed = replay_records()
    verdict = compare_replay(eager, graphed, eager=eager)
    assert verdict["passed"], verdict["failures"]
    assert verdict["replays"] == 12 - WARMUP_STEPS
    assert verdict["replayed_steps_max_relative_difference"] == 0.0
    assert all(probe["batches_differ_by"] > 1e-4 for probe in verdict["stale_input_probe"])

    nan = {**graphed, "losses": graphed["losses"].clone()}
    nan["losses"][WARMUP_STEPS + 1, 0] = float("nan")
    verdict = compare_replay(eager, nan)
    assert not verdict["passed"] and verdict["nonfinite_mismatches"] == 1
    assert "1 losses finite in one run and not in the other" in verdict["failures"]

    stale = {**graphed, "losses": graphed["losses"].clone()}
    stale["losses"][WARMUP_STEPS : WARMUP_STEPS + PROBE_STEPS] = eager["stale_losses"]  # each step the batch before
    verdict = compare_replay(eager, stale)
    assert not verdict["passed"]
    assert any("a stale input" in failure for failure in verdict["failures"])

    drifted = {**graphed, "weights": {name: tensor * (1 + 1e-3) for name, tensor in graphed["weights"].items()}}
    assert any("final weights" in failure for failure in compare_replay(eager, drifted)["failures"])


def test_the_replay_comparison_judges_every_replayed_step_against_both_references():
    """Losses 50 % off from step 9 on, past the first replayed steps and the probe, fail; against
    the eager step too."""
    eager, graphed = replay_records()
    drifting = {**graphed, "losses": graphed["losses"].clone()}
    drifting["losses"][9:] *= 1.5
    verdict = compare_replay(eager, drifting)
    assert not verdict["passed"]
    assert verdict["failures"] == ["3 of the 9 replayed steps differ by more than 0.0001 (steps 9–11, by up to 0.5)"]
    eager_drifting = {**eager, "losses": drifting["losses"]}
    verdict = compare_replay(eager, graphed, eager=eager_drifting)
    assert verdict["failures"] == [
        "against eager: 3 of the 9 replayed steps differ by more than 0.0001 (steps 9–11, by up to 0.333)"
    ]


def test_the_replay_comparison_fails_a_record_in_which_no_graph_ran():
    eager, graphed = replay_records()
    verdict = compare_replay(eager, eager)  # the same numbers, but no graph behind them
    assert not verdict["passed"]
    assert verdict["failures"] == ["no graph was captured: the record is of steps without one"]
    verdict = compare_replay(eager, {**graphed, "replays": 4})
    assert verdict["failures"] == ["4 of the 9 steps after the warm-up were replayed"]


def test_a_checkpoint_resumes_only_on_the_device_type_that_wrote_it(tmp_path):
    """A checkpoint written on a GPU is refused on the CPU with one line (its data streams are CUDA
    generators' states); one written before the device type was kept is told by its streams."""

    class Checkpoints:
        saved = None

        def load_checkpoint(self):
            return self.saved

        def save_checkpoint(self, state):
            self.saved = copy.deepcopy(state)

    config = resolve_config("quick", **{**TINY, **FIFTY_STEPS, "converge": False, "checkpoint_every": 5})
    checkpoints = Checkpoints()
    train(config.replace(steps=5 + 1), checkpoints=checkpoints)
    assert checkpoints.saved["device_type"] == "cpu"
    older = {key: value for key, value in checkpoints.saved.items() if key != "device_type"}
    checkpoints.saved = older
    train(config.replace(steps=7), checkpoints=checkpoints)  # an older CPU checkpoint resumes on the CPU
    checkpoints.saved = {**older, "device_type": "cuda"}
    with pytest.raises(ToymodelsError, match="written on a cuda device and cannot resume on cpu") as refused:
        train(config, checkpoints=checkpoints)
    assert "\n" not in str(refused.value)
    checkpoints.saved = {**older, "data_streams": [torch.zeros(16, dtype=torch.uint8)] * 2}  # a CUDA Philox state
    with pytest.raises(ToymodelsError, match="written on a cuda device"):
        train(config, checkpoints=checkpoints)
    job = JobFolder(tmp_path / "job000")  # a run refuses before any job starts: the CLI's one line, status 2
    job.path.mkdir()
    write_checkpoint(job.path / JobFolder.CHECKPOINT, {**older, "device_type": "cuda"})
    with pytest.raises(ToymodelsError, match="cannot resume on cpu"):
        refuse_resume_elsewhere(job, torch.device("cpu"))


def test_the_memory_plan_counts_the_graphs_private_pool(monkeypatch):
    protocol = Protocol.of(resolve_config("quick", **{**TINY, **FIFTY_STEPS}))
    job = Job.whole(protocol)
    without = job_memory_bytes(protocol, job)
    assert job_memory_bytes(protocol.replace(cuda_graphs=True), job) == without  # the CPU captures nothing
    monkeypatch.setattr(Protocol, "device", property(lambda self: torch.device("cuda")))
    graphed = job_memory_bytes(protocol.replace(cuda_graphs=True), job)
    assert without < graphed < 2 * without


@pytest.mark.skipif(not torch.cuda.is_available(), reason="a CUDA graph needs a GPU")
@pytest.mark.parametrize("compile_step", [False, True])
def test_a_replayed_step_trains_to_the_numbers_of_the_eager_step(compile_step):
    """FIFTY_STEPS on the GPU with and without the graph: a divergence, decays, convergence and a
    rebuild (a second capture), the same kernels replayed, so the same numbers; compiled too, where
    a recompile inside the capture would raise."""
    runs = [
        train(
            resolve_config(
                "quick", **{**TINY, **FIFTY_STEPS, "device": "cuda", "cuda_graphs": graphs, "compile": compile_step}
            )
        )
        for graphs in (False, True)
    ]
    pd.testing.assert_frame_equal(runs[1].history, runs[0].history)
    for name, tensor in runs[0].students.state_dict().items():
        assert torch.equal(runs[1].students.state_dict()[name], tensor), name


@pytest.mark.slow
def test_the_prepared_gpu_check_counts_a_steps_launches_at_toy_size(tmp_path):
    """benchmarks/graph_check.py, the script a GPU lease runs, at toy size on the CPU: its op traces."""
    script = Path(__file__).parents[1] / "benchmarks" / "graph_check.py"
    subprocess.run(
        [sys.executable, str(script), "--toy", "--ops-only", "--device", "cpu", "--out", str(tmp_path)],
        check=True,
        capture_output=True,
    )
    sweeps = json.loads((tmp_path / "graph_check.json").read_text())["sweeps"]
    for row in sweeps.values():
        before, after = row["ops"]["block_1"], row["ops"]["block_16"]
        assert before["syncs"] == after["syncs"] == []
        assert after["eager_launches_per_step"] < before["eager_launches_per_step"]  # labelled 16 steps at a time
        assert after["replayed_launches_per_step"] < after["update_launches"] / 10
