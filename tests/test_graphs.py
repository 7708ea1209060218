"""The training step as a CUDA graph needs it (issue: paper scale on a GPU), checked on the CPU as far
as the CPU can: the step restructured for capture trains to the numbers it gave before, bit for bit;
consecutive steps issue the same ops with the same scalar arguments and no syncing op; every tensor a
step reads but does not make keeps its storage across steps, checks, evaluations, checkpoints and
loads; labelling in blocks gives the same inputs. A CUDA-only test replays the captured step.
"""

import copy
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from toymodels import resolve_config
from toymodels.performance.step_trace import launches, signature, storages_read, syncs, trace
from toymodels.training.engine import train
from toymodels.training.population import Population
from toymodels.training.samples import LABEL_SAMPLES
from toymodels.training.trainer import Trainer

sys.path.insert(0, str(Path(__file__).parent))
from test_golden import TINY, machine_signature  # noqa: E402 - the golden records' machine kinds

STEP_RECORD = Path(__file__).with_name("golden") / f"step-{machine_signature()}.json"
# 50 steps to convergence: ℓ = 3 diverges (its rate 1e9), the others decay once and converge at
# different checks, so the population is rebuilt without the students that are done
FIFTY_STEPS = dict(teachers=["tied"], loss="kl", student="euler", depths=[1, 2, 3], converge=True, steps=50,
                   check_every=5, patience=1, decays=1, plateau_tolerance=0.15, depth_lr=[[3, 1e9]], evals=10,
                   schedule="constant")


def fifty_steps() -> dict:
    """The losses of every evaluation and a digest of every student's weights after FIFTY_STEPS."""
    trained = train(resolve_config("quick", **{**TINY, **FIFTY_STEPS}))
    history = trained.history.sort_values(["temperature", "replicate", "depth", "step"], ignore_index=True)
    digest = hashlib.sha256()
    for name, tensor in sorted(trained.students.state_dict().items()):
        digest.update(name.encode() + tensor.detach().cpu().contiguous().numpy().tobytes())
    losses = history[["depth", "step", "train_loss", "test_loss", "diverged_at_step", "converged_at_step"]].astype(float)
    return {"losses": [[None if value != value else value for value in row] for row in losses.values.tolist()],
            "weights_sha256": digest.hexdigest()}


if __name__ == "__main__" and sys.argv[1:] == ["--record"]:
    torch.set_num_threads(1)  # as the tests run (conftest)
    STEP_RECORD.write_text(json.dumps(fifty_steps(), indent=0))


def test_the_restructured_step_trains_to_the_numbers_recorded_before_it_bit_for_bit():
    """Recorded by the step before it was made capturable (device counters, state updated in place):
    a forced divergence, a decay, convergence and a rebuild. Bit for bit on the machine kind that
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
    assert {tensor.untyped_storage().data_ptr() for tensor in (trainer.plateaus.lr_scale, trainer.diverged_at,
                                                               trainer.optimizer.steps)} <= before


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


@pytest.mark.skipif(not torch.cuda.is_available(), reason="a CUDA graph needs a GPU")
def test_a_replayed_step_trains_to_the_numbers_of_the_eager_step():
    """FIFTY_STEPS on the GPU with and without the graph: a divergence, decays, convergence and a
    rebuild (a second capture), the same kernels replayed, so the same numbers."""
    runs = [train(resolve_config("quick", **{**TINY, **FIFTY_STEPS, "device": "cuda", "cuda_graphs": graphs}))
            for graphs in (False, True)]
    pd.testing.assert_frame_equal(runs[1].history, runs[0].history)
    for name, tensor in runs[0].students.state_dict().items():
        assert torch.equal(runs[1].students.state_dict()[name], tensor), name


@pytest.mark.slow
def test_the_prepared_gpu_check_counts_a_steps_launches_at_toy_size(tmp_path):
    """benchmarks/graph_check.py, the script a GPU lease runs, at toy size on the CPU: its op traces."""
    script = Path(__file__).parents[1] / "benchmarks" / "graph_check.py"
    subprocess.run([sys.executable, str(script), "--toy", "--ops-only", "--device", "cpu", "--out", str(tmp_path)],
                   check=True, capture_output=True)
    sweeps = json.loads((tmp_path / "graph_check.json").read_text())["sweeps"]
    for counts in sweeps.values():
        before, after = counts["ops_before"], counts["ops_after"]
        assert before["syncs"] == after["syncs"] == []
        assert after["eager_launches_per_step"] < before["eager_launches_per_step"]  # labelled 16 steps at a time
        assert after["replayed_launches_per_step"] < after["update_launches"] / 10
