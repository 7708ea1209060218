"""Training to convergence: the plateau test on synthetic curves, converged students leaving the
population without changing anyone else's numbers, resume after compaction, the step budget."""

import io
import math

import pandas as pd
import pytest
import torch

from toymodels import resolve_config
from toymodels.api import fit_run, run_sweep
from toymodels.errors import ToymodelsError
from toymodels.models.students import Students
from toymodels.results.storage import read_metrics
from toymodels.training.engine import train
from toymodels.training.population import Population
from toymodels.training.recording import evaluation_steps
from toymodels.training.trainer import PlateauTest, Rebuilds, Trainer

KEYS = ["teacher", "replicate", "temperature", "depth", "step"]


def converging(**changes):
    """A tiny sweep trained to convergence on the CPU, at a constant rate: its depth-1 students,
    held still (rate 1e-9), plateau at once and leave the population while the others train on."""
    settings = dict(
        teachers=["tied"],
        loss="mse",
        depths=[1, 2, 3],
        replicates=2,
        teacher_depth=8,
        steps=300,
        batch=32,
        test_batches=1,
        test_batch_size=64,
        evals=6,
        device="cpu",
        converge=True,
        check_every=20,
        patience=2,
        decays=1,
        schedule="constant",
        depth_lr=[(1, 1e-9)],
    )
    return resolve_config("quick", **(settings | changes))


def plateau_run(curve, checks=60, decays_spent=0, **settings):
    """Feed `curve(check, lr_scale)` (one student's windowed loss, its start having spent
    `decays_spent` decays) to a PlateauTest; returns the check at which it converged (None if it
    did not) and the checks at which its rate decayed."""
    config = resolve_config(
        "quick", converge=True, check_every=10, patience=3, decays=2, lr_decay=0.25, plateau_tolerance=0.01, **settings
    )
    test = PlateauTest(config, torch.tensor([decays_spent]))
    decayed = []
    for check in range(checks):
        scale = test.lr_scale.item()
        test.add(torch.tensor([curve(check, scale)]))
        if test.check(check, torch.tensor([True])).item():
            return check, decayed
        if test.lr_scale.item() < scale:
            decayed.append(check)
    return None, decayed


def test_a_plateau_decays_the_rate_then_converges():
    converged, decayed = plateau_run(lambda check, scale: 1.0)
    assert decayed == [3, 6] and converged == 9  # patience 3 at each of the three rates


def test_a_start_that_spent_its_decays_converges_at_its_first_plateau():
    assert plateau_run(lambda check, scale: 1.0, decays_spent=2) == (3, [])
    assert plateau_run(lambda check, scale: 1.0, decays_spent=1) == (6, [3])


def test_a_curve_still_falling_never_converges():
    converged, decayed = plateau_run(lambda check, scale: 0.95**check)
    assert converged is None and decayed == []


def test_a_curve_that_falls_only_when_the_rate_decays_converges_only_after_the_last_decay():
    """The loss sits on a noise floor ∝ √rate: each decay buys a drop (annealing, not progress at a
    constant rate); converged only once a plateau follows the last decay."""
    converged, decayed = plateau_run(lambda check, scale: 0.1 * math.sqrt(scale))
    assert decayed == [3, 7] and converged == 11


@pytest.mark.slow
def test_a_student_that_stops_improving_leaves_without_changing_the_others_numbers():
    tiny = dict(teachers=["tied", "independent"], check_every=25)
    leaving = train(converging(**tiny)).history
    alone = train(converging(depths=[2, 3], depth_lr=[], **tiny)).history
    early = leaving[leaving.depth == 1]
    assert (early.groupby(["teacher", "replicate"]).step.max() < 200).all()  # left after (1 + 1)·2 checks
    assert early.converged_at_step.notna().any()
    others = leaving[leaving.depth > 1].sort_values(KEYS, ignore_index=True)
    pd.testing.assert_frame_equal(others, alone.sort_values(KEYS, ignore_index=True))


def test_students_who_stay_keep_their_weights_and_run_no_start_again(monkeypatch):
    started = []
    original = Students._started
    monkeypatch.setattr(
        Students,
        "_started",
        lambda self, protocol, spec, head_width: started.append(spec) or original(self, protocol, spec, head_width),
    )
    config = converging(
        loss="kl",
        temperatures=[0.1, 1.0],
        depths=[1, 2],
        replicates=1,
        steps=120,
        batch=16,
        test_batch_size=32,
        evals=3,
        patience=1,
        decays=0,
        starts=("zero", "discretised"),
    )
    history = train(config).history
    assert history[history.depth == 1].converged_at_step.max() < 120  # depth 1 left: the others were rebuilt
    # each student started once, and each discretised student once more as the untrained reference
    assert len(started) == len(set(started)) + sum(spec.start == "discretised" for spec in set(started)) == 12


def test_a_student_still_improving_at_the_budget_is_capped_not_converged():
    history = train(converging(depths=[2], depth_lr=[], replicates=1, steps=100, evals=4, patience=10)).history
    assert history.step.max() == 100 and history.converged_at_step.isna().all()


@pytest.mark.slow
def test_a_sweep_capped_at_a_budget_ends_where_the_longer_run_was_at_that_step(tmp_path):
    """What the budget figure reads off one run: at a constant rate, with the plateau test
    looking only back, a run capped at B steps is the longer run's state at step B — and so a long
    run stopped early is read (`fit --budget B`) as the run with budget B."""
    settings = dict(check_every=10, teacher_pool=256)  # depth-1 students leave at step 40
    longer_run = run_sweep(converging(steps=300, **settings), tmp_path / "longer", progress=False)
    longer = longer_run.metrics()
    budget = 96  # an evaluation step of the longer run
    assert budget in set(longer.step)
    capped_run = run_sweep(converging(steps=budget, **settings), tmp_path / "capped", progress=False)
    capped = capped_run.metrics()
    students = ["teacher", "replicate", "temperature", "depth"]
    at_budget = longer[longer.step <= budget].groupby(students).tail(1).set_index(students).sort_index()
    ended = capped.groupby(students).tail(1).set_index(students).sort_index()
    assert longer.converged_at_step.notna().any()  # some students left before the budget, as in a real sweep
    pd.testing.assert_series_equal(ended.test_loss, at_budget.test_loss)

    (read,), (run,) = fit_run(longer_run.path, budget=budget), fit_run(capped_run.path)
    for key in ("steps", "depths", "losses", "alpha", "alpha_low", "alpha_high", "certified", "uncertified_depths"):
        assert getattr(read, key) == pytest.approx(getattr(run, key)), key
    assert read.alpha != fit_run(longer_run.path)[0].alpha  # at its own end the run reads otherwise
    with pytest.raises(ToymodelsError, match="budget 97 is not an evaluation step .*; the nearest: 96, "):
        fit_run(longer_run.path, budget=97)


def test_a_student_that_converges_at_an_evaluation_step_has_one_row_there(tmp_path):
    assert 50 in evaluation_steps(56, 4)  # 90 % of the budget, where the depth-1 students leave
    config = converging(depths=[1, 2], steps=56, evals=4, check_every=10, teacher_pool=256, plateau_tolerance=0.5)
    history = train(config).history
    student_step = ["teacher", "replicate", "temperature", "depth", "start", "step"]
    assert not history.duplicated(student_step).any()
    left = history[(history.depth == 1) & (history.step == 50)]
    assert len(left) == 2 and (left.converged_at_step == 50).all()
    # a run written before this kept both rows, the converged one last: reading keeps that one
    doubled = pd.concat([history, left.assign(converged_at_step=math.nan)]).sort_values("step", kind="stable")
    doubled = pd.concat([doubled[doubled.converged_at_step.isna()], doubled[doubled.converged_at_step.notna()]])
    doubled.to_csv(tmp_path / "metrics.csv", index=False)
    read = read_metrics(tmp_path / "metrics.csv", "no remedy")
    assert len(read) == len(history) and (read[(read.depth == 1) & (read.step == 50)].converged_at_step == 50).all()


class MemoryCheckpoints:
    """Checkpoints kept as bytes, as a file would keep them; `crash_at` raises at that step."""

    def __init__(self, crash_at=None):
        self.saved, self.crash_at = None, crash_at

    def load_checkpoint(self):
        return torch.load(io.BytesIO(self.saved)) if self.saved else None

    def save_checkpoint(self, state):
        buffer = io.BytesIO()
        torch.save(state, buffer)
        self.saved = buffer.getvalue()

    def progress(self, step):
        if step == self.crash_at:
            raise KeyboardInterrupt


@pytest.mark.slow
@pytest.mark.parametrize(
    "data",
    [
        dict(teacher_pool=256),
        dict(teacher_pool=256, pool_refresh=60, starts=["zero", "discretised"]),
        dict(teacher_pool=0),  # fresh samples: checkpoints and students leave mid-block
        dict(teacher_pool=0, checkpoint_every=48),
    ],
)  # the checkpoint ends a block of 16
def test_resuming_after_students_left_gives_the_uninterrupted_numbers(data):
    config = converging(loss="kl", temperatures=[1.0], evals=5, **({"checkpoint_every": 50} | data))
    whole = train(config)
    checkpoints = MemoryCheckpoints(crash_at=170)  # after the checkpoint at 150 (48: 144, a block's end)
    with pytest.raises(KeyboardInterrupt):
        train(config, on_progress=checkpoints.progress, checkpoints=checkpoints)
    students = len(Population(config, torch.device("cpu")).specs)
    assert len(torch.load(io.BytesIO(checkpoints.saved))["specs"]) < students  # some had left before the crash
    resumed = train(config, checkpoints=checkpoints)
    pd.testing.assert_frame_equal(whole.history, resumed.history)
    for name, tensor in whole.students.state_dict().items():
        assert torch.equal(tensor, resumed.students.state_dict()[name]), name


def test_converged_students_kept_frozen_in_place_give_the_numbers_of_students_that_left(monkeypatch):
    """What a compiled run does (a rebuild recompiles): converged students stay in the population,
    frozen, until a rebuild pays. Their rows, their weights and everyone else's are as if they had left."""
    config = converging(loss="kl", temperatures=[1.0], replicates=1, steps=120, evals=5)
    leaving = train(config)
    monkeypatch.setattr(Rebuilds, "due", lambda self, depths, converged: False)
    staying = train(config)
    assert leaving.history.converged_at_step.notna().any()
    pd.testing.assert_frame_equal(staying.history, leaving.history)
    for name, tensor in leaving.students.state_dict().items():
        torch.testing.assert_close(staying.students.state_dict()[name], tensor, rtol=1e-5, atol=1e-7)


def test_an_eager_run_rebuilds_as_soon_as_a_student_converges():
    rebuilds, depths = Rebuilds(compiled=False), torch.tensor([1, 3])
    assert not rebuilds.due(depths, torch.tensor([False, False]))
    assert rebuilds.due(depths, torch.tensor([True, False]))


def test_a_compiled_run_rebuilds_once_its_frozen_students_have_cost_a_compile():
    now = [0.0]
    rebuilds, depths = Rebuilds(compiled=True, clock=lambda: now[0]), torch.tensor([1, 3])
    rebuilds.compiled_in(30.0)
    one_frozen = torch.tensor([True, False])  # a quarter of the layers
    dues = []
    for _ in range(6):  # a check every 25 s: the frozen quarter costs 6.25 s of each interval
        now[0] += 25
        dues.append(rebuilds.due(depths, one_frozen))
    assert dues == [False, False, False, False, False, True]  # 31.25 s ≥ 30 s at the sixth check
    rebuilds.compiled_in(30.0)  # the smaller population compiled: its waiting starts again
    now[0] += 25
    assert not rebuilds.due(depths, torch.tensor([False, True]))
    now[0] += 25
    assert not rebuilds.due(depths, torch.tensor([False, True]))  # 18.75 s so far
    now[0] += 25
    assert rebuilds.due(depths, torch.tensor([False, True]))  # three quarters frozen: 37.5 s


def test_a_trained_head_learns_at_the_base_rate_unless_asked():
    config = resolve_config(
        "quick",
        teachers=["tied"],
        loss="kl",
        depths=[1, 4],
        replicates=1,
        teacher_depth=8,
        lr=1e-2,
        lr_depth_exponent=0.5,
        device="cpu",
    )
    for scaled in (False, True):
        trainer = Trainer(Population(config.replace(head_lr_depth_scaled=scaled), torch.device("cpu")))
        head = trainer.population.students.head
        rates = trainer.optimizer.rates[[p is head for p in trainer.optimizer.params].index(True)].flatten()
        depths = [spec.depth for spec in trainer.population.specs]
        assert rates.tolist() == pytest.approx([1e-2 / math.sqrt(d) if scaled else 1e-2 for d in depths])
