"""Golden numbers: tiny sweeps of every loss, several architectures and both teachers train to
exactly the losses recorded in tests/golden/. A refactor that changes no arithmetic keeps them
bit for bit; one that does must say so, by raising `toymodels.version.NUMBERS`, and re-record them
(`python tests/test_golden.py --record`, then copy the record to sweeps.json and drop the other
machines' records, now stale): last done when
a student's own stream was keyed by what it is (issue 68), which redrew every KL case's zero start.

Bit for bit holds on one machine: another CPU's kernels round float32 differently (1–2e-6 relative
after 12 steps, measured between two of these machines). So each machine kind records its own
file, named by `machine_signature()`, and is held to it exactly; a machine without one is held
to the first record (sweeps.json) within 1e-5.
"""

import json
import platform
import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from toymodels import resolve_config, run_sweep
from toymodels.version import NUMBERS

GOLDEN = Path(__file__).with_name("golden") / "sweeps.json"
OTHER_MACHINE_RTOL = 1e-5
TINY = dict(
    temperatures=[0.3, 1.0],
    depths=[1, 3],
    replicates=2,
    teacher_depth=6,
    steps=12,
    batch=16,
    test_batches=2,
    test_batch_size=32,
    evals=3,
    device="cpu",
    save_students=False,
)
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


def machine_signature() -> str:
    """What decides float32 rounding here: torch's version, its CPU kernels, the processor."""
    cpu = (
        next(
            (
                line.split(":", 1)[1]
                for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")
            ),
            platform.processor(),
        )
        if Path("/proc/cpuinfo").exists()
        else ""
    )
    return re.sub(r"[^A-Za-z0-9.]+", "-", f"{torch.__version__}-{torch.backends.cpu.get_cpu_capability()}-{cpu}")


def machine_record() -> Path:
    return GOLDEN.with_name(f"sweeps-{machine_signature()}.json")


@pytest.mark.parametrize("case", CASES)
def test_tiny_sweeps_train_to_the_recorded_numbers_bit_for_bit(case, tmp_path):
    numbers = sweep_numbers(case, tmp_path / case)
    if machine_record().exists():
        assert numbers == json.loads(machine_record().read_text())[case]
        return
    recorded = json.loads(GOLDEN.read_text())[case]
    assert [row[:5] for row in numbers] == [row[:5] for row in recorded]
    np.testing.assert_allclose(
        np.array([row[5:] for row in numbers], float),
        np.array([row[5:] for row in recorded], float),
        rtol=OTHER_MACHINE_RTOL,
    )


def test_the_golden_numbers_are_recorded_under_todays_numbers_version():
    """A change that moves the numbers raises `NUMBERS` (so the committed runs made under the old one
    say so on their pages) and re-records these under it; `--record` refuses new numbers under an
    unchanged version."""
    for record in (GOLDEN, machine_record()):
        if record.exists():
            assert json.loads(record.read_text())["numbers"] == NUMBERS, f"{record.name}: re-record it"


def test_new_numbers_cannot_be_recorded_under_an_unchanged_version(tmp_path):
    record, numbers = tmp_path / "sweeps.json", {case: [[case, 1.0]] for case in CASES}
    record_golden_numbers(record, numbers)
    record_golden_numbers(record, numbers)  # the same numbers again
    with pytest.raises(SystemExit, match="raise toymodels.version.NUMBERS"):
        record_golden_numbers(record, {**numbers, "mse-lns": [["mse-lns", 2.0]]})
    assert json.loads(record.read_text()) == {"numbers": NUMBERS, **numbers}


def record_golden_numbers(record: Path, numbers: dict) -> None:
    """Write `numbers` as `record`, refused where they differ from its own under today's `NUMBERS`."""
    before = json.loads(record.read_text()) if record.exists() else {}
    if before.get("numbers") == NUMBERS and {case: before.get(case) for case in CASES} != numbers:
        sys.exit(
            "the numbers changed: raise toymodels.version.NUMBERS first, so that every committed run made "
            "under the old version says so on its page (`toymodels docs`), then record again"
        )
    record.write_text(json.dumps({"numbers": NUMBERS, **numbers}, indent=0))


if __name__ == "__main__" and sys.argv[1:] == ["--record"]:
    import tempfile

    torch.set_num_threads(1)  # as the tests run (conftest)
    with tempfile.TemporaryDirectory() as folder:
        record_golden_numbers(machine_record(), {case: sweep_numbers(case, Path(folder) / case) for case in CASES})
