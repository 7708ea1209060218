"""A lever's test loss against compute beside the plain ladder's, from two committed budget ladders
of the same teacher and start (issue 74: Muon against Adam on the first tied teacher).

    python findings/lever_table.py [--plain ladder_tied_r0_x16] [--lever ladder_tied_muon_r0] [--depths 12,24]

Compute is the samples a student's steps push through forward and backward (steps × batch; a Muon
step costs about an Adam step here: benchmarks/optimizer_step.py). For each rung of the lever, the
plain ladder's budget that reaches the same loss, interpolated in log–log between its rungs
(extrapolated past its last with its last two rungs' slope, marked so): how many times the lever's
compute the plain optimiser needs.
"""

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

RESULTS = Path(__file__).resolve().parent.parent / "figures"

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--plain", default="ladder_tied_r0_x16")
parser.add_argument("--lever", default="ladder_tied_muon_r0")
parser.add_argument("--depths", default="12,24")
args = parser.parse_args()


def rungs(name: str, depth: int) -> pd.DataFrame:
    """Per rung of the run's ladder at `depth`: its steps and test loss."""
    ladder = pd.read_csv(RESULTS / name / "cpu" / "ladder" / "ladder.csv")
    batch = pd.read_json(RESULTS / name / "cpu" / "config.json", typ="series")["batch"]
    row = ladder[ladder.depth == depth].iloc[0]
    labels = sorted((int(c.removeprefix("loss_x")) for c in ladder if c.startswith("loss_x")))
    table = pd.DataFrame(
        {"rung": labels, "steps": [row[f"steps_x{k}"] for k in labels], "loss": [row[f"loss_x{k}"] for k in labels]}
    ).dropna()
    return table.assign(samples=table.steps * batch)


def plain_samples_for(plain: pd.DataFrame, loss: float) -> tuple[float, bool]:
    """The samples the plain ladder needs for `loss` (log–log between its rungs), and whether that
    lies past its last rung (extrapolated with its last slope)."""
    x, y = np.log(plain.samples.to_numpy()), np.log(plain.loss.to_numpy())
    if loss >= plain.loss.iloc[0]:
        return float(
            plain.samples.iloc[0] * (loss / plain.loss.iloc[0]) ** (1 / ((y[1] - y[0]) / (x[1] - x[0])))
        ), False
    beyond = loss < plain.loss.iloc[-1]
    k = len(x) - 2 if beyond else int(np.flatnonzero(plain.loss.to_numpy() > loss)[-1])
    slope = (y[k + 1] - y[k]) / (x[k + 1] - x[k])
    return float(np.exp(x[k] + (np.log(loss) - y[k]) / slope)), bool(beyond)


for depth in map(int, args.depths.split(",")):
    plain, lever = rungs(args.plain, depth), rungs(args.lever, depth)
    print(f"ℓ {depth}: test loss against samples (millions), {args.plain} beside {args.lever}")
    print(f"  {'rung':>5} {'samples':>8} {'plain':>10} {'lever':>10}  plain's samples for the lever's loss")
    for k in sorted(set(plain.rung) | set(lever.rung)):
        mine, theirs = plain[plain.rung == k], lever[lever.rung == k]
        samples = (mine if len(mine) else theirs).samples.iloc[0]
        cells = [f"{t.loss.iloc[0]:.3e}" if len(t) else "—" for t in (mine, theirs)]
        worth = ""
        if len(theirs):
            needed, beyond = plain_samples_for(plain, theirs.loss.iloc[0])
            worth = f"{needed / 1e6:.1f} M = {needed / samples:.1f}× its own{' (past the last rung)' if beyond else ''}"
        print(f"  {'×' + str(k):>5} {samples / 1e6:>8.1f} {cells[0]:>10} {cells[1]:>10}  {worth}")
