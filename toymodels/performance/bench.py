"""`toymodels bench`: the population engine against the usual one-student-at-a-time loop, with
the machine's own matmul peak measured alongside so the distance to it is visible. The engine is
timed as one population in this process, and cut into jobs side by side on worker processes
(one per core, as `toymodels run --jobs N` trains a sweep)."""

import os
import resource
import tempfile
import time
from pathlib import Path

import joblib
import torch

from ..config import SweepConfig, paper_temperatures, resolve_config
from ..models.students import active_per_layer
from ..training.cuda_graphs import WARMUP_STEPS, Stepper
from ..training.jobs import Job
from ..training.planning import plan_jobs, sweep_flops_per_step
from ..training.population import Population
from ..training.protocol import Protocol
from ..training.trainer import Trainer
from .baseline import SingleStudentRun

# The sweeps `toymodels bench --sweep NAME` times: (preset, protocol). Teachers 128 layers deep in all.
BENCH_SWEEPS = {
    "paper": (
        "paper",
        dict(
            teachers=["independent"],
            temperatures=paper_temperatures(16),
            depths=[6, 12, 24],
            replicates=1,
            batch=1024,
            loss="kl",
        ),
    ),  # Fig. 3b's shape, one teacher: 48 students
    "cpu-kl": (
        "cpu",
        dict(
            teachers=["independent"],
            temperatures=paper_temperatures(4),
            depths=[2, 4, 8, 16],
            replicates=3,
            batch=256,
            loss="kl",
            converge=True,
            schedule="constant",
        ),
    ),  # fig3b at cpu scale, fresh samples, one start: 48 students
    "tiny": (
        "quick",
        dict(teachers=["tied"], temperatures=[1.0], depths=[1, 2], replicates=1, batch=16, loss="mse"),
    ),  # 2 students: what a step costs beyond its matmuls
}


def bench_config(sweep: str = "paper", **overrides) -> SweepConfig:
    """The sweep `sweep` of BENCH_SWEEPS, with `overrides` (None: the sweep's own)."""
    preset, protocol = BENCH_SWEEPS[sweep]
    return resolve_config(preset, **{**protocol, **{k: v for k, v in overrides.items() if v is not None}})


def synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


PEAK_SECONDS = 0.5  # each measurement of the peak: best of the 2048² products in that time


def matmul_peak(device, size=2048, seconds=1.0) -> float:
    """fp32 GFLOP/s of a large square matmul on `device` (best of repeats for `seconds`): the
    practical ceiling."""
    a, b = torch.randn(size, size, device=device), torch.randn(size, size, device=device)
    a @ b
    best, deadline = float("inf"), time.perf_counter() + seconds
    while time.perf_counter() < deadline or best == float("inf"):
        synchronize(device)
        start = time.perf_counter()
        a @ b
        synchronize(device)
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best / 1e9


def peak_memory_mb(device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    try:  # this process's high-water mark; unlike ru_maxrss, not inherited from a forking parent
        status = Path("/proc/self/status").read_text()
        return int(status.split("VmHWM:")[1].split()[0]) / 2**10
    except (OSError, IndexError, ValueError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10  # KiB on Linux


def time_population(
    protocol: Protocol, device, steps: int, job: Job | None = None, start=None, warmup: int = WARMUP_STEPS + 1
) -> float:
    """Seconds per step of the whole sweep (or of `job`), trained as one population (its step
    replayed from a CUDA graph with `cuda_graphs`); `start()` is called between warm-up and timing."""
    stepper = Stepper(Trainer(Population(protocol, device, job)))
    for step in range(warmup):  # includes compilation when config.compile, and the graph's capture
        stepper(step)
    synchronize(device)
    if start:
        start()
    begin = time.perf_counter()
    for step in range(warmup, warmup + steps):
        stepper(step)
    synchronize(device)
    return (time.perf_counter() - begin) / steps


def sweep_products(protocol: Protocol, device) -> list[tuple]:
    """The sweep's own matmuls of one step, as (product, FLOPs) on random operands: each layer's
    products over its active students (forward, and the two gradients of each), the heads
    likewise, every teacher's forward. Their FLOPs add up to `sweep_flops_per_step`."""
    config, depths = protocol.config, [spec.depth for spec in Job.whole(protocol).students()]
    batch, width, vocab = config.batch, config.width, protocol.loss.output_width(config)

    def products(models: int, inner: int, outer: int, backward: bool = True):
        x, w, y = (
            torch.randn(models, *shape, device=device) for shape in ((batch, inner), (inner, outer), (batch, outer))
        )
        flops = 2 * models * batch * inner * outer
        forward = [(lambda: torch.bmm(x, w), flops)]
        return (
            forward
            + [(lambda: torch.bmm(y, w.transpose(1, 2)), flops), (lambda: torch.bmm(x.transpose(1, 2), y), flops)]
            * backward
        )

    work = []
    for n in active_per_layer(depths):
        for _ in range(protocol.architecture.calls):
            work += products(n, width, 4 * width) + products(n, 4 * width, width)
    teachers = len(config.teacher_instances)
    for _ in range(config.teacher_depth):
        work += products(teachers, width, 4 * width, backward=False) + products(
            teachers, 4 * width, width, backward=False
        )
    if protocol.loss.head_flops_per_sample(config):
        work += products(len(depths), width, vocab) + products(teachers, width, vocab, backward=False)
    return work


def time_matmuls_only(protocol: Protocol, device, steps: int) -> float:
    """Seconds per step of the sweep's matmuls and nothing else (`sweep_products`): no step can
    run faster on `device`, so this row's `of peak` is the ceiling of every other row."""
    products = [product for product, _ in sweep_products(protocol, device)]
    for product in products:  # warm-up
        product()
    synchronize(device)
    begin = time.perf_counter()
    for _ in range(steps):
        for product in products:
            product()
    synchronize(device)
    return (time.perf_counter() - begin) / steps


def wait_for_each_other(folder: str, parties: int) -> None:
    """A barrier between worker processes: each leaves a file and waits for all of them."""
    Path(folder, str(os.getpid())).touch()
    while len(os.listdir(folder)) < parties:
        time.sleep(0.005)


def time_job_in_worker(protocol: Protocol, job: Job, steps: int, barrier: str, parties: int) -> tuple[float, float]:
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // parties))
    device = protocol.device
    seconds = time_population(protocol, device, steps, job, start=lambda: wait_for_each_other(barrier, parties))
    return seconds, peak_memory_mb(device)


def time_population_jobs(protocol: Protocol, steps: int, workers: int) -> tuple[float, float]:
    """Seconds per sweep step with the sweep cut into `workers` jobs that train at the same time
    on worker processes (timed from a common start: the slowest job sets the pace), and the
    workers' summed peak memory in MB."""
    jobs = plan_jobs(protocol, workers)
    with tempfile.TemporaryDirectory() as barrier:
        timings = joblib.Parallel(n_jobs=len(jobs))(
            joblib.delayed(time_job_in_worker)(protocol, job, steps, barrier, len(jobs)) for job in jobs
        )
    return max(seconds for seconds, _ in timings), sum(memory for _, memory in timings)


def time_baseline(protocol: Protocol, device, steps_per_student: int) -> float:
    """Seconds per step of the whole sweep, each student trained alone with its own teacher pass."""
    population = Population(protocol.replace(steps=max(protocol.config.steps, steps_per_student)), device)
    total = 0.0
    for spec in population.specs:
        run = SingleStudentRun(population, spec)
        with population.precision():  # the same matmul precision as the population
            run.train(1)  # warm-up
            synchronize(device)
            start = time.perf_counter()
            run.train(steps_per_student)
            synchronize(device)
        total += (time.perf_counter() - start) / steps_per_student
    return total


def benchmark(
    config: SweepConfig, steps: int, baseline_steps: int, compiled: bool = False, workers: int | None = None
) -> dict:
    """Time the sweep `config` the usual way and with the population engine: in this process, and
    cut into `workers` jobs on worker processes (default: one per core on the CPU, none on a GPU);
    each population row also compiled, if asked. GFLOP/s count the sweep's own matmul FLOPs
    (`sweep_flops_per_step`), so every row's GFLOP/s is comparable."""
    protocol = Protocol.of(config)
    device = protocol.device
    workers = workers or ((os.cpu_count() or 1) if device.type == "cpu" else 1)
    flops = sweep_flops_per_step(protocol)
    students = len(Job.whole(protocol).students())
    result = {
        "device": str(device),
        "threads": torch.get_num_threads(),
        "students": students,
        "batch": config.batch,
        "depths": list(config.depths),
        "sweep_gflop_per_step": flops / 1e9,
        "rows": {},
    }

    def in_this_process(timer, count, method_protocol):
        seconds = timer(method_protocol, device, count)
        return seconds, peak_memory_mb(device)

    methods = {
        "baseline": lambda: in_this_process(time_baseline, baseline_steps, protocol),
        "matmuls only (the ceiling)": lambda: in_this_process(time_matmuls_only, steps, protocol),
    }
    variants = {"": protocol, ", compiled": protocol.replace(compile=True)} if compiled else {"": protocol}
    for suffix, variant in variants.items():
        methods[f"population{suffix}"] = lambda c=variant: in_this_process(time_population, steps, c)
        if workers > 1:
            methods[f"population, {workers} jobs{suffix}"] = lambda c=variant: time_population_jobs(c, steps, workers)
    # A shared machine's peak drifts by tens of % within minutes: it is measured before and after
    # every row, and each row is a fraction of the mean of the two around it.
    peaks = [matmul_peak(device, seconds=PEAK_SECONDS)]
    for name, method in methods.items():
        seconds, memory = method()
        peaks.append(matmul_peak(device, seconds=PEAK_SECONDS))
        gflop_per_s, peak = flops / seconds / 1e9, (peaks[-2] + peaks[-1]) / 2
        result["rows"][name] = {
            "timed_steps": baseline_steps if name == "baseline" else steps,
            "seconds_per_sweep_step": seconds,
            "sweep_steps_per_s": 1 / seconds,
            "student_samples_per_s": students * config.batch / seconds,
            "effective_gflop_per_s": gflop_per_s,
            "speedup_over_baseline": None,
            "peak_memory_mb": memory,
            "matmul_peak_gflop_per_s": peak,
            "fraction_of_matmul_peak": gflop_per_s / peak,
        }
    baseline = result["rows"]["baseline"]["seconds_per_sweep_step"]
    result["matmul_peak_gflop_per_s"] = {"min": min(peaks), "max": max(peaks)}
    for row in result["rows"].values():
        row["speedup_over_baseline"] = baseline / row["seconds_per_sweep_step"]
    return result


def format_benchmark(result: dict) -> str:
    peak = result["matmul_peak_gflop_per_s"]
    lines = [
        f"sweep: {result['students']} students (depths {result['depths']}), batch {result['batch']}, "
        f"{result['sweep_gflop_per_step']:.2f} GFLOP of matmuls per sweep step; {result['device']}, "
        f"{result['threads']} threads; fp32 matmul peak {peak['min']:.0f}–{peak['max']:.0f} GFLOP/s "
        "(measured around every row)",
        f"{'':<30}{'steps':>6}{'sweep steps/s':>14}{'samples/s':>11}{'GFLOP/s':>9}{'peak':>7}{'of peak':>9}"
        f"{'speed-up':>10}{'peak MB':>9}",
    ]
    for name, row in result["rows"].items():
        lines.append(
            f"{name:<30}{row['timed_steps']:>6}{row['sweep_steps_per_s']:>14.3f}"
            f"{row['student_samples_per_s']:>11.3g}{row['effective_gflop_per_s']:>9.1f}"
            f"{row['matmul_peak_gflop_per_s']:>7.0f}{row['fraction_of_matmul_peak']:>9.0%}{row['speedup_over_baseline']:>9.1f}×"
            f"{row['peak_memory_mb']:>9.0f}"
        )
    lines.append(
        "matmuls only: the sweep's own products and nothing else, the most a step can reach; peak MB: the "
        "process's high-water mark after that row (CPU; the workers' summed for jobs), or the device's "
        "(GPU); jobs: one intra-op thread per core each, the slowest sets the pace; peak: the mean of the "
        "machine's fp32 matmul peak measured just before and just after the row"
    )
    return "\n".join(lines)
