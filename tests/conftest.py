import pytest
import torch

from toymodels import resolve_config


@pytest.fixture
def tiny_config():
    """A sweep small enough for a unit test: two teachers' worth of students in a second or two."""
    return resolve_config(
        "quick",
        teachers=["tied"],
        temperatures=[0.5, 1.0],
        depths=[1, 2, 3],
        replicates=2,
        teacher_depth=8,
        steps=30,
        batch=32,
        test_batches=2,
        test_batch_size=64,
        evals=5,
        device="cpu",
    )


@pytest.fixture(autouse=True)
def _single_thread():
    torch.set_num_threads(1)  # exact reproducibility checks; CI has two cores anyway


@pytest.fixture
def registries():
    """Every registry as it was before the test: what a plug-in file registers is undone after it."""
    from toymodels.models.losses import LOSSES
    from toymodels.models.starts import STARTS
    from toymodels.models.students import STUDENTS
    from toymodels.models.teachers import TEACHERS
    from toymodels.training.optim import OPTIMIZERS, SCHEDULES

    kinds = [TEACHERS, STUDENTS, LOSSES, STARTS, SCHEDULES, OPTIMIZERS]
    saved = [dict(registry) for registry in kinds]
    yield
    for registry, before in zip(kinds, saved):
        registry.clear()
        registry.update(before)
