import pytest
import torch

from toymodels.performance.baseline import SingleStudentRun
from toymodels.training.population import Population
from toymodels.training.trainer import Trainer


@pytest.mark.parametrize(
    "loss", [pytest.param("kl", marks=pytest.mark.slow), pytest.param("kl-fixed-head", marks=pytest.mark.slow), "mse"]
)
def test_population_equals_students_trained_one_at_a_time(tiny_config, loss):
    """Same seeds, same training: the stacked population and the plain per-student loop with
    torch.optim.Adam end with the same test losses to float tolerance."""
    config = tiny_config.replace(loss=loss, steps=25, lr=1e-2, schedule="S", lr_depth_exponent=0.5)
    population = Population(config, torch.device("cpu"))
    trainer = Trainer(population)
    for step in range(config.steps):
        trainer.step(step)
    x = population.test_inputs
    for spec, expected in zip(population.specs, population.test_losses()):
        alone = SingleStudentRun(population, spec)
        untrained = alone.loss(x[spec.instance]).item()
        alone.train(config.steps)
        with torch.no_grad():
            trained = alone.loss(x[spec.instance]).item()
        assert trained < untrained
        assert trained == pytest.approx(expected.item(), rel=2e-4, abs=1e-6)
