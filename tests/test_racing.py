"""Racing starts: a start far behind its student's converged leader, and not catching up at its
recent rate, stops; one improving fast enough does not; the leader never does; and stopping
changes no certified loss, on a committed run's curves and in a sweep run both ways."""

import json

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from toymodels import resolve_config, run_sweep
from toymodels.api import fit_metrics, fit_run, run_protocol
from toymodels.cli.main import main
from toymodels.errors import ToymodelsError
from toymodels.results.certification import completed
from toymodels.results.storage import RunFolder
from toymodels.training.racing import RaceRule, replay

RULE = RaceRule(budget=40_000, margin=0.5, from_step=1000)
STEPS = [1000, 2000, 4000]


def history(chaser: list[float], leader: list[float], leader_converges_at: int | None = 2000) -> pd.DataFrame:
    """One student's two starts at STEPS: the discretised leader (converged at `leader_converges_at`,
    no rows after it) and the zero start chasing it."""
    rows = []
    for step, loss in zip(STEPS, chaser):
        rows.append(dict(step=step, start="zero", test_loss=loss, converged_at_step=np.nan))
    for step, loss in zip(STEPS, leader):
        if leader_converges_at is None or step <= leader_converges_at:
            converged = step == leader_converges_at
            rows.append(
                dict(
                    step=step,
                    start="discretised",
                    test_loss=loss,
                    converged_at_step=leader_converges_at if converged else np.nan,
                )
            )
    return pd.DataFrame(rows).assign(teacher="tied", temperature=np.nan, replicate=0, depth=8, diverged_at_step=np.nan)


def test_a_start_far_behind_and_improving_slowly_stops_with_its_gap():
    stopped = RULE.behind(history([3.0, 2.9, 2.8], [1.0, 1.0]), 4000)
    assert stopped[["start", "depth"]].values.tolist() == [["zero", 8]]
    assert stopped.behind_by.item() == pytest.approx(1.8)


def test_a_start_behind_but_improving_fast_enough_to_catch_up_trains_on():
    # 2.9 → 1.6 over a doubling: rate 0.86, at which it passes the leader long before step 40 000
    assert RULE.behind(history([3.0, 2.9, 1.6], [1.0, 1.0]), 4000).empty


def test_no_start_stops_before_its_leader_has_converged_nor_after_one_evaluation_behind():
    assert RULE.behind(history([3.0, 2.9, 2.8], [1.0, 1.0, 1.0], leader_converges_at=None), 4000).empty
    assert RULE.behind(history([3.0, 1.4, 2.8], [1.0, 1.0]), 4000).empty  # within the margin the time before
    assert RaceRule(40_000, 0.5, from_step=5000).behind(history([3.0, 2.9, 2.8], [1.0, 1.0]), 4000).empty


def test_the_leader_is_never_stopped_even_by_a_start_that_diverged_below_it():
    frame = history([3.0, 2.9, 2.8], [1.0, 1.0])
    frame.loc[frame.start == "zero", "test_loss"] = [0.5, np.inf, np.inf]  # once below the leader, then diverged
    assert RULE.behind(frame, 4000).empty


def test_replaying_the_rule_on_a_committed_run_keeps_every_certified_loss_within_1_percent():
    folder = RunFolder.open("figures/fig4ab/cpu")  # KL, run before racing: zero starts far behind a trained start
    protocol, metrics = run_protocol(folder), folder.metrics()
    assert not protocol.config.race
    raced = replay(metrics, RaceRule.of(protocol.config.replace(race=True)))
    assert len(raced.stopped) >= 20  # the rule does stop starts there
    before, after = (fit_metrics(completed(m, protocol.config.steps), protocol, 4) for m in (metrics, raced.metrics))
    for old, new in zip(before, after):
        assert np.allclose(new.losses, old.losses, rtol=0.01)
        assert abs(new.alpha - old.alpha) <= 0.02 and new.certified == old.certified


def test_a_run_that_raced_replays_to_itself():
    """fig4c ran racing: the rule replayed on its curves stops nothing it did not stop itself."""
    folder = RunFolder.open("figures/fig4c/cpu")
    protocol, metrics = run_protocol(folder), folder.metrics()
    assert protocol.config.race and metrics.stopped_at_step.notna().any()
    assert replay(metrics, RaceRule.of(protocol.config)).stopped.empty


@pytest.fixture(scope="module")
def both_ways(tmp_path_factory):
    """The same tiny sweep of two starts with racing and without: the zero start of the tied teacher
    loses to the discretised start by a wide margin."""
    config = dict(
        teachers=["tied"],
        temperatures=[0.5],
        depths=[2, 4],
        replicates=2,
        teacher_depth=12,
        test_batches=1,
        test_batch_size=256,
        device="cpu",
        loss="mse",
        steps=600,
        batch=64,
        lr=1e-2,
        schedule="constant",
        converge=True,
        check_every=10,
        patience=2,
        decays=1,
        evals=40,
        starts=["zero", "discretised"],
        race_from_step=1,
    )
    return {
        race: run_sweep(
            resolve_config("quick", race=race, **config), tmp_path_factory.mktemp(f"race{race}"), progress=False
        ).path
        for race in (True, False)
    }


@pytest.mark.slow  # both_ways trains two sweeps for seconds
def test_a_racing_sweep_gives_the_same_best_losses_and_verdicts_with_less_training(both_ways):
    raced, full = (fit_run(both_ways[race]) for race in (True, False))
    for with_racing, without in zip(raced, full):
        assert with_racing.losses == pytest.approx(without.losses, rel=1e-6)  # the leader trains exactly as before
        assert (with_racing.certified, with_racing.regime) == (without.certified, without.regime)
    assert {s["start"] for s in raced[0].stopped} == {"zero"} and not full[0].stopped
    steps = {
        race: RunFolder.open(both_ways[race]).metrics().groupby(["replicate", "depth", "start"]).step.max().sum()
        for race in (True, False)
    }
    assert steps[True] < 0.8 * steps[False]


@pytest.mark.slow  # both_ways
def test_a_stopped_start_is_in_the_table_and_in_fit_json(both_ways):
    table = CliRunner().invoke(main, ["fit", str(both_ways[True])]).output
    assert "stopped behind the leading start (gap then): ℓ=2 zero 2/2 at step" in table and "racing" in table
    stopped = json.loads(CliRunner().invoke(main, ["fit", str(both_ways[True]), "--json"]).stdout)["fits"][0]["stopped"]
    assert len(stopped) == 4 and all(s["behind_by"] > 0.5 and s["step"] > 0 for s in stopped)


def test_a_run_written_before_racing_reads_as_not_racing_and_a_bad_margin_is_one_clear_line():
    assert RunFolder.open("figures/deep_independent/cpu").config().race is False  # its config.json has no `race`
    assert resolve_config("quick").race is True
    with pytest.raises(ToymodelsError, match="race margin must be positive"):
        resolve_config("quick", race_margin=0)


@pytest.mark.slow  # both_ways
def test_each_jobs_time_is_split_by_part_and_the_parts_fit_in_its_wall_time(both_ways):
    done = json.loads(next((both_ways[True] / "jobs").glob("*/done.json")).read_text())
    split = done["split"]
    assert split["labelling"] > 0 and split["student steps"] > 0 and split["evaluations"] > 0 and "racing" in split
    assert sum(split.values()) <= done["seconds"]
