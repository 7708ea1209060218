import pytest
import torch

from toymodels.baseline import SingleStudentRun
from toymodels.engine import Sweep


@pytest.mark.parametrize("loss", ["kl", "kl-fixed-head", "mse"])
def test_population_equals_students_trained_one_at_a_time(tiny_config, loss):
    """Same seeds, same training: the stacked population and the plain per-student loop with
    torch.optim.Adam end with the same test losses to float tolerance."""
    config = tiny_config.replace(loss=loss, steps=25, lr=1e-2, schedule="S", lr_depth_exponent=0.5)
    sweep = Sweep(config, torch.device("cpu"))
    for step in range(config.steps):
        sweep.train_step(step)
    population = sweep.test_losses()
    x = sweep.test_inputs
    for spec, expected in zip(sweep.specs, population):
        alone = SingleStudentRun(config, sweep.teachers, spec, torch.device("cpu"))
        untrained = alone.loss(x[spec.instance]).item()
        alone.train(config.steps)
        with torch.no_grad():
            trained = alone.loss(x[spec.instance]).item()
        assert trained < untrained
        assert trained == pytest.approx(expected.item(), rel=2e-4, abs=1e-6)
