"""Golden numbers: tiny sweeps of every loss, several architectures and both teachers train to
exactly the losses recorded in tests/golden/sweeps.json. A refactor that changes no arithmetic
keeps them bit for bit; one that does must say so and re-record them
(`python tests/test_golden.py --record`)."""

import json
import sys
from pathlib import Path

import pandas as pd
import pytest

from toymodels import resolve_config, run_sweep

GOLDEN = Path(__file__).with_name("golden") / "sweeps.json"
TINY = dict(temperatures=[0.3, 1.0], depths=[1, 3], replicates=2, teacher_depth=6, steps=12, batch=16,
            test_batches=2, test_batch_size=32, evals=3, device="cpu", save_students=False)
CASES = {
    "kl-euler": dict(teachers=["tied", "independent"], loss="kl", student="euler"),
    "kl-fixed-head-rk2": dict(teachers=["tied"], loss="kl-fixed-head", student="rk2", schedule="constant"),
    "mse-lns": dict(teachers=["independent"], loss="mse", student="lns", lr_depth_exponent=0.0),
    "mse-depth-mup": dict(teachers=["tied"], loss="mse", student="depth-mup"),
    "kl-scaled-init": dict(teachers=["correlated(rho=0.5)"], loss="kl", student="scaled-init"),
}
COLUMNS = ["teacher", "replicate", "temperature", "depth", "step", "train_loss", "test_loss"]


def sweep_numbers(case: str, out: Path) -> list[list]:
    config = resolve_config("quick", **TINY, **CASES[case])
    metrics = pd.read_csv(run_sweep(config, out, progress=False).path / "metrics.csv")
    metrics = metrics.sort_values(COLUMNS[:5], ignore_index=True)[COLUMNS]
    return [[None if isinstance(v, float) and v != v else v for v in row] for row in metrics.itertuples(index=False)]


@pytest.mark.parametrize("case", CASES)
def test_tiny_sweeps_train_to_the_recorded_numbers_bit_for_bit(case, tmp_path):
    recorded = json.loads(GOLDEN.read_text())[case]
    assert sweep_numbers(case, tmp_path / case) == recorded


if __name__ == "__main__" and sys.argv[1:] == ["--record"]:
    import tempfile

    import torch

    torch.set_num_threads(1)  # as the tests run (conftest)
    with tempfile.TemporaryDirectory() as folder:
        GOLDEN.write_text(json.dumps({case: sweep_numbers(case, Path(folder) / case) for case in CASES}, indent=0))
