import pytest
import torch

from toymodels.training.optim import OPTIMIZERS, Stacked, StackedMuon, orthogonalised
from toymodels.training.population import Population
from toymodels.training.trainer import Trainer


@pytest.mark.parametrize("shape", [(5, 32, 128), (5, 128, 32), (3, 2, 16, 24)])
def test_orthogonalised_pushes_every_singular_value_of_every_matrix_toward_one(shape):
    matrices = torch.randn(shape, generator=torch.Generator().manual_seed(0)) * torch.logspace(0, -0.5, shape[-1])
    result = orthogonalised(matrices)
    singular = torch.linalg.svdvals(result)
    assert result.shape == matrices.shape
    assert singular.min() > 0.5 and singular.max() < 1.3  # the quintic's band around 1, not exactly 1
    assert torch.linalg.svdvals(matrices).max() / torch.linalg.svdvals(matrices).min() > 2.5  # it had far to go
    one_by_one = torch.stack([orthogonalised(m) for m in matrices.flatten(0, -3)]).view(shape)
    torch.testing.assert_close(result, one_by_one)


def test_stacked_muon_steps_each_matrix_as_torch_muon_does():
    """A stack of matrices with a rate per slice moves as torch.optim.Muon moves each matrix alone
    (its step in bfloat16, ours in float32: the same direction to a few parts in a thousand); the
    bias goes to Adam."""
    generator = torch.Generator().manual_seed(1)
    weights = torch.randn(3, 32, 128, generator=generator)
    bias = torch.randn(3, 1, 128, generator=generator)
    rates = torch.tensor([1e-3, 2e-3, 4e-3])
    stacked_w, stacked_b = weights.clone().requires_grad_(), bias.clone().requires_grad_()
    owners = torch.arange(3)
    muon = StackedMuon([Stacked(stacked_w, rates, owners, True), Stacked(stacked_b, rates, owners, False)])
    alone = [torch.nn.Parameter(w.clone()) for w in weights]
    references = [
        torch.optim.Muon([w], lr=rate.item(), weight_decay=0, adjust_lr_fn="match_rms_adamw")
        for w, rate in zip(alone, rates)
    ]
    for _ in range(3):
        grads = torch.randn(3, 32, 128, generator=generator)
        stacked_w.grad, stacked_b.grad = grads.clone(), torch.randn(3, 1, 128, generator=generator)
        muon.step()
        for w, grad, reference in zip(alone, grads, references):
            w.grad = grad.clone()
            reference.step()
    for moved, w, start in zip(stacked_w.detach(), alone, weights):
        ours, theirs = (moved - start).flatten(), (w.detach() - start).flatten()
        assert torch.nn.functional.cosine_similarity(ours, theirs, dim=0) > 0.995
        assert ours.norm() == pytest.approx(theirs.norm().item(), rel=0.02)
    assert not torch.equal(stacked_b.detach(), bias)


def test_a_muon_population_trains_keeps_a_frozen_student_and_carries_its_state_when_one_leaves(tiny_config):
    config = tiny_config.replace(loss="mse", optimizer="muon", steps=20, lr=1e-2, lr_depth_exponent=0.5, converge=True)
    population = Population(config, torch.device("cpu"))
    trainer = Trainer(population)
    assert isinstance(trainer.optimizer, OPTIMIZERS["muon"])
    untrained = population.test_losses()
    for step in range(config.steps):
        trainer.step(step)
    trained = population.test_losses()
    assert (trained < untrained).all()
    leaving = torch.zeros(len(population.specs), dtype=torch.bool)
    leaving[0] = True
    smaller = trainer.without(leaving)
    state, carried = trainer.optimizer.row_state(), smaller.optimizer.row_state()
    assert [len(s) for s in state] == [1, 2, 1]  # w_in, w_out: momentum; b_in: Adam's two moments
    kept = population.students.row_student != 0
    torch.testing.assert_close(carried[0][0], state[0][0][kept])
    assert smaller.optimizer.steps == trainer.optimizer.steps


def test_a_muon_trainer_resumed_from_its_state_continues_bit_for_bit(tiny_config, tmp_path):
    config = tiny_config.replace(loss="mse", optimizer="muon", steps=10, lr=1e-2, schedule="G")
    trainer = Trainer(Population(config, torch.device("cpu")))
    for step in range(5):
        trainer.step(step)
    torch.save(trainer.state(), tmp_path / "checkpoint.pt")
    went_on = [trainer.step(step) for step in range(5, 10)]
    resumed = Trainer(Population(config, torch.device("cpu")))
    resumed.load_state(torch.load(tmp_path / "checkpoint.pt", weights_only=False))
    assert all(torch.equal(a, b) for a, b in zip(went_on, [resumed.step(step) for step in range(5, 10)]))
