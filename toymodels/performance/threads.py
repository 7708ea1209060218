"""How many CPU threads a run trains on. PyTorch's threads wait for each other at the end of every
parallel piece of work; beside another busy process one of them is often descheduled and its
partner spins, waiting, on the core the other process needs: a 2-thread run beside one busy
process on 2 cores slowed 2.8× rather than the 2× its share allows. A run on the CPU therefore
looks at how busy the machine is when it starts and trains on the cores left free
(`shared_cores`); a thread count the user chose (OMP_NUM_THREADS, or torch.set_num_threads)
stands. docs/performance.md ("On a shared machine") gives the measurements.

The thread count changes how fast a run trains, not what it computes: a sweep's numbers on 1
thread are those on 2 (tests/test_threads.py holds it).
"""

import os
import time
from contextlib import contextmanager

import torch

SAMPLE_SECONDS = 0.2  # long enough to see a busy process at 100 %, short beside any training


def cpu_seconds_busy() -> float | None:
    """The machine's busy CPU time so far, in seconds, from /proc/stat (None where there is none)."""
    try:
        with open("/proc/stat") as stat:
            fields = [int(value) for value in stat.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def cores_busy_elsewhere(seconds: float = SAMPLE_SECONDS) -> float:
    """Cores' worth of work other processes did over the next `seconds`: the machine's busy time
    less this process's own. 0 where the machine does not say."""
    before, own = cpu_seconds_busy(), time.process_time()
    if before is None:
        return 0.0
    time.sleep(seconds)
    return max(0.0, (cpu_seconds_busy() - before - (time.process_time() - own)) / seconds)


def default_threads() -> int:
    """The threads torch starts with where nobody chose: one per core this process may use."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


@contextmanager
def shared_cores(device: torch.device, echo=print):
    """Train on the cores other processes leave free, for the length of the block, then restore
    the count; yields the threads trained on. Only on the CPU, and only where nobody chose the
    count: OMP_NUM_THREADS unset and torch still at its default."""
    chosen = torch.get_num_threads()
    threads = chosen
    if device.type == "cpu" and "OMP_NUM_THREADS" not in os.environ and chosen == default_threads():
        busy = cores_busy_elsewhere()
        threads = max(1, min(chosen, chosen - round(busy)))
        if threads < chosen:
            echo(
                f"other processes keep {busy:.1f} of {chosen} cores busy: training on {threads} "
                f"thread(s) (set OMP_NUM_THREADS to choose)"
            )
            torch.set_num_threads(threads)
    try:
        yield threads
    finally:
        torch.set_num_threads(chosen)
