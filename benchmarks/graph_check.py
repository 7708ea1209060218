"""The GPU check of the CUDA-graph issue, as one prepared script for one call of at most 8 minutes:

1. for regimes and fig3b at the paper's shapes (36 and 288 students, ℓ 6–48, batch 1024): the ops
   an eager step issues and how many launch a kernel (op trace: one step labelling one step's
   batch, as before blocks, and as a 16-step block labels it); kernel launches per step as the
   profiler counts them, without and with the graph; steps/s compiled, without and with the graph;
   the largest relative difference of the losses over `--steps` steps, graph against none;
2. that a replayed step never waits for the host (CUDA's sync debug mode set to raise);
3. one paper-scale experiment run to completion in the time left:
   `toymodels reproduce regimes --scale paper --compile --cuda-graphs`, and its α.

OUT/graph_check.json is written after each phase, and printed. On a CPU, `--toy` runs every phase
at toy size in about a minute (no graph is captured there): a test of the script itself.

    python benchmarks/graph_check.py --out OUT [--device cuda] [--steps 200] [--budget-s 470] [--toy]
"""

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from toymodels.performance.bench import synchronize
from toymodels.performance.step_trace import launches, syncs, trace
from toymodels.reproduce import Experiment
from toymodels.training.jobs import Job
from toymodels.training.graphs import WARMUP_STEPS, Stepper
from toymodels.training.population import Population
from toymodels.training.protocol import Protocol, resolve_device
from toymodels.training.trainer import Trainer

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--out", type=Path, default=Path("."))
parser.add_argument("--device", default="auto")
parser.add_argument("--steps", type=int, default=200, help="timed steps per sweep and variant")
parser.add_argument("--budget-s", type=float, default=470, help="seconds this script may take in all")
parser.add_argument("--toy", action="store_true", help="every sweep at toy size (a CPU test of the script)")
parser.add_argument("--ops-only", action="store_true", help="only the op traces of phase 1 (any device)")
args = parser.parse_args()
began = time.perf_counter()
device = resolve_device(args.device)
report = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu", "torch": torch.__version__,
          "toy": args.toy, "sweeps": {}}
TOY = dict(depths=(2, 4), temperatures=(0.1, 1.0), batch=16, teacher_depth=8, test_batches=1, test_batch_size=64)


def write(phase: str) -> None:
    report["seconds"] = round(time.perf_counter() - began, 1)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "graph_check.json").write_text(json.dumps(report, indent=2))
    shown = report[phase] if phase in report else report["sweeps"][phase]
    if isinstance(shown, dict):
        shown = {key: value for key, value in shown.items() if key != "tail"}
    print(f"{phase}: {json.dumps(shown)}", flush=True)


def paper_protocol(name: str, **changes) -> Protocol:
    config = Experiment.load(name).config("paper", device=str(device), **(TOY if args.toy else {}))
    return Protocol.of(config.replace(**changes))


def op_counts(protocol: Protocol, block_steps: int) -> dict:
    """One eager step's ops and launches, with the labelling of `block_steps` steps' samples spread
    over them; and a replayed step's launches: the graph, the two copies into its input buffers
    and the labelling."""
    trainer = Trainer(Population(protocol.replace(compile=False, cuda_graphs=False), device))
    trainer.fresh.steps_ahead = block_steps
    trainer.step(0)
    batch = trainer.batch(1)
    update = trace(trainer.update, *batch)[0]
    trainer.fresh.inputs = None  # a block labelled anew
    labelling = launches(trace(trainer.fresh.draw)[0]) / block_steps
    return {"block_steps": block_steps, "update_ops": len(update), "update_launches": launches(update),
            "labelling_launches_per_step": labelling, "eager_launches_per_step": launches(update) + labelling,
            "replayed_launches_per_step": 1 + 2 + labelling, "syncs": syncs(update)}


def run_steps(protocol: Protocol, steps: int) -> tuple[float, list[torch.Tensor], float | None]:
    """Seconds per step over `steps` steps after the warm-up (and capture), the losses of each step,
    and the kernel launches per step the profiler counts over 20 of them (on a GPU)."""
    stepper = Stepper(Trainer(Population(protocol, device)))
    for step in range(WARMUP_STEPS + 1):
        stepper(step)
    synchronize(device)
    losses, start = [], time.perf_counter()
    for step in range(WARMUP_STEPS + 1, WARMUP_STEPS + 1 + steps):
        losses.append(stepper(step).clone())
    synchronize(device)
    seconds = (time.perf_counter() - start) / steps
    launched = None
    if device.type == "cuda":
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as profiler:
            for step in range(WARMUP_STEPS + 1 + steps, WARMUP_STEPS + 21 + steps):
                stepper(step)
            synchronize(device)
        launched = sum(event.count for event in profiler.key_averages() if "LaunchKernel" in event.key
                       or "GraphLaunch" in event.key) / 20
    return seconds, losses, launched


for name in ("regimes", "fig3b"):  # phase 1
    protocol = paper_protocol(name)
    row = {"students": len(Job.whole(protocol).students()), "ops_before": op_counts(protocol, 1),
           "ops_after": op_counts(protocol, 16)}
    for graphs in (False, True) if not args.ops_only else ():
        seconds, losses, launched = run_steps(protocol.replace(compile=True, cuda_graphs=graphs), args.steps)
        row["graphs" if graphs else "no_graphs"] = {"ms_per_step": 1000 * seconds, "steps_per_s": 1 / seconds,
                                                    "kernel_launches_per_step": launched,
                                                    "minutes_for_all_steps": protocol.config.steps * seconds / 60}
        row.setdefault("losses", []).append(torch.stack(losses))
    if not args.ops_only:
        eager, graphed = row.pop("losses")
        row["max_relative_loss_difference"] = float(((graphed - eager).abs() / eager.abs()).nan_to_num().max())
    report["sweeps"][name] = row
    write(name)

if args.ops_only:
    sys.exit()
if device.type == "cuda":  # phase 2: a replayed step never waits for the host
    stepper = Stepper(Trainer(Population(paper_protocol("regimes", cuda_graphs=True), device)))
    for step in range(WARMUP_STEPS + 1):
        stepper(step)
    torch.cuda.set_sync_debug_mode("error")
    try:
        for step in range(WARMUP_STEPS + 1, WARMUP_STEPS + 6):
            stepper(step)
        report["replay_without_host_sync"] = True
    except RuntimeError as error:
        report["replay_without_host_sync"] = str(error)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    write("replay_without_host_sync")

# phase 3: a paper-scale experiment to completion in the time left (resumable: run it again to go on)
left = args.budget_s - (time.perf_counter() - began)
command = [sys.executable, "-m", "toymodels", "reproduce", "regimes", "--scale", "paper", "--device", str(device),
           "--compile", "--cuda-graphs", "--out", str(args.out / "regimes-paper"), "--quiet"]
if args.toy:  # regimes' protocol at toy size, as an experiment file of its own
    toy = args.out / "regimes_toy.toml"
    toy.write_text('[experiment]\ntitle = "regimes at toy size"\nclaim = "a test of graph_check.py"\n'
                   'figures = ["depth"]\n[protocol]\nteachers = ["independent", "tied"]\nloss = "mse"\n'
                   '[scales.paper]\npreset = "quick"\ndepths = [2, 4, 8]\nsteps = 60\nbatch = 16\n'
                   'teacher_depth = 8\ntest_batches = 1\n')
    command[4] = str(toy)
started = time.perf_counter()
try:
    done = subprocess.run(command, capture_output=True, text=True, timeout=max(left, 1))
    fit = args.out / "regimes-paper" / "fit.json"
    report["paper_regimes"] = {"returncode": done.returncode, "wall_s": time.perf_counter() - started,
                               "tail": (done.stdout + done.stderr)[-3000:],
                               "alphas": [{key: fit[key] for key in ("teacher", "alpha", "alpha_low", "alpha_high", "regime")}
                                          for fit in json.loads(fit.read_text())["fits"]] if fit.exists() else None}
except subprocess.TimeoutExpired:
    report["paper_regimes"] = {"timed_out_after_s": time.perf_counter() - started,
                               "resume": " ".join(command[1:])}
write("paper_regimes")
