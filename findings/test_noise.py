"""Is a run's test/train ratio off 1 by more than the noise of its two estimates? On fresh samples
a student cannot fit its data, so a converged student's test loss (its final weights on the fixed
test set) and train loss (the mean of its last plateau window) estimate the same number.

    python findings/test_noise.py RUN [--chunk 64] [--out noise.csv]

RUN must be finished and have kept its students (`toymodels.analysis.diagnostics.test_set_noise`
measures it). Prints, per temperature and depth, the mean test/train, the test loss's relative
standard error and z = (test − train) / its standard error over the converged students of the fit
(their best start), and how much of z the students of one teacher share (they share its test set).
"""

import argparse

import torch

from toymodels.analysis.diagnostics import test_set_noise
from toymodels.results.storage import RunFolder

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("run")
parser.add_argument("--chunk", type=int, default=64, help="test samples per chunk [64]")
parser.add_argument("--out", help="write the tidy table (one row per student) here")
arguments = parser.parse_args()
torch.set_num_threads(1)  # beside a training run

table = test_set_noise(RunFolder.open(arguments.run), arguments.chunk)
table = table.assign(ratio=table.test_loss / table.train_loss, relative_se=table.test_se / table.test_loss)
if arguments.out:
    table.to_csv(arguments.out, index=False)
summary = table.groupby(["teacher", "temperature", "depth"], dropna=False).agg(
    ratio=("ratio", "mean"),
    relative_se=("relative_se", "mean"),
    z=("z", "mean"),
    largest_z=("z", lambda z: z.abs().max()),
    students=("z", "size"),
)
print(f"{arguments.run}: {len(table)} converged students of the fit")
print(summary.to_string(float_format=lambda x: f"{x:.3g}"))
shared = table.groupby(["teacher", "replicate", "temperature"], dropna=False).z.mean()
print(
    f"|z| > 2: {(table.z.abs() > 2).sum()} of {len(table)}; z mean {table.z.mean():+.2f}, sd {table.z.std():.2f}; "
    f"over the {len(shared)} test sets (teacher × T) mean z {shared.mean():+.2f}, "
    f"t = {shared.mean() / (shared.std() / len(shared) ** 0.5):+.1f}"
)
