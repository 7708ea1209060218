"""Replay the racing rule on every committed certified run's curves (figures/*/cpu): what a racing
run would have recorded, since stopping one start changes no other student's numbers. Prints, per
run: starts stopped behind, the student layer-steps saved, the step the last student ends at
(which sets the teachers' labelling and the wall time) before and after, the largest change of a
certified (fitted) loss and of a fitted α. Exits 1 if any certified loss moves by more than 1 % or
any α by more than 0.02, the bounds issue 31 sets.

    python findings/race_replay.py [--margin 0.5] [--from-step 1000] [RUN_FOLDER ...]
"""

import argparse
import sys
from pathlib import Path

import numpy as np

from toymodels.api import Experiment, fit_metrics
from toymodels.results.certification import completed
from toymodels.results.storage import RunFolder
from toymodels.training.racing import RaceRule, replay

LOSS_BOUND, ALPHA_BOUND = 0.01, 0.02

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("runs", nargs="*", type=Path, default=sorted(Path("figures").glob("*/cpu")))
parser.add_argument("--margin", type=float, default=RaceRule.margin)
parser.add_argument("--from-step", type=int, default=RaceRule.from_step)
arguments = parser.parse_args()


def layer_steps(metrics) -> float:
    """Student layer-steps: each student's depth times the step of its last row."""
    last = metrics.groupby(["teacher", "temperature", "replicate", "depth", "start"], dropna=False).step.max()
    return float((last * last.index.get_level_values("depth")).sum())


def fitted(metrics, protocol, min_depth):
    fits = fit_metrics(completed(metrics, protocol.config.steps), protocol, min_depth)
    return {(f.teacher, repr(f.temperature)): f for f in fits}


failed = False
print(
    f"rule: stop a start > {arguments.margin:.0%} above its student's leader, projected to stay so at the "
    f"budget, at 2 evaluations in a row from step {arguments.from_step}"
)
print(f"{'run':18} {'stopped':>9} {'work saved':>10} {'last step':>15} {'max Δloss':>9} {'max Δα':>7}")
for path in arguments.runs:
    folder = RunFolder.open(path)
    protocol, metrics = folder.protocol(), folder.metrics()
    config = protocol.config
    if not config.converge or len(config.starts) < 2:
        continue
    rule = RaceRule(config.steps, arguments.margin, arguments.from_step)
    raced = replay(metrics, rule)
    min_depth = Experiment.load(path.parent.name).fit_min_depth
    before, after = fitted(metrics, protocol, min_depth), fitted(raced.metrics, protocol, min_depth)
    loss_change = max(np.max(np.abs(np.array(after[k].losses) / np.array(f.losses) - 1)) for k, f in before.items())
    alpha_change = max(abs(after[k].alpha - f.alpha) for k, f in before.items())
    uncertified = sum(not f.converged for f in after.values()) - sum(not f.converged for f in before.values())
    saved = 1 - layer_steps(raced.metrics) / layer_steps(metrics)
    students = metrics.groupby(["teacher", "temperature", "replicate", "depth", "start"], dropna=False).ngroups
    failed |= loss_change > LOSS_BOUND or alpha_change > ALPHA_BOUND or uncertified > 0
    print(
        f"{path.parent.name:18} {len(raced.stopped):>4}/{students:<4} {saved:>10.0%} "
        f"{metrics.step.max():>7} → {raced.metrics.step.max():<6} {loss_change:>9.2%} {alpha_change:>7.3f}"
        + (f"  {uncertified} group(s) lose their certificate" if uncertified > 0 else "")
    )
sys.exit(1 if failed else 0)
