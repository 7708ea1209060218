"""The budget ladder: rungs of the last stage at ×1, ×2, ×4 its budget, the convergence ratio r,
the extrapolated L∞ with its interval, and α at every rung and at ∞."""

import shutil

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from toymodels import resolve_config, run_sweep
from toymodels.cli.main import main
from toymodels.errors import ToymodelsError
from toymodels.results.ladder import extrapolate, ladder_exponents, paired_rungs, tail
from toymodels.results.storage import RunFolder
from toymodels.runs.ladder import long_rungs, rung_folders


def geometric_rungs(limits, first_moves, ratio, noise, rng, depths=None, replicates=1):
    """Synthetic students whose losses approach `limits` by moves shrinking by `ratio` per doubling:
    L(B) = L∞ + m/(1 − r), L(2B) = L∞ + m·r/(1 − r), L(4B) = L∞ + m·r²/(1 − r); each rung's test loss
    off by its relative `noise`."""
    limits, first_moves = np.asarray(limits, float), np.asarray(first_moves, float)
    depths = np.arange(len(limits)) + 1 if depths is None else np.asarray(depths)
    rows = []
    for replicate in range(replicates):
        for k, rung in enumerate((1, 2, 4)):
            true = limits + first_moves * ratio**k / (1 - ratio)
            measured = true * (1 + noise * rng.standard_normal(len(limits)))
            rows.append(pd.DataFrame({"teacher": "tied", "temperature": np.nan, "replicate": replicate,
                                      "depth": depths, "rung": rung, "test_loss": measured,
                                      "relative_noise": noise, "steps": 1000 * rung}))
    return pd.concat(rows, ignore_index=True)


def test_tail_recovers_a_geometric_series_exactly():
    limit, move, ratio = 2e-5, 1e-5, 0.4
    losses = np.array([limit + move * ratio**k / (1 - ratio) for k in range(3)])
    r, inferred, valid = tail(losses)
    assert valid and r == pytest.approx(ratio) and inferred == pytest.approx(limit)


def test_extrapolation_recovers_known_limits_through_the_noise_and_covers_them():
    rng = np.random.default_rng(3)
    limits = np.full(400, 1e-4)
    rungs = geometric_rungs(limits, first_moves=0.3 * limits, ratio=0.5, noise=0.002, rng=rng)
    ladder = extrapolate(rungs, rng=np.random.default_rng(4))
    assert (ladder.status == "extrapolated").mean() > 0.95
    assert np.median(ladder.r) == pytest.approx(0.5, abs=0.03)
    assert np.median(ladder.loss_inf) == pytest.approx(1e-4, rel=0.01)
    # a 95 % interval: the test noise resampled covers the true L∞ about 95 % of the time
    covered = ((ladder.loss_inf_low <= 1e-4) & (1e-4 <= ladder.loss_inf_high))[ladder.status == "extrapolated"]
    assert 0.9 <= covered.mean() <= 0.99


def test_a_ratio_not_below_one_is_not_extrapolable():
    rng = np.random.default_rng(5)
    rungs = geometric_rungs([1e-4] * 20, first_moves=[1e-5] * 20, ratio=1.3, noise=0.002, rng=rng)
    ladder = extrapolate(rungs, rng=np.random.default_rng(6))
    assert (ladder.status == "not extrapolable").all()
    assert ladder.loss_inf.isna().all() and (ladder.r > 1).all()
    exponents = ladder_exponents(ladder.assign(depth=np.tile([6, 12, 16, 24, 32], 4), replicate=np.repeat(range(4), 5)))
    limit = exponents[(exponents.rung == "inf")]
    assert limit.alpha.isna().all() and limit.note.str.startswith("not extrapolable at ℓ=").all()


def test_moves_within_the_noise_read_as_flat_at_the_last_rung():
    rng = np.random.default_rng(7)
    rungs = geometric_rungs([1e-4] * 50, first_moves=[1e-9] * 50, ratio=0.5, noise=0.01, rng=rng)
    ladder = extrapolate(rungs, rng=np.random.default_rng(8))
    flat = ladder.status == "flat"
    assert flat.mean() > 0.8
    np.testing.assert_allclose(ladder.loss_inf[flat], ladder.loss_x4[flat])


def test_alpha_at_infinity_recovers_the_limits_exponent_over_three_replicates():
    depths = np.array([6, 12, 16, 24, 32, 48])
    rng = np.random.default_rng(9)
    limits = 0.1 * depths**-3.0
    rungs = geometric_rungs(limits, first_moves=0.5 * limits, ratio=0.5, noise=0.003, rng=rng, depths=depths,
                            replicates=3)
    exponents = ladder_exponents(extrapolate(rungs, rng=np.random.default_rng(10)))
    whole = exponents[exponents.window == "6–48"].set_index("rung")
    assert whole.loc["inf"].alpha == pytest.approx(3.0, abs=0.05)
    assert whole.loc["inf"].alpha_low < 3.0 < whole.loc["inf"].alpha_high
    # each rung sits on the same power law moved up by a constant share: the same α as L∞'s
    assert whole.loc["x1"].alpha == pytest.approx(3.0, abs=0.05)
    local = exponents[(exponents.rung == "inf") & (exponents.window != "6–48")]
    assert list(local.window) == ["6–12", "12–16", "16–24", "24–32", "32–48"]
    assert ((local.alpha_low < 3.0) & (3.0 < local.alpha_high)).mean() >= 0.8


def test_rungs_measured_on_the_same_test_samples_pair_their_noise():
    # three rungs of 40 students whose losses on 40 shared test pieces differ by the piece far more
    # than by the rung: each loss is noisy, a move between rungs is not
    rng = np.random.default_rng(13)
    pieces = 1 + 0.05 * rng.standard_normal((40, 40))  # (students, pieces): each piece's difficulty
    rows = [pd.DataFrame({"teacher": "tied", "temperature": np.nan, "replicate": 0, "depth": student + 1,
                          "rung": rung, "chunk": np.arange(40), "steps": 100 * rung,
                          "loss": level * pieces[student] * (1 + 0.001 * rng.standard_normal(40))})
            for student in range(40) for rung, level in ((1, 1.3e-4), (2, 1.15e-4), (4, 1.075e-4))]
    rungs, correlations = paired_rungs(pd.concat(rows, ignore_index=True))
    assert (correlations.corr_x1_x4 > 0.99).all()
    assert np.median(rungs.relative_noise) == pytest.approx(0.05 / np.sqrt(40), rel=0.1)
    paired = extrapolate(rungs, correlations, rng=np.random.default_rng(14))
    independent = extrapolate(rungs, rng=np.random.default_rng(14))
    assert (paired.status == "extrapolated").all()  # r = 0.5, L∞ = 1e-4, seen through the pairing
    np.testing.assert_allclose(paired.loss_inf / (pieces.mean(1) * 1e-4), 1, rtol=0.01)
    assert (paired.r_high - paired.r_low < (independent.r_high - independent.r_low) / 10).all()


def test_a_joined_ladder_table_goes_back_to_rows_per_rung():
    rng = np.random.default_rng(11)
    rungs = geometric_rungs([1e-4, 2e-5], first_moves=[1e-5, 2e-6], ratio=0.5, noise=0.002, rng=rng)
    back = long_rungs(extrapolate(rungs))
    key = ["replicate", "depth", "rung"]
    pd.testing.assert_frame_equal(back.sort_values(key).reset_index(drop=True)[rungs.columns],
                                  rungs.sort_values(key).reset_index(drop=True), check_dtype=False)


@pytest.fixture(scope="module")
def ladder_run(tmp_path_factory):
    config = resolve_config("quick", teachers=["tied"], loss="mse", depths=[2, 4, 8], replicates=1, teacher_depth=16,
                            steps=30, batch=64, lr=1e-2, schedule="G", starts=["discretised"], test_batches=8,
                            test_batch_size=64, evals=4, budget_rungs=[2, 4], save_students=True, device="cpu")
    return run_sweep(config, tmp_path_factory.mktemp("runs") / "ladder", progress=False, echo=lambda line: None)


@pytest.mark.slow
def test_every_rung_trains_the_same_start_at_its_multiple_of_the_budget(ladder_run):
    folders = rung_folders(ladder_run)
    assert list(folders) == [1, 2, 4]
    for rung, path in folders.items():
        config = RunFolder(path).config()
        assert config.steps == 30 * rung and config.starts == ("discretised",)
        assert config.budget_rungs == ((2, 4) if rung == 1 else ())  # the run itself is rung ×1
        assert RunFolder(path).metrics().step.max() == 30 * rung
    first = RunFolder(folders[1]).metrics()
    longer = RunFolder(folders[4]).metrics()
    # the same start: the untrained students test alike
    np.testing.assert_array_equal(first.reference_loss.unique(), longer.reference_loss.unique())


@pytest.mark.slow
def test_the_ladder_command_writes_its_tables_and_a_rung_missing_is_one_line(ladder_run, tmp_path):
    result = CliRunner().invoke(main, ["ladder", str(ladder_run.path)])
    assert result.exit_code == 0, result.output
    assert "α over ℓ 2–8" in result.output
    written = ladder_run.path / RunFolder.LADDER
    ladder = pd.read_csv(written / "ladder.csv")
    assert {"loss_x1", "loss_x2", "loss_x4", "r", "r_low", "r_high", "loss_inf", "status"} <= set(ladder.columns)
    assert len(ladder) == 3 and (written / "ladder.png").is_file() and (written / "ladder_exponents.csv").is_file()
    # a copy without its last rung: one line, exit status 2, nothing written
    copy = tmp_path / "copy"
    shutil.copytree(ladder_run.path, copy, ignore=shutil.ignore_patterns(RunFolder.LADDER))
    (copy / "rung_x4" / RunFolder.METRICS).unlink()
    result = CliRunner().invoke(main, ["ladder", str(copy)])
    assert result.exit_code == 2
    assert "lacks rung ×4" in result.output and len(result.output.strip().splitlines()) == 1
    assert not (copy / RunFolder.LADDER).exists()


def test_budget_rungs_are_validated():
    with pytest.raises(ToymodelsError, match="budget rungs must be increasing"):
        resolve_config("quick", budget_rungs=[4, 2])
    with pytest.raises(ToymodelsError, match="budget rungs must be increasing"):
        resolve_config("quick", budget_rungs=[1, 2])


@pytest.mark.slow
def test_alpha_at_infinity_covers_the_teachers_exponent_95_percent_of_the_time():
    # each simulated sweep draws three teachers whose exponents scatter about 3, then their students'
    # geometric ladders with test noise; the interval is about the mean exponent over teachers
    depths, rng, covered = np.array([6, 12, 16, 24, 32, 48]), np.random.default_rng(12), []
    for sweep in range(150):
        parts = []
        for replicate, alpha in enumerate(3 + 0.15 * rng.standard_normal(3)):
            limits = 0.1 * depths**-alpha
            part = geometric_rungs(limits, first_moves=0.5 * limits, ratio=0.5, noise=0.003, rng=rng, depths=depths)
            parts.append(part.assign(replicate=replicate))
        exponents = ladder_exponents(extrapolate(pd.concat(parts), rng=rng), rng=rng)
        whole = exponents[(exponents.window == "6–48") & (exponents.rung == "inf")].iloc[0]
        covered.append(whole.alpha_low <= 3 <= whole.alpha_high)
    assert 0.9 <= np.mean(covered) <= 0.99


def test_a_ladder_grows_by_a_rung_and_never_drops_one(tmp_path):
    """A finished ladder may be asked for a further rung (its rungs so far stand as they are): the
    folder's config takes the new rungs; a run there without one of its rungs is refused."""
    from toymodels.config import resolve_config
    from toymodels.results.storage import RunFolder

    two = resolve_config("quick", budget_rungs=[2])
    RunFolder.create(tmp_path / "run", two)
    assert RunFolder.create(tmp_path / "run", two.replace(budget_rungs=[2, 4])).config().budget_rungs == (2, 4)
    with pytest.raises(ToymodelsError, match="may add rungs, not drop them"):
        RunFolder.create(tmp_path / "run", two.replace(budget_rungs=[4]))
    with pytest.raises(ToymodelsError, match="another protocol"):
        RunFolder.create(tmp_path / "run", two.replace(budget_rungs=[2, 4], steps=7))
