"""The plateau tests: the relative rule stops a student whose loss is small and noisy first; the
trend rule stops students at the same relative flatness whatever their noise."""

import numpy as np
import pytest
import torch

from toymodels import resolve_config, run_sweep
from toymodels.errors import ToymodelsError
from toymodels.training.trainer import RULES


def first_plateaus(rule: str, scales, noises, steps=30_000, check_every=250, seed=1) -> np.ndarray:
    """The step at which each synthetic student's curve L(t) = scale·(1 + 2·e^(−t/2000)), plus
    independent noise of standard deviation `noise` at every step, first makes a plateau (no decays
    left: it converges there); -1 if never."""
    config = resolve_config(
        "quick", converge=True, check_every=check_every, patience=4, decays=0, plateau_tolerance=0.01, plateau_test=rule
    )
    scales, noises = np.asarray(scales), np.asarray(noises)
    test = RULES[rule](config, torch.zeros(len(scales), dtype=torch.long))
    rng, stopped = np.random.default_rng(seed), np.full(len(scales), -1)
    training = torch.ones(len(scales), dtype=torch.bool)
    for step in range(1, steps + 1):
        losses = scales * (1 + 2 * np.exp(-step / 2000)) + noises * rng.standard_normal(len(scales))
        test.add(torch.tensor(losses, dtype=torch.float32))
        if step % check_every == 0:
            converged = test.check(step, training)
            stopped[converged.numpy()] = step
            training &= ~converged
            if not training.any():
                break
    return stopped


@pytest.mark.slow
def test_the_trend_rule_stops_a_small_noisy_loss_no_sooner_where_the_relative_rule_stops_it_first():
    # twenty students at loss scale 1e-3 with 2 % noise per step, twenty 100× smaller whose noise is
    # 100 % per step (a deep student: its loss falls faster than the noise of its batches)
    scales, noises = [1e-3] * 20 + [1e-5] * 20, [2e-5] * 20 + [1e-5] * 20
    relative, trend = (first_plateaus(rule, scales, noises) for rule in ("relative", "trend"))
    assert (relative > 0).all() and (trend > 0).all()
    large, small = slice(0, 20), slice(20, 40)
    # the old rule: the small, noisy curves look flat long before the large ones
    assert np.median(relative[small]) < 0.75 * np.median(relative[large])
    assert (relative[small] < 0.8 * np.median(relative[large])).mean() >= 0.5
    # the trend rule: the large ones stop where the relative rule stops them (one meaning of flat) …
    assert np.median(trend[large]) == pytest.approx(np.median(relative[large]), rel=0.1)
    # … and the small ones no sooner: noise delays the verdict, never hastens it
    assert np.median(trend[small]) >= 0.95 * np.median(trend[large])
    assert (trend[small] < 0.8 * np.median(trend[large])).mean() <= 0.1


def test_the_trend_rule_is_validated():
    with pytest.raises(ToymodelsError, match="unknown plateau test"):
        resolve_config("quick", plateau_test="patient")
    with pytest.raises(ToymodelsError, match="patience must be ≥ 2"):
        resolve_config("quick", plateau_test="trend", patience=1)


def test_a_sweep_converges_under_the_trend_rule(tmp_path):
    config = resolve_config(
        "quick",
        teachers=["tied"],
        loss="mse",
        depths=[2, 3],
        replicates=1,
        teacher_depth=8,
        steps=400,
        batch=16,
        lr=1e-2,
        schedule="constant",
        converge=True,
        check_every=5,
        patience=2,
        decays=1,
        plateau_test="trend",
        starts=["discretised"],
        test_batches=1,
        test_batch_size=64,
        evals=5,
        device="cpu",
    )
    metrics = run_sweep(config, tmp_path / "trend", progress=False, echo=lambda line: None).metrics()
    assert metrics.converged_at_step.notna().any()
    assert (metrics.groupby("depth").step.max() < 400).any()  # a converged student left before the budget
