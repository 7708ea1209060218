"""Time to a certificate, before and after racing starts, in one run: the same small certified
sweep (a tied teacher, whose zero start loses to its discretised start by far; two starts; trained
to convergence on fresh samples) trained without racing and with it, alternately, `--repeats`
times each. Prints each run's wall time to the certificate and its split (labelling, student
steps, evaluations, plateau checks, racing, rebuilds, compiles, checkpoints: each job's
done.json), and checks that both give the same certified losses (within 1 %) and verdicts.
Exits 1 if they do not.

    python benchmarks/time_to_certificate.py [--repeats 1] [--compile] [--out DIR]
"""

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from toymodels import resolve_config, run_sweep
from toymodels.api import fit_run

# A budget of 4 000 steps, a tenth of the cpu experiments', so racing may start a tenth as early.
SWEEP = dict(
    teachers=["tied"],
    temperatures=[1.0],
    depths=[2, 4, 8],
    replicates=2,
    teacher_depth=16,
    steps=4000,
    batch=64,
    lr=1e-2,
    lr_depth_exponent=0.5,
    schedule="constant",
    converge=True,
    check_every=50,
    patience=3,
    decays=2,
    evals=30,
    test_batches=2,
    starts=["zero", "discretised"],
    loss="mse",
    race_from_step=300,
    device="cpu",
)

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--repeats", type=int, default=1)
parser.add_argument("--compile", action="store_true")
parser.add_argument("--out", type=Path, default=None)
arguments = parser.parse_args()
out = arguments.out or Path(tempfile.mkdtemp())

rows, fits = [], {}
for repeat in range(arguments.repeats):
    for race in (False, True):
        config = resolve_config("cpu", race=race, compile=arguments.compile, **SWEEP)
        path = out / f"{'race' if race else 'no-race'}-{repeat}"
        began = time.perf_counter()
        run_sweep(config, path, progress=False)
        wall = time.perf_counter() - began
        done = [json.loads(p.read_text()) for p in sorted(path.glob("jobs/*/done.json"))]
        split = pd.DataFrame([d.get("split", {}) for d in done]).sum()
        rows.append({"rule": "racing" if race else "no racing", "repeat": repeat, "wall s": wall, **split.to_dict()})
        fits[race] = fit_run(path)

table = pd.DataFrame(rows)
print(f"sweep: {SWEEP}, compile {arguments.compile}")
print(table.round(1).to_string(index=False))
before, after = (table[table.rule == ("racing" if race else "no racing")]["wall s"].median() for race in (False, True))
print(f"time to certificate: {before:.0f} s without racing → {after:.0f} s with it ({after / before:.2f}×)")
failed = False
for old, new in zip(fits[False], fits[True]):
    change = float(np.max(np.abs(np.array(new.losses) / np.array(old.losses) - 1)))
    same = change <= 0.01 and (old.converged, old.regime) == (new.converged, new.regime)
    failed |= not same
    print(
        f"{'PASS' if same else 'FAIL'}  {old.teacher}: α {old.alpha:.2f} → {new.alpha:.2f}, certified "
        f"{old.converged} → {new.converged}, largest certified-loss change {change:.2%}, "
        f"{len(new.stopped)} start(s) stopped behind"
    )
print(f"results: {out}")
sys.exit(1 if failed else 0)
