"""Whether a replayed graph trains as the eager step does, in a form that can fail: a run of a
`Stepper` recorded (`record_steps`), a run with the graph compared with the same step run without
it and with the eager step (`compare_replay`), and a CPU stand-in for a CUDA graph (`RerunGraph`),
so that the comparison and the stepper's buffers and guards are checked without a GPU
(tests/test_graphs.py, and benchmarks/graph_check.py --toy).

The runs start from the same seeds, so step k of each trains on the same batch from the same
weights. What the comparison asks of the run with the graph:

- a graph captured, and every step after the warm-up replayed from it: a record in which no graph
  ran proves nothing;
- against each reference, no step where one run's loss is finite and the other's is not (counted
  apart: a NaN must never pass as a difference of 0), and every replayed step's losses within
  `STEP_TOLERANCE` (relative) of the reference's;
- against the same step without the graph (the same kernels), more: the first replayed steps
  within `TOLERANCE`; the final weights within `WEIGHT_TOLERANCE` (relative to the tensor's
  largest weight), and no weight finite in one run and not in the other; and a stale-input probe:
  each of the first replayed steps, two batches, matches the reference on its own batch and not
  on the batch before it (what a graph that kept reading an old buffer would give), and the two
  answers differ by more than the tolerance, so the probe can tell them apart.

Against the eager step (other kernels: a compiled step fuses what eager runs apart) only the
losses are judged: Adam can turn a rounding difference in a near-zero gradient into a whole step
of one weight, which moves the losses far less.
"""

import time
from contextlib import nullcontext

import torch

from ..training.cuda_graphs import WARMUP_STEPS, Stepper
from .bench import synchronize

FIRST_STEPS = 5  # replayed steps held to the tolerance
PROBE_STEPS = 2  # replayed steps probed for a stale input: two batches
TIMED_FROM = WARMUP_STEPS + PROBE_STEPS  # the steps after the capture and the probe are timed
TOLERANCE = 1e-6  # relative, on the first replayed steps' losses, against the same kernels
STEP_TOLERANCE = 1e-4  # relative, on every replayed step's losses, against either reference
WEIGHT_TOLERANCE = 1e-4  # relative to the tensor's largest weight, after the run's steps


class RerunGraph:
    """A CUDA graph's stand-in on the CPU: the capture keeps the step instead of recording it, and
    a replay runs it again on the same input buffers and writes its losses into the tensor the
    capture returned, as a replay writes a graph's outputs. A replay may not compile, as a capture
    may not. It cannot show what only the device can: a kernel reading memory the graph left."""

    def __init__(self, device: torch.device):
        self.step = self.outputs = None

    def warming_up(self):
        return nullcontext()

    def capture(self, step):
        self.step, self.outputs = step, torch.empty(0)
        return self.outputs

    def replay(self) -> None:
        with torch.compiler.set_stance("fail_on_recompile"):
            losses = self.step()
        self.outputs.resize_as_(losses).copy_(losses)

    def reset(self) -> None:
        self.step = self.outputs = None


def record_steps(stepper: Stepper, steps: int) -> dict:
    """Steps 0 … `steps` − 1 of `stepper` (more than TIMED_FROM): each step's losses (steps,
    students), the final weights, the seconds a step took from step TIMED_FROM on, and whether a
    graph was captured and how many steps were replayed from it. A stepper
    without a graph also records the stale-input probe's answers: the losses each of the
    PROBE_STEPS first replayed steps would give on the batch of the step before it, from the same
    weights (evaluated eagerly, outside the step). Losses stay on the device until the end."""
    trainer, losses, stale, previous = stepper.trainer, [], [], None
    device = trainer.population.device
    for step in range(steps):
        if step == TIMED_FROM:
            synchronize(device)
            began = time.perf_counter()
        if stepper.captures:
            losses.append(stepper(step).clone())
            continue
        batch = trainer.batch(step)
        if WARMUP_STEPS <= step < TIMED_FROM:
            population = trainer.population
            with torch.no_grad(), torch.compiler.set_stance("force_eager"), population.precision():
                stale.append(population.losses(previous[0], population.targets_from_readout(previous[1])))
        losses.append(trainer.update(*batch).clone())
        previous = batch
    synchronize(device)
    seconds = (time.perf_counter() - began) / (steps - TIMED_FROM)
    weights = {name: tensor.detach().cpu().clone() for name, tensor in trainer.population.students.state_dict().items()}
    return {
        "losses": torch.stack(losses).cpu(),
        "weights": weights,
        "seconds_per_step": seconds,
        "captured": stepper.losses is not None,
        "replays": stepper.replays,
        **({} if stepper.captures else {"stale_losses": torch.stack(stale).cpu()}),
    }


def relative(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """|a − b| / |b| where both are finite, 0 elsewhere (non-finite values are judged apart)."""
    both = torch.isfinite(a) & torch.isfinite(b)
    return torch.where(both, (a - b).abs() / b.abs().clamp(min=torch.finfo(b.dtype).tiny), 0)


def judge_losses(reference: dict, graphed: dict) -> tuple[list[str], dict]:
    """What every reference asks of the run with the graph: no loss finite in one run and not in
    the other, and every replayed step (from WARMUP_STEPS on) within STEP_TOLERANCE. The failures
    in words, and the numbers behind them."""
    failures = []
    losses, reference_losses = graphed["losses"], reference["losses"]
    nonfinite = int((torch.isfinite(losses) != torch.isfinite(reference_losses)).sum())
    if nonfinite:
        failures.append(f"{nonfinite} losses finite in one run and not in the other")
    per_step = relative(losses[WARMUP_STEPS:], reference_losses[WARMUP_STEPS:]).amax(dim=1)
    beyond = (per_step > STEP_TOLERANCE).nonzero().flatten().tolist()
    if beyond:
        failures.append(
            f"{len(beyond)} of the {len(per_step)} replayed steps differ by more than {STEP_TOLERANCE:g} "
            f"(steps {beyond[0] + WARMUP_STEPS}–{beyond[-1] + WARMUP_STEPS}, by up to "
            f"{float(per_step.max()):.3g})"
        )
    return failures, {
        "nonfinite_mismatches": nonfinite,
        "replayed_steps_max_relative_difference": float(per_step.max()),
    }


def compare_replay(reference: dict, graphed: dict, eager: dict | None = None) -> dict:
    """`graphed`, a `record_steps` record of a stepper with a graph, judged as the module
    docstring says against `reference`, the same step without the graph (with its stale probe),
    and against `eager`, the uncompiled step, where given: `passed`, the `failures` in words, and
    the numbers behind them."""
    failures = []
    after_warm_up = len(graphed["losses"]) - WARMUP_STEPS
    if not graphed["captured"]:
        failures.append("no graph was captured: the record is of steps without one")
    elif graphed["replays"] != after_warm_up:
        failures.append(f"{graphed['replays']} of the {after_warm_up} steps after the warm-up were replayed")
    judged, numbers = judge_losses(reference, graphed)
    failures += judged
    losses, reference_losses = graphed["losses"], reference["losses"]
    first = slice(WARMUP_STEPS, WARMUP_STEPS + FIRST_STEPS)
    first_difference = float(relative(losses[first], reference_losses[first]).max())
    if not first_difference <= TOLERANCE:
        failures.append(f"the first replayed steps differ by {first_difference:.3g} > {TOLERANCE:g}")

    weight_differences, weight_nonfinite = {}, 0
    for name, tensor in graphed["weights"].items():
        other = reference["weights"][name]
        weight_nonfinite += int((torch.isfinite(tensor) != torch.isfinite(other)).sum())
        scale = other[torch.isfinite(other)].abs().max().clamp(min=torch.finfo(other.dtype).tiny)
        both = torch.isfinite(tensor) & torch.isfinite(other)
        weight_differences[name] = float(torch.where(both, (tensor - other).abs(), 0).max() / scale)
    worst = max(weight_differences.values())
    if weight_nonfinite:
        failures.append(f"{weight_nonfinite} final weights finite in one run and not in the other")
    if not worst <= WEIGHT_TOLERANCE:
        failures.append(f"the final weights differ by {worst:.3g} > {WEIGHT_TOLERANCE:g} of their largest")

    probe = []
    for k, stale in enumerate(reference["stale_losses"]):
        step = WARMUP_STEPS + k
        own = float(relative(losses[step], reference_losses[step]).max())
        separation = float(relative(stale, reference_losses[step]).max())
        probe.append(
            {
                "step": step,
                "difference_from_its_batch": own,
                "batches_differ_by": separation,
                "difference_from_the_batch_before": float(relative(losses[step], stale).max()),
            }
        )
        if not separation > 100 * TOLERANCE:
            failures.append(f"step {step}'s batch and the one before give the same losses: the probe cannot tell")
        elif not own <= TOLERANCE:
            stale_too = probe[-1]["difference_from_the_batch_before"] <= TOLERANCE
            failures.append(
                f"replayed step {step} does not match on its batch"
                + (" but on the batch before it: a stale input" if stale_too else "")
            )
    result = {
        "captured": graphed["captured"],
        "replays": graphed["replays"],
        **numbers,
        "first_steps_max_relative_difference": first_difference,
        "final_weights_max_relative_difference": worst,
        "final_weights_nonfinite_mismatches": weight_nonfinite,
        "stale_input_probe": probe,
    }
    if eager is not None:
        judged, result["against_eager"] = judge_losses(eager, graphed)
        failures += [f"against eager: {failure}" for failure in judged]
    return {"passed": not failures, "failures": failures, **result}
