import math

import pytest
import torch
import torch.nn.functional as F

from toymodels.config import SweepConfig
from toymodels.models.blocks import rmsnorm
from toymodels.models.teachers import Teachers
from toymodels.training.population import Population
from toymodels.training.protocol import Protocol
from toymodels.training.trainer import Trainer


def angle(a, b):
    return torch.arccos(F.cosine_similarity(a, b, dim=-1).clamp(-1, 1))


@pytest.fixture(scope="module")
def paper_teachers():
    """Both teachers of the paper (depth 128, width 32), two replicates each, on 2048 inputs."""
    teachers = Teachers(
        Protocol.of(
            SweepConfig().replace(
                teachers=["independent", "tied"], replicates=2, teacher_depth=128, width=32, vocab=128
            )
        )
    )
    x = torch.randn(4, 2048, 32, generator=torch.Generator().manual_seed(1))
    return teachers, torch.stack(teachers.hidden_states(x), 1)  # (instance, layer, batch, width)


def test_shapes():
    teachers = Teachers(
        Protocol.of(SweepConfig().replace(teachers=["independent"], replicates=3, teacher_depth=5, width=8, vocab=16))
    )
    assert teachers.w_in.shape == (5, 3, 8, 32) and teachers.w_out.shape == (5, 3, 32, 8)
    assert teachers.head.shape == (3, 8, 16)
    x = torch.randn(3, 7, 8)
    assert len(teachers.hidden_states(x)) == 6
    assert teachers.forward(x).shape == (3, 7, 8)


def test_tied_layers_are_equal_and_independent_ones_are_not(paper_teachers):
    teachers, _ = paper_teachers
    independent, tied = teachers.w_in[:, 0], teachers.w_in[:, 2]
    assert torch.equal(tied[0], tied[1]) and torch.equal(tied[0], tied[-1])
    assert not torch.allclose(independent[0], independent[1])


def test_output_projections_scaled_by_inverse_sqrt_depth(paper_teachers):
    teachers, _ = paper_teachers
    bound = 1 / math.sqrt(4 * 32) / math.sqrt(128)
    assert teachers.w_out.abs().max() <= bound
    assert teachers.w_out.abs().max() > 0.95 * bound


@pytest.mark.parametrize(
    "instance, expected, tolerance",
    [(0, math.pi / 2, 0.02), (1, math.pi / 2, 0.02), (2, 0.011, 0.003), (3, 0.011, 0.003)],
)
def test_successive_update_angle_matches_spec(paper_teachers, instance, expected, tolerance):
    _, h = paper_teachers
    updates = h[instance, 1:] - h[instance, :-1]
    assert angle(updates[1:], updates[:-1]).mean() == pytest.approx(expected, abs=tolerance)


@pytest.mark.parametrize("instance, low, high", [(0, 0.045, 0.06), (1, 0.045, 0.06), (2, 1.1, 1.35), (3, 1.1, 1.35)])
def test_identity_student_mse_matches_spec(paper_teachers, instance, low, high):
    _, h = paper_teachers
    mse = F.mse_loss(rmsnorm(h[instance, 0]), rmsnorm(h[instance, -1]))
    assert low < mse < high


def test_teacher_entropy_matches_spec(paper_teachers):
    teachers, h = paper_teachers
    readout = rmsnorm(h[:, -1])
    for temperature, expected in ((1.0, 4.69), (0.117, 1.27)):
        log_p = torch.log_softmax(torch.bmm(readout, teachers.head) / temperature, -1)
        entropy = -(log_p.exp() * log_p).sum(-1).mean()
        assert entropy == pytest.approx(expected, rel=0.04)


def test_unknown_teacher_is_a_clear_error():
    from toymodels import ToymodelsError

    with pytest.raises(ToymodelsError, match="unknown teacher 'nope'"):
        Teachers(
            Protocol.of(SweepConfig().replace(teachers=["nope"], replicates=1, teacher_depth=4, width=8, vocab=16))
        )


def test_a_grid_split_by_replicate_trains_the_same_teachers_on_the_same_samples():
    """paper_depths on the final protocol runs one teacher per part (`first_replicate`): a part's
    teacher, test set, training stream and its students' first weights are the whole grid's."""
    whole = Protocol.of(
        SweepConfig(
            teachers=("tied",),
            loss="mse",
            depths=(2,),
            replicates=3,
            teacher_depth=4,
            width=8,
            batch=16,
            test_batches=1,
            test_batch_size=32,
        )
    )
    part = whole.replace(replicates=1, first_replicate=2)
    assert part.config.teacher_instances == [("tied", 2)]
    grid, alone = Population(whole, torch.device("cpu")), Population(part, torch.device("cpu"))
    assert torch.equal(grid.teachers.w_in[:, 2], alone.teachers.w_in[:, 0])
    assert torch.equal(grid.test_inputs[2], alone.test_inputs[0])
    assert torch.equal(Trainer(grid).data_streams[2].get_state(), Trainer(alone).data_streams[0].get_state())
    assert torch.equal(grid.students.w_in[grid.students.row_student == 2], alone.students.w_in)  # the zero start's
