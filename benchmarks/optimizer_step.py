"""What a step of each optimiser costs, as a ratio in one process: the lever table prices Muon's
steps against Adam's on the students it trains (the first tied teacher's ℓ 12 and 24, batch 1024).

    python benchmarks/optimizer_step.py [--steps 40] [--rounds 3] [--depths 12,24] [--out FILE.json]

Rounds alternate the optimisers over one population each (eager: the compiled step's ratio is
close), so a shared machine's load falls on both alike; prints the median seconds per step of each
and their ratio, and writes them as JSON with --out.
"""

import argparse
import json
import statistics
import time

import torch

from toymodels import resolve_config
from toymodels.training.population import Population
from toymodels.training.trainer import Trainer

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--steps", type=int, default=40)
parser.add_argument("--rounds", type=int, default=3)
parser.add_argument("--depths", default="12,24")
parser.add_argument("--out")
args = parser.parse_args()

config = resolve_config(
    "cpu",
    teachers=["tied"],
    loss="mse",
    depths=tuple(map(int, args.depths.split(","))),
    replicates=1,
    batch=1024,
    steps=3000,
    schedule="G",
    lr=4e-3,
    lr_depth_exponent=0.5,
    starts=("discretised",),
    test_batches=1,
    device="cpu",
)
trainers = {name: Trainer(Population(config.replace(optimizer=name), torch.device("cpu"))) for name in ("adam", "muon")}
seconds = {name: [] for name in trainers}
for _ in range(args.rounds):
    for name, trainer in trainers.items():
        trainer.step(0)  # warm
        began = time.perf_counter()
        for step in range(args.steps):
            trainer.step(step)
        seconds[name].append((time.perf_counter() - began) / args.steps)
result = {name: statistics.median(values) for name, values in seconds.items()}
result["muon_over_adam"] = result["muon"] / result["adam"]
result["torch_threads"] = torch.get_num_threads()
print(json.dumps(result, indent=1))
if args.out:
    with open(args.out, "w") as file:
        json.dump(result, file, indent=1)
