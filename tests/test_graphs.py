"""The training step as a CUDA graph needs it (issue: paper scale on a GPU), checked on the CPU as far
as the CPU can: the step restructured for capture trains to the numbers it gave before, bit for bit;
consecutive steps issue the same ops with the same scalar arguments and no syncing op; every tensor a
step reads but does not make keeps its storage across steps, checks, evaluations, checkpoints and
loads; labelling in blocks gives the same inputs. A CUDA-only test replays the captured step.
"""

import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import torch

from toymodels import resolve_config
from toymodels.training.engine import train

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
