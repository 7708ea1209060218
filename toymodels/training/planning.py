"""What a sweep costs and how it is planned: the memory a job needs, the matmul FLOPs of a step and
of the whole sweep, the memory a job may use on a device, and the plan that cuts a sweep into jobs
(`jobs.Job`) that each fit it and keep the workers busy."""

import math
import os
from dataclasses import replace

import torch

from ..errors import ToymodelsError
from ..models.blocks import mlp_matmul_flops, mlp_weight_count
from .jobs import Job
from .protocol import Protocol

# Only this share of the free memory is planned for: the allocator and the test set need the rest.
MEMORY_HEADROOM = 0.7


def job_memory_bytes(protocol: Protocol, job: Job) -> int:
    """Memory a job needs: activations saved for the backward pass, the students' outputs (logits
    and their gradients), the test set's targets, students' weights with gradients and Adam's
    moments, the teachers' weights and their pool of samples. Within 10 % of the measured peaks
    of the benchmark sweep (KL and MSE, batch 256 and 1024), which ran without a CUDA graph.

    With a graph (`cuda_graphs` on a GPU), everything the captured step allocates stays in the
    graph's private memory pool between replays, which the rest of the run cannot reuse: a second
    copy of the step's activations, outputs and gradients, and the graph's input buffers. Not
    measured on a GPU yet."""
    config, architecture, loss = protocol.config, protocol.architecture, protocol.loss
    outputs = loss.output_width(config)
    activations = architecture.saved_floats_per_layer(config.width) * config.batch * job.layers()
    logits = 4 * outputs * config.batch * len(job.students())
    test_targets = outputs * config.test_batches * config.test_batch_size * len(job.instances) * len(job.temperatures)
    parameters = architecture.weights_per_layer(config.width) * job.layers()
    weights = 4 * parameters  # with gradients and Adam's moments
    teachers = len(job.instances) * (
        config.teacher_depth * mlp_weight_count(config.width) + config.teacher_pool * 2 * config.width
    )  # a pool: inputs and read-outs
    graph_pool = 0
    if config.cuda_graphs and protocol.device.type == "cuda":
        input_buffers = len(job.instances) * config.batch * 2 * config.width  # inputs and read-outs
        graph_pool = activations + logits + parameters + input_buffers  # parameters: their gradients
    return 4 * (activations + logits + test_targets + weights + teachers + graph_pool)  # fp32


def students_bytes(protocol: Protocol) -> int:
    """Size of the whole sweep's trained students on disk (fp32)."""
    config, whole = protocol.config, Job.whole(protocol)
    head_width = protocol.loss.student_head_width(config) or 0
    weights = protocol.architecture.weights_per_layer(config.width) * whole.layers()
    return 4 * (weights + len(whole.students()) * config.width * head_width)


def sweep_flops_per_step(protocol: Protocol) -> float:
    """Matmul FLOPs of one training step of the whole sweep: each teacher once (forward, and its
    head when the loss has one), each student-layer forward and backward, students' heads likewise
    (3× a forward pass). A loop that recomputes a teacher per student wastes work not counted here."""
    config, whole = protocol.config, Job.whole(protocol)
    head = protocol.loss.head_flops_per_sample(config)
    students = (
        whole.layers() * protocol.architecture.matmul_flops_per_layer(config.width) + len(whole.students()) * 3 * head
    )
    return config.batch * (teacher_flops_per_sample(protocol) + students)


def teacher_flops_per_sample(protocol: Protocol) -> float:
    """Matmul FLOPs of every teacher instance's forward pass (and head) on one input."""
    config = protocol.config
    head = protocol.loss.head_flops_per_sample(config)
    return len(config.teacher_instances) * (config.teacher_depth * mlp_matmul_flops(config.width) + head)


def sweep_flops(protocol: Protocol) -> float:
    """Matmul FLOPs of the whole sweep at its step budget: every step as `sweep_flops_per_step`,
    except that with a teacher pool the teachers run once per pool sample and generation of the
    pool (one, or one per `pool_refresh` steps), not every step."""
    config = protocol.config
    if not config.teacher_pool:
        return sweep_flops_per_step(protocol) * config.steps
    teachers = teacher_flops_per_sample(protocol)
    generations = -(-config.steps // config.pool_refresh) if config.pool_refresh else 1
    return (
        sweep_flops_per_step(protocol) - config.batch * teachers
    ) * config.steps + generations * config.teacher_pool * teachers


def free_memory_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    try:
        with open("/proc/meminfo") as meminfo:  # MemAvailable counts reclaimable caches, unlike free pages
            fields = dict(line.split(":", 1) for line in meminfo)
        return int(fields["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")


def memory_budget_bytes(protocol: Protocol, workers: int) -> int:
    """What one of `workers` jobs running side by side on the protocol's device may use."""
    if protocol.config.max_memory_gb is not None:
        return int(protocol.config.max_memory_gb * 2**30)
    return int(MEMORY_HEADROOM * free_memory_bytes(protocol.device) / workers)


def size(nbytes: float) -> str:
    for unit, scale in (("TB", 2**40), ("GB", 2**30)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes / 2**20:.1f} MB"


def plan_jobs(protocol: Protocol, workers: int = 1, budget_bytes: int | None = None) -> list[Job]:
    """At least `workers` jobs (as far as the sweep divides), each needing at most `budget_bytes`.
    The costliest job is halved until both hold; jobs are named job000, job001, … in sweep order."""
    jobs = [Job.whole(protocol)]
    budget = math.inf if budget_bytes is None else budget_bytes
    while True:
        too_big = [job for job in jobs if job_memory_bytes(protocol, job) > budget]
        splittable = [job for job in jobs if job.split()]
        if too_big:
            target = max(too_big, key=Job.layers)
            if not target.split():
                raise ToymodelsError(
                    f"one student of depth {target.depths[0]} with its teacher needs "
                    f"{size(job_memory_bytes(protocol, target))}, more than the {size(budget)} a job may use; lower "
                    f"--batch (or --teacher-depth, --teacher-pool), or raise --max-memory"
                )
        elif len(jobs) < workers and splittable:
            target = max(splittable, key=Job.layers)
        else:
            return [replace(job, name=f"job{k:03d}") for k, job in enumerate(jobs)]
        at = jobs.index(target)
        jobs[at : at + 1] = target.split()
