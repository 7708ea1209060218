"""Before any work: a sweep that cannot run is refused with one line, and a long one is announced.

All cheap, and all before a results folder is written:
- every component name is resolved (`Protocol.of`, by the caller);
- every component the protocol names (teacher, student, loss, schedule; built-in or a user's
  plug-in) runs one training step on a miniature of the sweep, on the CPU: one that raises or
  returns garbage is named here, not in a failed job;
- the sweep's memory and compute are set against this device: a student that cannot fit is
  refused, a sweep that would take more than `REFUSED_SECONDS` is refused, and one that takes more
  than `ANNOUNCED_SECONDS` says so with its estimate.
"""

import functools
import time
import traceback

import torch

from ..errors import ToymodelsError
from .planning import memory_budget_bytes, plan_jobs, sweep_flops
from .population import Population
from .protocol import Protocol
from .trainer import Trainer

ANNOUNCED_SECONDS = 3600
REFUSED_SECONDS = 30 * 24 * 3600
MINIATURE_BATCH = 4


def preflight(protocol: Protocol) -> str | None:
    """Every check of this module, in order (a sweep that cannot fit is never rehearsed); returns
    the line announcing a long sweep, if it is one."""
    announcement = check_feasible(protocol)
    rehearse(protocol)
    return announcement


def rehearse(protocol: Protocol) -> None:
    """One training step of a miniature sweep (the shallowest student of one teacher of each
    kind, batch 4, on the CPU); raises ToymodelsError naming the components if it fails or gives
    per-student losses that are not one finite number each."""
    config = protocol.config
    miniature = protocol.stage(
        depths=(min(config.depths),),
        depth_lr=(),
        replicates=1,
        batch=MINIATURE_BATCH,
        test_batches=1,
        test_batch_size=MINIATURE_BATCH,
        teacher_pool=0,
        pool_refresh=0,
        converge=False,
        steps=1,
        evals=1,
        device="cpu",
        compile=False,
    )
    parts = (
        f"teacher {', '.join(config.teachers)}, student {config.student}, loss {config.loss}, "
        f"schedule {config.schedule}, start {', '.join(config.starts)}"
    )
    try:
        population = Population(miniature, torch.device("cpu"))
        losses = Trainer(population).step(0)
    except ToymodelsError:
        raise
    except Exception as error:  # noqa: BLE001 - a plug-in can raise anything; the user gets where and what
        where = traceback.extract_tb(error.__traceback__)[-1]
        raise ToymodelsError(
            f"the protocol ({parts}) fails on a test batch: {type(error).__name__}: {error} "
            f"(at {where.filename}:{where.lineno})"
        ) from None
    students = len(population.specs)
    if not isinstance(losses, torch.Tensor) or losses.shape != (students,) or not losses.isfinite().all():
        found = tuple(losses.shape) if isinstance(losses, torch.Tensor) else type(losses).__name__
        raise ToymodelsError(
            f"loss {config.loss!r} must give one finite number per student ({students} here) at "
            f"the start of training, got {found}" + (f": {losses.tolist()}" if isinstance(losses, torch.Tensor) else "")
        )


@functools.cache
def matmul_flops_per_second(device: torch.device) -> float:
    """What this device does in matmuls of the students' shape: the best of five 20 ms trials (a
    busy machine slows some of them). An upper bound of a sweep's speed, so times estimated from
    it are lower bounds."""
    a, b = torch.randn(16384, 32, device=device), torch.randn(32, 128, device=device)
    best = 0.0
    for _ in range(5):
        start, count = time.perf_counter(), 0
        while count < 2 or time.perf_counter() - start < 0.02:
            a @ b
            count += 1
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        best = max(best, 2 * a.shape[0] * a.shape[1] * b.shape[1] * count / (time.perf_counter() - start))
    return best


def duration(seconds: float) -> str:
    for unit, length in (("years", 365 * 86400), ("days", 86400), ("h", 3600), ("min", 60)):
        if seconds >= length:
            return f"{seconds / length:.3g} {unit}"
    return f"{seconds:.0f} s"


def check_feasible(protocol: Protocol) -> str | None:
    """Refuse a sweep whose students cannot fit in memory on its device, or whose matmuls alone
    would take more than REFUSED_SECONDS there; returns a line announcing one that takes more than
    ANNOUNCED_SECONDS."""
    device = protocol.device
    plan_jobs(protocol, 1, memory_budget_bytes(protocol, 1))  # raises when one student cannot fit
    flops, rate = sweep_flops(protocol), matmul_flops_per_second(device)
    seconds = flops / rate
    estimate = (
        f"its matmuls alone ({flops:.3g} FLOP) take at least {duration(seconds)} on this "
        f"{device.type} ({rate / 1e9:.0f} GFLOP/s measured)"
    )
    if seconds > REFUSED_SECONDS:
        raise ToymodelsError(f"sweep refused: {estimate}; lower --steps, --depths, --batch or --replicates")
    return f"a long sweep: {estimate}" if seconds > ANNOUNCED_SECONDS else None
