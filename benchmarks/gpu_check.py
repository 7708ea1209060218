"""The GPU check of the performance issue, as one short script (about 5 minutes on an H200):

1. `toymodels bench --compile` on the default benchmark sweep, fp32 and bf16;
2. the paper's full fig3b sweep (288 students, 40k steps × 1024) in one process: a few hundred
   timed steps, the steps/s, peak memory, and the projected wall time of all 40k steps (goal:
   ≤ 10 minutes on one H200), eager and compiled;
3. that a training step never waits for the host (CUDA's sync debug mode set to raise).

Everything goes to OUT/gpu_check.json and is printed. On a CPU it runs too, as a smoke test:

    python benchmarks/gpu_check.py [--out OUT] [--device cuda] [--steps 200]
"""

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import torch

from toymodels.api import Experiment
from toymodels.performance.bench import peak_memory_mb, time_population
from toymodels.training.jobs import Job
from toymodels.training.planning import sweep_flops_per_step
from toymodels.training.population import Population
from toymodels.training.protocol import Protocol, resolve_device
from toymodels.training.trainer import Trainer

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--out", type=Path, default=Path("."))
parser.add_argument("--device", default="auto")
parser.add_argument("--steps", type=int, default=200, help="timed steps of the fig3b sweep")
parser.add_argument("--bench-steps", type=int, default=100)
parser.add_argument("--batch", type=int, help="override the sweep's batch (CPU smoke tests)")
args = parser.parse_args()
device = resolve_device(args.device)
report = {
    "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
    "torch": torch.__version__,
    "bench": {},
    "fig3b": {},
}

for precision in ("fp32", "bf16"):
    started = time.perf_counter()
    smaller = ["--batch", str(args.batch), "--temperature-count", "2", "--baseline-steps", "1"] if args.batch else []
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "toymodels",
            "bench",
            "--device",
            str(device),
            "--compile",
            "--precision",
            precision,
            "--steps",
            str(args.bench_steps),
            "--json",
            *smaller,
        ],
        capture_output=True,
        text=True,
    )
    report["bench"][precision] = json.loads(done.stdout) if done.returncode == 0 else {"error": done.stderr[-2000:]}
    report["bench"][precision]["wall_s"] = time.perf_counter() - started
    print(
        f"bench {precision}: {json.dumps(report['bench'][precision].get('rows', report['bench'][precision]))}",
        flush=True,
    )

protocol = Protocol.of(Experiment.load("fig3b").config("paper", device=str(device), batch=args.batch))
config, students = protocol.config, len(Job.whole(protocol).students())
for compiled in (False, True):
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    seconds = time_population(protocol.replace(compile=compiled), device, args.steps)
    row = {
        "students": students,
        "timed_steps": args.steps,
        "steps_per_s": 1 / seconds,
        "gflop_per_s": sweep_flops_per_step(protocol) / seconds / 1e9,
        "peak_memory_mb": peak_memory_mb(device),
        "projected_minutes_for_all_steps": config.steps * seconds / 60,
    }
    report["fig3b"]["compiled" if compiled else "eager"] = row
    print(f"fig3b paper sweep ({'compiled' if compiled else 'eager'}): {json.dumps(row)}", flush=True)

if device.type == "cuda":  # the step must never wait for the host: CUDA raises on any synchronisation
    trainer = Trainer(Population(config, device))
    trainer.step(0)
    torch.cuda.set_sync_debug_mode("error")
    try:
        for step in range(1, 4):
            trainer.step(step)
        report["step_without_host_sync"] = True
    except RuntimeError as error:
        report["step_without_host_sync"] = str(error)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    print(f"training step without host-device sync: {report['step_without_host_sync']}", flush=True)

args.out.mkdir(parents=True, exist_ok=True)
(args.out / "gpu_check.json").write_text(json.dumps(report, indent=2))
print(f"written: {args.out / 'gpu_check.json'}")
