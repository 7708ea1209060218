"""Do a KL sweep's students reach the best loss their architecture can? An outside bound: the
trained layers of an MSE run on the same teachers (its best start of each student), read out
through the teacher's head / T (the `discretised` start's head) and not trained on the KL at all.
A KL student above that bound is not at its best, whatever its own curve and its starts say.

    python findings/kl_bound.py KL_RUN MSE_RUN [--out bound.csv]

Both runs must be finished, with the same seed, teacher depth and width (so the same teachers);
MSE_RUN must have kept its students (`reproduce regimes` does); KL_RUN may be unfinished. Prints,
per temperature and depth, the KL run's loss (its best start so far; "*" where that student has
not converged yet) and the bound (geometric means over replicates), their ratio, and the log–log
α of each over the depths both have.
"""

import argparse
import dataclasses

import numpy as np
import pandas as pd
import torch

from toymodels.analysis.diagnostics import load_trained
from toymodels.models.students import StudentSpec
from toymodels.results.exponents import alpha_interval
from toymodels.results.storage import RunFolder
from toymodels.training.population import Population
from toymodels.training.protocol import Protocol
from toymodels.workflows.fits import run_protocol

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("kl_run")
parser.add_argument("mse_run")
parser.add_argument("--out", help="write the tidy table (one row per teacher, T, replicate, depth) here")
arguments = parser.parse_args()
torch.set_num_threads(1)  # beside a training run

kl_folder = RunFolder.open(arguments.kl_run)
kl_config = run_protocol(kl_folder).config  # read out by the discretised start's head, whatever the run's starts
kl = Protocol.of(dataclasses.replace(kl_config, device="cpu", compile=False, starts=("discretised",), start_from=None))
mse = load_trained(RunFolder.open(arguments.mse_run))
same = ("seed", "teacher_depth", "width")
if any(getattr(kl.config, key) != getattr(mse.config, key) for key in same):
    raise SystemExit(f"the runs differ in {', '.join(same)}: not the same teachers")

mse_student = {(mse.config.teacher_instances[s.instance], s.depth): s for s in mse.specs}
specs = [
    StudentSpec(i, t, depth, "discretised")
    for i, teacher in enumerate(kl.config.teacher_instances)
    for t in range(len(kl.temperatures))
    for depth in kl.config.depths
    if (teacher, depth) in mse_student
]
bound = Population(kl, torch.device("cpu"), specs=specs)
with torch.no_grad():  # each KL student's layers := its MSE twin's; the head stays the teacher's / T
    rows = {key: row for row, key in enumerate(mse.students.row_keys)}
    for row, (spec, stage) in enumerate(bound.students.row_keys):
        twin = mse_student[(kl.config.teacher_instances[spec.instance], spec.depth)]
        for name in ("w_in", "b_in", "w_out"):
            getattr(bound.students, name)[row] = getattr(mse.students, name)[rows[(twin, stage)]]
    losses = bound.test_losses()

table = pd.DataFrame(
    [
        dict(
            teacher=kl.config.teacher_instances[s.instance][0],
            replicate=kl.config.teacher_instances[s.instance][1],
            temperature=kl.temperatures[s.temperature_index],
            depth=s.depth,
            bound=float(loss),
        )
        for s, loss in zip(bound.specs, losses)
    ]
)
metrics = kl_folder.metrics()  # a finished run's, or an unfinished one's so far
student = ["teacher", "temperature", "replicate", "depth"]
last = metrics[metrics.step == metrics.groupby([*student, "start"]).step.transform("max")]
best = last.loc[last.groupby(student).test_loss.idxmin()]  # the best start of each student, now
table = table.merge(best[[*student, "test_loss", "step", "converged_at_step"]], on=student).rename(
    columns={"test_loss": "kl_trained"}
)
if arguments.out:
    table.to_csv(arguments.out, index=False)
for (teacher, temperature), group in table.groupby(["teacher", "temperature"]):
    means = group.groupby("depth")[["kl_trained", "bound"]].agg(lambda x: np.exp(np.log(x).mean()))
    flattened = group.groupby("depth").converged_at_step.apply(lambda steps: steps.notna().all())
    depths = means.index.to_numpy()
    alphas = {
        column: alpha_interval(
            depths, np.log(group.pivot(index="replicate", columns="depth", values=column)[depths].to_numpy())
        )
        for column in ("kl_trained", "bound")
    }
    print(
        f"{teacher} T={temperature:.3g}: "
        + "; ".join(
            f"ℓ={d} {row.kl_trained:.3g}{'' if flattened[d] else '*'} vs bound {row.bound:.3g} "
            f"(×{row.kl_trained / row.bound:.2f})"
            for d, row in means.iterrows()
        )
    )
    print("    α trained " + ", bound ".join(f"{a.alpha:.2f} [{a.low:.2f}, {a.high:.2f}]" for a in alphas.values()))
