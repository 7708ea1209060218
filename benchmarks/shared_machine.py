"""How a run slows on a shared machine, by how its OpenMP threads wait: the quick preset timed
alone and beside one busy process (a pure-Python loop on one core), under each waiting policy
asked for, interleaved so that a drift of the machine's speed falls on all alike. On 2 cores a run
beside one busy process has one core to itself: its ideal is twice its time alone.

    python benchmarks/shared_machine.py [--repeats 2] [--policies suite,threads:2,wait:PASSIVE,spin:1000]

A policy is `suite` (nothing set: the run trains on the cores other processes leave free,
toymodels/performance/threads.py), `threads:N` (OMP_NUM_THREADS=N: a count the user fixed, as
every run had before), `wait:PASSIVE` or `wait:ACTIVE` (OMP_WAIT_POLICY: idle threads sleep at once,
or spin) or `spin:N` (GOMP_SPINCOUNT=N, libgomp's own default being 300 000).
Prints each condition's median wall time and, per policy, beside over alone (at most 2.2 asked)
and alone over the first policy's alone (at most 1.05 asked)."""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

QUICK = ["-m", "toymodels", "run", "--preset", "quick", "--teacher", "tied", "--temps", "1.0", "--quiet"]
BUSY = [sys.executable, "-c", "while True: pass"]
CHOICES = {"threads": "OMP_NUM_THREADS", "spin": "GOMP_SPINCOUNT", "wait": "OMP_WAIT_POLICY"}


def policy_environment(policy: str) -> dict:
    """The environment a run gets under `policy`."""
    env = {key: value for key, value in os.environ.items() if key not in CHOICES.values()}
    kind, _, value = policy.partition(":")
    return env | ({CHOICES[kind]: value} if kind in CHOICES else {})


def timed_run(policy: str, beside_busy: bool) -> float:
    """Seconds of one quick run under `policy`, alone or beside a busy process."""
    busy = subprocess.Popen(BUSY) if beside_busy else None
    try:
        with tempfile.TemporaryDirectory() as out:
            start = time.perf_counter()
            subprocess.run([sys.executable, *QUICK, "--out", out], env=policy_environment(policy), check=True,
                           capture_output=True)  # fmt: skip
            return time.perf_counter() - start
    finally:
        if busy is not None:
            busy.kill()
            busy.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--policies", default="suite,threads:2")
    arguments = parser.parse_args()
    policies = arguments.policies.split(",")
    conditions = [(policy, beside) for beside in (False, True) for policy in policies]
    times = {condition: [] for condition in conditions}
    timed_run(policies[0], False)  # warm-up: the caches of the first import
    for _ in range(arguments.repeats):
        for condition in conditions:
            times[condition].append(timed_run(*condition))
            print(
                f"{condition[0]:<12} {'beside' if condition[1] else 'alone':<7} {times[condition][-1]:.1f} s",
                flush=True,
            )
    median = {condition: statistics.median(values) for condition, values in times.items()}
    for (policy, beside), seconds in median.items():
        each = ", ".join(f"{value:.1f}" for value in times[(policy, beside)])
        print(f"{policy:<12} {'beside one busy process' if beside else 'alone':<24} median {seconds:6.1f} s ({each})")
    for policy in policies:
        print(
            f"{policy}: beside / alone = {median[(policy, True)] / median[(policy, False)]:.2f} (ideal 2.00); "
            f"alone / {policies[0]} alone = {median[(policy, False)] / median[(policies[0], False)]:.3f}"
        )


if __name__ == "__main__":
    main()
