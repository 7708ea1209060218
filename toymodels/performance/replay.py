"""Whether a replayed graph trains as the eager step does, in a form that can fail: a run of a
`Stepper` recorded (`record_steps`), two such runs compared (`compare_replay`), and a CPU stand-in
for a CUDA graph (`RerunGraph`), so that the comparison and the stepper's buffers and guards are
checked without a GPU (tests/test_graphs.py, and benchmarks/graph_check.py --toy).

The two runs, one with the graph and one without, start from the same seeds, so step k of both
trains on the same batch from the same weights. What the comparison asks of them:

- no step where one run's loss is finite and the other's is not (counted apart: a NaN must never
  pass as a difference of 0);
- the first replayed steps within `tolerance` (relative) of the eager step's losses;
- the final weights within `weight_tolerance` (relative to the tensor's largest weight), and no
  weight finite in one run and not in the other;
- a stale-input probe: each of the first replayed steps, two batches, matches eager on its own
  batch and not on the batch before it (what a graph that kept reading an old buffer would give),
  and the two answers differ by more than the tolerance, so the probe can tell them apart.

Over the later steps the difference is reported, not judged: Adam's updates may amplify rounding.
"""

import time
from contextlib import nullcontext

import torch

from ..training.graphs import WARMUP_STEPS, Stepper
from .bench import synchronize

FIRST_STEPS = 5  # replayed steps held to the tolerance
PROBE_STEPS = 2  # replayed steps probed for a stale input: two batches
TIMED_FROM = WARMUP_STEPS + PROBE_STEPS  # the steps after the capture and the probe are timed
TOLERANCE = 1e-6  # relative, on a step's losses
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
    students), the final weights, and the seconds a step took from step TIMED_FROM on. A stepper
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
    return {"losses": torch.stack(losses).cpu(), "weights": weights, "seconds_per_step": seconds,
            **({} if stepper.captures else {"stale_losses": torch.stack(stale).cpu()})}


def relative(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """|a − b| / |b| where both are finite, 0 elsewhere (non-finite values are judged apart)."""
    both = torch.isfinite(a) & torch.isfinite(b)
    return torch.where(both, (a - b).abs() / b.abs().clamp(min=torch.finfo(b.dtype).tiny), 0)


def compare_replay(eager: dict, graphed: dict, first_replayed: int = WARMUP_STEPS, tolerance: float = TOLERANCE,
                   weight_tolerance: float = WEIGHT_TOLERANCE) -> dict:
    """Two `record_steps` records on the same batches, `eager` with its stale probe, judged as the
    module docstring says: `passed`, the `failures` in words, and the numbers behind them."""
    failures = []
    losses, eager_losses = graphed["losses"], eager["losses"]
    nonfinite = int((torch.isfinite(losses) != torch.isfinite(eager_losses)).sum())
    if nonfinite:
        failures.append(f"{nonfinite} losses finite in one run and not in the other")
    first = slice(first_replayed, first_replayed + FIRST_STEPS)
    first_difference = float(relative(losses[first], eager_losses[first]).max())
    if not first_difference <= tolerance:
        failures.append(f"the first replayed steps differ from eager by {first_difference:.3g} > {tolerance:g}")

    weight_differences, weight_nonfinite = {}, 0
    for name, tensor in graphed["weights"].items():
        other = eager["weights"][name]
        weight_nonfinite += int((torch.isfinite(tensor) != torch.isfinite(other)).sum())
        scale = other[torch.isfinite(other)].abs().max().clamp(min=torch.finfo(other.dtype).tiny)
        both = torch.isfinite(tensor) & torch.isfinite(other)
        weight_differences[name] = float(torch.where(both, (tensor - other).abs(), 0).max() / scale)
    worst = max(weight_differences.values())
    if weight_nonfinite:
        failures.append(f"{weight_nonfinite} final weights finite in one run and not in the other")
    if not worst <= weight_tolerance:
        failures.append(f"the final weights differ by {worst:.3g} > {weight_tolerance:g} of their largest")

    probe = []
    for k, stale in enumerate(eager["stale_losses"]):
        step = first_replayed + k
        own = float(relative(losses[step], eager_losses[step]).max())
        separation = float(relative(stale, eager_losses[step]).max())
        probe.append({"step": step, "difference_from_its_batch": own, "batches_differ_by": separation,
                      "difference_from_the_batch_before": float(relative(losses[step], stale).max())})
        if not separation > 100 * tolerance:
            failures.append(f"step {step}'s batch and the one before give the same losses: the probe cannot tell")
        elif not own <= tolerance:
            stale_too = probe[-1]["difference_from_the_batch_before"] <= tolerance
            failures.append(f"replayed step {step} does not match eager on its batch"
                            + (" but on the batch before it: a stale input" if stale_too else ""))
    return {"passed": not failures, "failures": failures, "nonfinite_mismatches": nonfinite,
            "first_steps_max_relative_difference": first_difference,
            "all_steps_max_relative_difference": float(relative(losses, eager_losses).max()),
            "final_weights_max_relative_difference": worst, "final_weights_nonfinite_mismatches": weight_nonfinite,
            "stale_input_probe": probe}
