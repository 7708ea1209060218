import math

import pytest
import torch
import torch.nn.functional as F

from toymodels.config import SweepConfig
from toymodels.errors import ToymodelsError
from toymodels.models.blocks import rmsnorm
from toymodels.models.losses import kl_per_model, kl_targets
from toymodels.models.students import Students, StudentSpec
from toymodels.training.engine import train
from toymodels.training.optim import SCHEDULES
from toymodels.training.population import Population
from toymodels.training.protocol import Protocol


def test_population_is_sorted_deepest_first_and_layer_rows_match():
    specs = [StudentSpec(0, 0, d) for d in (2, 5, 3)]
    students = Students(Protocol.of(SweepConfig().replace(student="rk2", width=8, loss="mse")), specs)
    assert [s.depth for s in students.specs] == [5, 3, 2]
    assert students.active == [3, 3, 2, 1, 1]
    assert students.w_in.shape == (2 * (3 + 3 + 2 + 1 + 1), 8, 32)
    assert students.forward(torch.randn(3, 4, 8)).shape == (3, 4, 8)


@pytest.mark.parametrize("block", ["euler", "rk2"])
def test_fresh_student_is_the_identity_map(block):
    students = Students(
        Protocol.of(SweepConfig().replace(student=block, width=8, loss="kl", vocab=16)),
        [StudentSpec(0, 0, d) for d in (1, 4, 6)],
    )
    h0 = rmsnorm(torch.randn(3, 10, 8))
    assert torch.equal(students(h0), h0)
    assert torch.count_nonzero(students.head) == 0


def test_students_in_a_population_do_not_interact():
    """A student's output depends only on its own weights: perturb one, the others stay put."""
    students = Students(
        Protocol.of(SweepConfig().replace(student="euler", width=8, loss="mse")),
        [StudentSpec(0, 0, d) for d in (3, 2, 1)],
    )
    with torch.no_grad():
        students.w_out.normal_()
        h0 = torch.randn(3, 5, 8)
        before = students(h0)
        rows_of_deepest = [sum(students.rows_per_layer[:layer]) for layer in range(3)]
        students.w_in[rows_of_deepest] += 1.0
        after = students(h0)
    assert not torch.allclose(before[0], after[0])
    assert torch.equal(before[1:], after[1:])


def test_schedule_S():
    def multiplier(name, step, total):
        return SCHEDULES.lookup(name)(torch.tensor(step, dtype=torch.float64), total).item()

    assert multiplier("S", 0, 1000) == 1.0
    assert multiplier("S", 799, 1000) == 1.0
    assert multiplier("S", 800, 1000) == pytest.approx(1.0)
    assert multiplier("S", 900, 1000) == pytest.approx(0.55)
    assert multiplier("S", 1000, 1000) == pytest.approx(0.1)
    assert multiplier("constant", 1000, 1000) == 1.0


def test_kl_equals_cross_entropy_minus_teacher_entropy():
    generator = torch.Generator().manual_seed(0)
    student_logits = torch.randn(3, 50, 16, generator=generator)
    teacher_log_p = torch.log_softmax(torch.randn(3, 50, 16, generator=generator) / 0.3, -1)
    p = teacher_log_p.exp()
    cross_entropy = -(p * torch.log_softmax(student_logits, -1)).sum(-1).mean(-1)
    entropy = -(p * teacher_log_p).sum(-1).mean(-1)
    kl = kl_per_model(student_logits, kl_targets(teacher_log_p))
    assert torch.allclose(kl, cross_entropy - entropy, atol=1e-6)
    reference = F.kl_div(
        torch.log_softmax(student_logits[0], -1), teacher_log_p[0], reduction="batchmean", log_target=True
    )
    assert kl[0] == pytest.approx(reference.item(), rel=1e-6)


def test_zero_head_student_starts_at_log_vocab_minus_teacher_entropy(tiny_config):
    population = Population(tiny_config, torch.device("cpu"))
    losses = population.test_losses()
    readout = population.teachers.forward(population.test_inputs)
    for spec, loss in zip(population.specs, losses):
        temperature = tiny_config.temperatures[spec.temperature_index]
        log_p = torch.log_softmax(readout[spec.instance] @ population.teachers.head[spec.instance] / temperature, -1)
        entropy = -(log_p.exp() * log_p).sum(-1).mean()
        assert loss == pytest.approx(math.log(tiny_config.vocab) - entropy.item(), rel=1e-4)


def test_test_set_chunks_are_the_test_loss_split_into_equal_parts(tiny_config):
    population = Population(tiny_config, torch.device("cpu"))
    per_sample = population.test_chunk_losses(1)  # one sample each: the losses the standard error is of
    assert per_sample.shape == (2 * 64, len(population.specs))
    assert torch.allclose(per_sample.mean(0), population.test_losses(), rtol=1e-5)
    assert torch.allclose(population.test_chunk_losses(16).mean(0), population.test_losses(), rtol=1e-5)
    assert per_sample.std(0).min() > 0  # the samples differ: a spread to measure
    with pytest.raises(ToymodelsError, match="does not divide a test batch of 64"):
        population.test_chunk_losses(48)


@pytest.mark.parametrize("loss", ["kl", "kl-fixed-head", "mse"])
def test_training_lowers_every_students_loss(tiny_config, loss):
    history = train(tiny_config.replace(loss=loss, steps=60, lr=1e-2)).history
    first, last = (history[history.step == step].test_loss.to_numpy() for step in (1, 60))
    assert (last < first).all()


def test_same_seed_same_numbers_and_other_seed_other_numbers(tiny_config):
    def final(config):
        history = train(config).history
        return history[history.step == config.steps].test_loss.to_numpy()

    assert (final(tiny_config) == final(tiny_config)).all()
    assert not (final(tiny_config) == final(tiny_config.replace(seed=1))).any()


def test_hidden_states_end_at_the_forward_output_and_layer_removal_is_the_identity():
    students = Students(
        Protocol.of(SweepConfig().replace(student="rk2", width=8, loss="mse")),
        [StudentSpec(0, 0, d) for d in (1, 3, 2)],
    )
    with torch.no_grad():
        students.w_out.normal_(std=0.1)
    h0 = rmsnorm(torch.randn(3, 5, 8))
    states = students.hidden_states(h0)
    assert [s.shape[0] for s in states] == [4, 3, 2]  # population order: depths 3, 2, 1
    assert all(torch.allclose(s[-1], out) for s, out in zip(states, students(h0)))
    with students.without_layers({0: [1], 1: [0, 1]}):
        removed = students.hidden_states(h0)
    assert torch.equal(removed[0][2], removed[0][1]) and not torch.equal(removed[0][3], removed[0][2])
    assert torch.equal(removed[1][-1], h0[1])
    assert torch.equal(removed[2][-1], states[2][-1])  # a student not named is untouched
    assert torch.equal(students.hidden_states(h0)[0], states[0])  # and everything is restored


@pytest.mark.slow
def test_bf16_precision_trains_close_to_fp32_but_not_the_same(tiny_config):
    """bf16 autocast must reach the matmuls (the numbers change) and still train the same students."""

    def final(config):
        history = train(config).history
        return history[history.step == config.steps].test_loss.to_numpy()

    config = tiny_config.replace(steps=60, lr=1e-2)
    exact, rounded = final(config), final(config.replace(precision="bf16"))
    assert not (exact == rounded).all()
    assert rounded == pytest.approx(exact, rel=0.1)
    assert (final(config.replace(precision="tf32")) == exact).all()  # TensorFloat-32 is a GPU format: no-op here


@pytest.mark.slow
def test_a_compiled_population_labels_as_the_teachers_do_and_a_rebuild_keeps_its_labeller(tiny_config):
    """With --compile the teachers' layers are compiled too (they label every step's samples):
    the same read-outs to float precision, compiled once for the populations that share the teachers."""
    protocol = Protocol.of(tiny_config.replace(compile=True, teacher_depth=2))  # a short compile
    population = Population(protocol, torch.device("cpu"))
    assert population.teacher_readouts != population.teachers.forward
    x = torch.randn(len(population.instances), 512, tiny_config.width)
    torch.testing.assert_close(population.teacher_readouts(x), population.teachers.forward(x), rtol=1e-5, atol=1e-6)
    rebuilt = Population(
        protocol, population.device, specs=population.specs[1:], reuse=population, weights_from=population.students
    )
    assert rebuilt.teacher_readouts is population.teacher_readouts
    eager = Population(protocol.replace(compile=False), population.device)
    assert eager.teacher_readouts == eager.teachers.forward


@pytest.mark.slow
def test_a_population_rebuilt_past_dynamos_cache_limit_stays_compiled(tiny_config, monkeypatch, request):
    """Every rebuild compiles the smaller population's step anew: twelve students leaving one by one
    make more compiles than dynamo keeps per function by default (8), past which it would run the
    step eager, silently. Traced with a backend that counts its runs, not inductor: a fast check."""
    compiled_runs = []

    def counting_backend(graph, example_inputs):
        def run(*args):
            compiled_runs.append(graph)
            return graph.forward(*args)

        return run

    real_compile = torch.compile
    monkeypatch.setattr(torch, "compile", lambda function: real_compile(function, backend=counting_backend))
    torch._dynamo.reset()
    request.addfinalizer(torch._dynamo.reset)
    population = Population(Protocol.of(tiny_config.replace(compile=True, teacher_depth=2)), torch.device("cpu"))
    x = torch.randn(len(population.instances), 16, tiny_config.width)
    targets = population.teacher_targets(x)
    while True:
        before = len(compiled_runs)
        population.losses(x, targets)
        assert len(compiled_runs) > before, f"{len(population.specs)} students ran eager"
        if len(population.specs) == 1:
            break
        population = Population(
            population.protocol,
            population.device,
            specs=population.specs[1:],
            reuse=population,
            weights_from=population.students,
        )
