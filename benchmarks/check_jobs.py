"""Show, through the command line as a user would type it, what the jobs machinery promises on a
small sweep (2 teachers × 2 replicates × 2 temperatures × depths 2, 4, 8; about 2 minutes on a
2-core CPU):

  1. a dask LocalCluster with 2 workers gives the same numbers as the local run;
  2. a run killed with `kill -9` mid-sweep, then `--resume`d, ends with the numbers of an
     uninterrupted run, no evaluation lost or written twice;
  3. a forced divergence (`--depth-lr 8=1e9`) is reported and left out of the fit, while every
     other student trains to exactly the numbers it has without it.

Prints PASS or FAIL for each; exits 1 if one fails.

    python benchmarks/check_jobs.py [WORK_DIR]
"""

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
from dask.distributed import LocalCluster

SWEEP = [
    "--teacher",
    "tied,independent",
    "--temps",
    "0.5,1.0",
    "--depths",
    "2,4,8",
    "--teacher-depth",
    "16",
    "--replicates",
    "2",
    "--steps",
    "600",
    "--batch",
    "64",
    "--device",
    "cpu",
    "--quiet",
]
KEYS = ["teacher", "replicate", "temperature", "depth", "step"]
environment = {**os.environ, "OMP_NUM_THREADS": "1"}  # every run on one thread: bit-for-bit comparable


def toymodels(*options, wait=True):
    command = [sys.executable, "-m", "toymodels", "run", *options]
    if not wait:
        return subprocess.Popen(command, env=environment, stdout=subprocess.DEVNULL)
    return subprocess.run(command, env=environment, capture_output=True, text=True, check=True).stdout


def metrics(folder: Path) -> pd.DataFrame:
    return pd.read_csv(folder / "metrics.csv").sort_values(KEYS, ignore_index=True)


def main(work: Path) -> bool:
    checks = {}
    toymodels(*SWEEP, "--out", str(work / "local"))
    local = metrics(work / "local")

    with LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None) as cluster:
        toymodels(*SWEEP, "--backend", "dask", "--scheduler", cluster.scheduler_address, "--out", str(work / "dask"))
    checks["dask LocalCluster, 2 workers: the local run's numbers"] = local.equals(metrics(work / "dask"))

    killed = toymodels(*SWEEP, "--checkpoint-every", "50", "--out", str(work / "killed"), wait=False)
    progress = work / "killed" / "jobs" / "job000" / "progress"
    while not progress.is_file() or int(progress.read_text() or 0) < 320:
        time.sleep(0.05)
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    stopped_at = int(progress.read_text())
    toymodels("--resume", str(work / "killed"), "--quiet")
    checks[f"kill -9 at step {stopped_at}, then --resume: the uninterrupted numbers, {len(local)} rows"] = local.equals(
        metrics(work / "killed")
    )

    table = toymodels(*SWEEP, "--depth-lr", "8=1e9", "--out", str(work / "diverged"))
    diverged = metrics(work / "diverged")
    others = diverged.depth < 8
    checks["divergence reported in the table, ℓ=8 left out"] = (
        "diverged, left out: ℓ=8" in table and "ℓ=8 " not in table.splitlines()[0]
    )
    checks["the other students: the numbers they have without it"] = (
        local[others].drop(columns="diverged_at_step").equals(diverged[others].drop(columns="diverged_at_step"))
    )

    for text, ok in checks.items():
        print(f"{'PASS' if ok else 'FAIL'}  {text}")
    print(f"runs: {work}")
    return all(checks.values())


if __name__ == "__main__":  # dask's worker processes import this file again
    sys.exit(0 if main(Path(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp())) else 1)
