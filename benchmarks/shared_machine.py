"""How a run slows on a shared machine, by how its OpenMP threads wait: the quick preset timed
alone and beside one busy process (a pure-Python loop on one core), with idle threads sleeping
(`OMP_WAIT_POLICY=PASSIVE`, the command line's default) and spinning (`ACTIVE`), the four
interleaved so that a drift of the machine's speed falls on all alike. On 2 cores a run beside
one busy process has one core to itself: its ideal is twice its time alone.

    python benchmarks/shared_machine.py [--repeats 2]

Prints each condition's median wall time, and the ratios the shared-machine rule reads: beside
over alone for each policy (at most 2.2 asked), and passive over active alone (at most 1.05)."""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

QUICK = ["-m", "toymodels", "run", "--preset", "quick", "--teacher", "tied", "--temps", "1.0", "--quiet"]
BUSY = [sys.executable, "-c", "while True: pass"]


def timed_run(policy: str, beside_busy: bool) -> float:
    """Seconds of one quick run under `policy`, alone or beside a busy process."""
    busy = subprocess.Popen(BUSY) if beside_busy else None
    try:
        with tempfile.TemporaryDirectory() as out:
            start = time.perf_counter()
            subprocess.run([sys.executable, *QUICK, "--out", out], env={**os.environ, "OMP_WAIT_POLICY": policy},
                           check=True, capture_output=True)  # fmt: skip
            return time.perf_counter() - start
    finally:
        if busy is not None:
            busy.kill()
            busy.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    repeats = parser.parse_args().repeats
    conditions = [(policy, beside) for beside in (False, True) for policy in ("PASSIVE", "ACTIVE")]
    times = {condition: [] for condition in conditions}
    timed_run("PASSIVE", False)  # warm-up: the caches of the first import
    for _ in range(repeats):
        for condition in conditions:
            times[condition].append(timed_run(*condition))
    median = {condition: statistics.median(values) for condition, values in times.items()}
    for (policy, beside), seconds in median.items():
        each = ", ".join(f"{value:.1f}" for value in times[(policy, beside)])
        print(f"{policy:<8} {'beside one busy process' if beside else 'alone':<24} median {seconds:6.1f} s ({each})")
    for policy in ("PASSIVE", "ACTIVE"):
        print(f"{policy}: beside / alone = {median[(policy, True)] / median[(policy, False)]:.2f} (ideal 2.00)")
    print(f"alone: PASSIVE / ACTIVE = {median[('PASSIVE', False)] / median[('ACTIVE', False)]:.3f}")


if __name__ == "__main__":
    main()
