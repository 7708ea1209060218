"""The GPU check of the CUDA-graph issue, as one prepared script for one call of a 15-minute loan that
always leaves a result: by default it takes 7 minutes, leaving the rest of the loan for a rerun.

1. for regimes and fig3b at the paper's shapes (36 and 288 students, ℓ 6–48, batch 1024), each a
   variant of its own: the ops an eager step issues and how many launch a kernel (op trace, one step
   labelling one step's batch and a 16-step block); then `--steps` steps compiled without the graph
   and with it (steps/s, kernel launches per step from the profiler); then their comparison, which
   can fail (performance/replay.py): non-finite mismatches counted apart, the first replayed steps
   within 1e-6 of eager on the same batch, the final weights, and a stale-input probe;
2. that replayed steps never wait for the host (CUDA's sync debug mode set to raise), over steps
   that cross a relabelling of the samples;
3. regimes at the paper's scale through the real engine (`train`, compiled, with the graph) for a
   fixed number of steps sized from the step time phase 1 measured, to fit the budget left.

The clock starts before the imports. OUT/graph_check.json is written at the start and after every
variant; each variant records its error instead of ending the script, and each is skipped, with the
reason, when the budget left is less than it needs. On a CPU, `--toy` runs every phase at toy size,
with a CPU stand-in for the graph (performance/replay.py): a test of the script itself. `--fail
VARIANT` makes one variant fail on purpose (e.g. regimes/graphs), to see what a failure leaves.

    python benchmarks/graph_check.py --out OUT [--device cuda] [--steps 200] [--budget-s 420] [--toy]
"""

import time

began = time.perf_counter()  # noqa: E402 - before the imports, which take seconds of the budget

import argparse  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import traceback  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

from toymodels.api import Experiment  # noqa: E402
from toymodels.performance.bench import synchronize  # noqa: E402
from toymodels.performance.replay import (  # noqa: E402
    TIMED_FROM,
    RerunGraph,
    compare_replay,
    record_steps,
)
from toymodels.performance.step_trace import launches, syncs, trace  # noqa: E402
from toymodels.training.engine import train  # noqa: E402
from toymodels.training.graphs import WARMUP_STEPS, Stepper  # noqa: E402
from toymodels.training.jobs import Job  # noqa: E402
from toymodels.training.population import Population  # noqa: E402
from toymodels.training.protocol import Protocol, resolve_device  # noqa: E402
from toymodels.training.trainer import Trainer  # noqa: E402

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--out", type=Path, default=Path("."))
parser.add_argument("--device", default="auto")
parser.add_argument("--steps", type=int, default=200, help="steps per sweep and variant")
parser.add_argument("--budget-s", type=float, default=420, help="seconds this script may take in all, imports included")
parser.add_argument("--toy", action="store_true", help="every sweep at toy size (a CPU test of the script)")
parser.add_argument("--ops-only", action="store_true", help="only the op traces of phase 1 (any device)")
parser.add_argument("--fail", metavar="VARIANT", help="make this variant fail on purpose, e.g. regimes/graphs")
args = parser.parse_args()
if args.steps < 2 * TIMED_FROM:
    parser.error(f"--steps: at least {2 * TIMED_FROM}, the warm-up, the capture and the compared steps with some to time")
device = resolve_device(args.device)
GRAPH = None if device.type == "cuda" else RerunGraph  # on a CPU, the stand-in replays the step
TOY = dict(depths=(2, 4), temperatures=(0.1, 1.0), batch=16, teacher_depth=8, test_batches=1, test_batch_size=64)
# What a variant needs at least, in seconds: a compile of a paper-shape population (about a minute
# on an H200, less from inductor's cache) and its steps; the paper-scale run keeps a margin for its
# evaluations and the end of the script.
NEEDS = {"ops": 20, "run": 90, "comparison": 1, "sync": 90, "paper": 150}
PAPER_MARGIN_S = 30
report = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu", "torch": torch.__version__,
          "toy": args.toy, "budget_s": args.budget_s, "steps": args.steps, "sweeps": {}}


def left() -> float:
    return args.budget_s - (time.perf_counter() - began)


def write() -> None:
    report["seconds"] = round(time.perf_counter() - began, 1)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "graph_check.json").write_text(json.dumps(report, indent=2))


def variant(where: dict, label: str, need_s: float, measure) -> None:
    """`where[name]` (the last part of `label`) = what `measure()` returns, with the seconds it
    took; or the error it raised; or why it was skipped: less budget left than `need_s`. Written
    out either way."""
    name = label.split("/")[-1]
    if left() < need_s:
        where[name] = {"skipped": f"{left():.0f} s of the budget left, it needs about {need_s:.0f}"}
    else:
        started = time.perf_counter()
        try:
            if args.fail == label:
                raise RuntimeError("made to fail on purpose (--fail)")
            where[name] = {**measure(), "seconds": round(time.perf_counter() - started, 1)}
        except Exception as error:  # noqa: BLE001 - a failed variant is a result: record it, go on
            where[name] = {"error": f"{type(error).__name__}: {error}", "seconds": round(time.perf_counter() - started, 1),
                           "traceback": traceback.format_exc()[-3000:]}
        finally:
            if device.type == "cuda":
                torch.cuda.empty_cache()
    write()
    shown = {key: value for key, value in where[name].items() if key != "traceback"}
    print(f"{label}: {json.dumps(shown)[:600]}", flush=True)


def paper_protocol(name: str, **changes) -> Protocol:
    config = Experiment.load(name).config("paper", device=str(device), **(TOY if args.toy else {}))
    return Protocol.of(config.replace(**changes))


def op_counts(protocol: Protocol) -> dict:
    """One eager step's ops and launches, with the labelling of a 1-step and a 16-step block spread
    over them; and a replayed step's launches: the graph, the two copies into its input buffers
    and the labelling."""
    counts = {}
    for block_steps in (1, 16):
        trainer = Trainer(Population(protocol.replace(compile=False, cuda_graphs=False), device))
        trainer.fresh.steps_ahead = block_steps
        trainer.step(0)
        update = trace(trainer.update, *trainer.batch(1))[0]
        trainer.fresh.inputs = None  # a block labelled anew
        labelling = launches(trace(trainer.fresh.draw)[0]) / block_steps
        counts[f"block_{block_steps}"] = {
            "update_ops": len(update), "update_launches": launches(update), "labelling_launches_per_step": labelling,
            "eager_launches_per_step": launches(update) + labelling, "replayed_launches_per_step": 1 + 2 + labelling,
            "syncs": syncs(update)}
    return counts


def timed_run(protocol: Protocol, graphs: bool, records: dict) -> dict:
    """`--steps` steps compiled, with the graph or without; the record goes to `records` for the
    comparison, the numbers to the report."""
    stepper = Stepper(Trainer(Population(protocol.replace(compile=True, cuda_graphs=graphs), device)),
                      GRAPH if graphs else None)
    started = time.perf_counter()
    record = records[graphs] = record_steps(stepper, args.steps)
    seconds = record["seconds_per_step"]
    row = {"ms_per_step": 1000 * seconds, "steps_per_s": 1 / seconds,
           "build_s": time.perf_counter() - started - (args.steps - TIMED_FROM) * seconds,  # compile and capture
           "minutes_for_all_steps": protocol.config.steps * seconds / 60}
    if device.type == "cuda":
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as profiler:
            for step in range(args.steps, args.steps + 20):
                stepper(step)
            synchronize(device)
        row["kernel_launches_per_step"] = sum(event.count for event in profiler.key_averages()
                                              if "LaunchKernel" in event.key or "GraphLaunch" in event.key) / 20
    stepper.release()
    return row


def comparison(records: dict) -> dict:
    if set(records) != {False, True}:
        raise RuntimeError("a run to compare is missing: see the variants above")
    return compare_replay(records[False], records[True])


def sync_check() -> dict:
    """Replayed steps under CUDA's sync debug mode (set to raise), from the first after the capture
    to the first of the next labelling block: every op of a replayed step and of a relabel."""
    stepper = Stepper(Trainer(Population(paper_protocol("regimes", compile=True, cuda_graphs=True), device)))
    for step in range(WARMUP_STEPS + 1):
        stepper(step)
    last = stepper.trainer.fresh.steps_ahead + 1  # the steps of this block, then one that labels the next
    torch.cuda.set_sync_debug_mode("error")
    try:
        for step in range(WARMUP_STEPS + 1, last + 1):
            stepper(step)
        synchronize(device)
    finally:
        torch.cuda.set_sync_debug_mode(0)
        stepper.release()
    return {"replay_without_host_sync": True, "steps_checked": [WARMUP_STEPS + 1, last], "relabels_crossed": 1}


def paper_regimes(measured: dict) -> dict:
    """regimes at the paper's scale through the engine, for as many steps as fit the budget left at
    the step time and build time phase 1 measured (with the graph where that ran, else without)."""
    timed = [graphs for graphs in ("graphs", "no_graphs") if "ms_per_step" in measured.get(graphs, {})]
    if not timed:
        raise RuntimeError("phase 1 measured no step time of regimes to size the run with")
    timing = measured[timed[0]]
    steps = int((left() - PAPER_MARGIN_S - timing["build_s"]) / (timing["ms_per_step"] / 1000))
    protocol = paper_protocol("regimes", compile=True, cuda_graphs=timed[0] == "graphs")
    steps = min(steps, protocol.config.steps, args.steps if args.toy else protocol.config.steps)
    if steps < min(100, args.steps):
        raise RuntimeError(f"only {steps} steps fit the budget left")
    started = time.perf_counter()
    trained = train(protocol.replace(steps=steps))
    wall = time.perf_counter() - started
    return {"cuda_graphs": protocol.config.cuda_graphs, "steps": steps, "wall_s": wall, "split_s": trained.seconds,
            "steps_per_s_with_evaluations": steps / wall,
            "paper_steps": protocol.config.steps,
            "minutes_for_all_steps": protocol.config.steps / steps * wall / 60}


write()  # a result from the start: the device and the plan
for name in ("regimes", "fig3b"):  # phase 1
    row = report["sweeps"][name] = {}
    protocol = paper_protocol(name)
    row["students"] = len(Job.whole(protocol).students())
    variant(row, f"{name}/ops", NEEDS["ops"], lambda: op_counts(protocol))
    if not args.ops_only:
        records = {}
        for graphs in (False, True):
            variant(row, f"{name}/{'graphs' if graphs else 'no_graphs'}", NEEDS["run"],
                    lambda: timed_run(protocol, graphs, records))
        variant(row, f"{name}/comparison", NEEDS["comparison"], lambda: comparison(records))
if args.ops_only:
    sys.exit()

phases = report["phases"] = {}
if device.type == "cuda":  # phase 2
    variant(phases, "sync", NEEDS["sync"], sync_check)
else:
    phases["sync"] = {"skipped": "CUDA's sync debug mode needs a GPU"}
    write()
variant(phases, "paper_regimes", NEEDS["paper"], lambda: paper_regimes(report["sweeps"]["regimes"]))  # phase 3
