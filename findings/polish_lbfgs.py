"""Is the optimiser what holds a converged sweep's exponent? Polish the trained students of one
teacher with L-BFGS on a fixed sample of fresh teacher data, and compare their test losses (the
run's own test set) and α before and after.

    python findings/polish_lbfgs.py RUN_DIR [--teacher tied] [--replicate 0] [--samples 32768]
                                      [--iterations 100] [--min-depth 4]

The run must have kept its students (students.pt). L-BFGS minimises the sum over students of
log L (each student's gradient divided by its own loss, so shallow and deep students weigh
alike); the students do not interact, so this is each student's own polish.
"""

import argparse
import time

import numpy as np
import torch

from toymodels.analysis.diagnostics import load_trained
from toymodels.models.streams import seeded_generator
from toymodels.results.exponents import alpha_interval
from toymodels.results.storage import RunFolder
from toymodels.training.population import Population, draw_inputs

POLISH_STREAM = 1_000_003  # a stream no training or test draw uses

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("run_dir")
parser.add_argument("--teacher", default="tied")
parser.add_argument("--replicate", type=int, default=None, help="one teacher replicate (default: every one)")
parser.add_argument("--samples", type=int, default=32768)
parser.add_argument("--iterations", type=int, default=100)
parser.add_argument("--min-depth", type=int, default=4)
arguments = parser.parse_args()

trained = load_trained(RunFolder(arguments.run_dir))
config = trained.config
specs = [
    s
    for s in trained.specs
    if config.teacher_instances[s.instance][0] == arguments.teacher
    and arguments.replicate in (None, config.teacher_instances[s.instance][1])
]
population = Population(config, torch.device("cpu"), specs=specs)
population.students.load_students(trained.students)
generators = [seeded_generator(config.seed, POLISH_STREAM, r) for _, r in population.teachers.instances]
inputs = draw_inputs(generators, arguments.samples, config.width, "cpu")
with torch.no_grad():
    targets = population.teacher_targets(inputs)


def report(label):
    test = population.test_losses()
    with torch.no_grad():
        sample = population.losses(inputs, targets)
    depths = sorted({s.depth for s in population.specs if s.depth >= arguments.min_depth})
    replicates = sorted({config.teacher_instances[s.instance][1] for s in population.specs})
    index = {(config.teacher_instances[s.instance][1], s.depth): k for k, s in enumerate(population.specs)}
    log_losses = np.log([[test[index[r, d]].item() for d in depths] for r in replicates])
    estimate = alpha_interval(depths, log_losses)
    print(
        f"{label}: α = {float(estimate.alpha):.2f} [{float(estimate.low):.2f}, {float(estimate.high):.2f}] "
        f"over ℓ = {depths}"
    )
    for depth in sorted({s.depth for s in population.specs}):
        rows = [k for k, s in enumerate(population.specs) if s.depth == depth]
        print(
            f"  ℓ={depth:<3} test {test[rows].log().mean().exp():.4e}  "
            f"fixed sample {sample[rows].log().mean().exp():.4e} (geometric means over replicates)"
        )
    return test


before = report(f"{arguments.teacher} teacher as trained")
parameters = list(population.students.parameters())
optimizer = torch.optim.LBFGS(
    parameters,
    lr=1,
    max_iter=arguments.iterations,
    history_size=20,
    line_search_fn="strong_wolfe",
    tolerance_grad=0,
    tolerance_change=0,
)


def objective():
    optimizer.zero_grad()
    loss = population.losses(inputs, targets).log().sum()
    loss.backward()
    return loss


start = time.perf_counter()
optimizer.step(objective)
print(
    f"L-BFGS: {optimizer.state[parameters[0]]['n_iter']} iterations on {arguments.samples} samples per teacher, "
    f"{time.perf_counter() - start:.0f} s"
)
after = report("after L-BFGS")
print("per student (the run's test set): replicate, depth, as trained (certified), after L-BFGS, after / before")
for k, spec in enumerate(population.specs):
    print(
        f"  {config.teacher_instances[spec.instance][1]}  ℓ={spec.depth:<3} {before[k]:.4e}  {after[k]:.4e}  "
        f"{after[k] / before[k]:.3f}"
    )
print(f"test loss after / before, per student: {(after / before).min():.3f} – {(after / before).max():.3f}")
