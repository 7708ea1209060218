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
from toymodels.results.storage import RunFolder, write_table
from toymodels.workflows.ladder import long_rungs, rung_folders


def geometric_rungs(limits, first_moves, ratio, noise, rng, depths=None, replicates=1, rungs=(1, 2, 4, 8)):
    """Synthetic students whose losses approach `limits` by moves shrinking by `ratio` per doubling:
    L(B) = L∞ + m/(1 − r), L(2B) = L∞ + m·r/(1 − r), L(4B) = L∞ + m·r²/(1 − r), …; each rung's test
    loss off by its relative `noise`. `ratio` may be a function of the rung's index (a drifting r)."""
    limits, first_moves = np.asarray(limits, float), np.asarray(first_moves, float)
    depths = np.arange(len(limits)) + 1 if depths is None else np.asarray(depths)
    rows = []
    for replicate in range(replicates):
        for k, rung in enumerate(rungs):
            true = limits + first_moves * drifting_tail(ratio, k)
            measured = true * (1 + noise * rng.standard_normal(len(limits)))
            rows.append(
                pd.DataFrame(
                    {
                        "teacher": "tied",
                        "temperature": np.nan,
                        "replicate": replicate,
                        "depth": depths,
                        "rung": rung,
                        "test_loss": measured,
                        "relative_noise": noise,
                        "steps": 1000 * rung,
                    }
                )
            )
    return pd.concat(rows, ignore_index=True)


def drifting_tail(ratio, k: int) -> float:
    """The remaining tail after k moves in units of the first move: Σ_{j ≥ k} of the moves, move j
    the one before times `ratio(j)` (a constant r: r^k/(1 − r)), summed far enough to converge."""
    if not callable(ratio):  # closed form, which also gives growing moves for r > 1
        return ratio**k / (1 - ratio)
    moves = np.cumprod([1.0, *(ratio(j) for j in range(1, 400))])
    return float(moves[k:].sum())


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
    assert (ladder.status == "extrapolated").mean() > 0.95  # two ratios that agree, as a constant r gives
    assert np.median(ladder.r) == pytest.approx(0.5, abs=0.03)
    assert ladder.loss_inf.median() == pytest.approx(1e-4, rel=0.01)
    # at least 95 %: the test noise resampled, and r drawn between the two ratios (the model's error,
    # which a constant r does not have, so the interval is conservative here)
    covered = ((ladder.loss_inf_low <= 1e-4) & (1e-4 <= ladder.loss_inf_high))[ladder.status == "extrapolated"]
    assert covered.mean() >= 0.95


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
    np.testing.assert_allclose(ladder.loss_inf[flat], ladder.loss_x8[flat])


def test_alpha_at_infinity_recovers_the_limits_exponent_over_three_replicates():
    depths = np.array([6, 12, 16, 24, 32, 48])
    rng = np.random.default_rng(10)  # a draw where all 18 tails pass (1–2 % of true tails are refused by chance)
    limits = 0.1 * depths**-3.0
    rungs = geometric_rungs(
        limits, first_moves=0.5 * limits, ratio=0.5, noise=0.003, rng=rng, depths=depths, replicates=3
    )
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
    rows = [
        pd.DataFrame(
            {
                "teacher": "tied",
                "temperature": np.nan,
                "replicate": 0,
                "depth": student + 1,
                "rung": rung,
                "chunk": np.arange(40),
                "steps": 100 * rung,
                "loss": level * pieces[student] * (1 + 0.001 * rng.standard_normal(40)),
            }
        )
        for student in range(40)
        for rung, level in ((1, 1.3e-4), (2, 1.15e-4), (4, 1.075e-4), (8, 1.0375e-4))
    ]
    rungs, correlations = paired_rungs(pd.concat(rows, ignore_index=True))
    assert (correlations.corr_x1_x4 > 0.99).all()
    assert np.median(rungs.relative_noise) == pytest.approx(0.05 / np.sqrt(40), rel=0.1)
    paired = extrapolate(rungs, correlations, rng=np.random.default_rng(14))
    independent = extrapolate(rungs, rng=np.random.default_rng(14))
    extrapolated = paired.status == "extrapolated"  # r = 0.5, L∞ = 1e-4, seen through the pairing
    assert extrapolated.mean() > 0.9
    np.testing.assert_allclose(paired.loss_inf[extrapolated] / (pieces.mean(1)[extrapolated] * 1e-4), 1, rtol=0.01)
    assert (paired.r_high - paired.r_low < (independent.r_high - independent.r_low) / 10).all()


def test_a_joined_ladder_table_goes_back_to_rows_per_rung():
    rng = np.random.default_rng(11)
    rungs = geometric_rungs([1e-4, 2e-5], first_moves=[1e-5, 2e-6], ratio=0.5, noise=0.002, rng=rng)
    back = long_rungs(extrapolate(rungs))
    key = ["replicate", "depth", "rung"]
    pd.testing.assert_frame_equal(
        back.sort_values(key).reset_index(drop=True)[rungs.columns],
        rungs.sort_values(key).reset_index(drop=True),
        check_dtype=False,
    )


@pytest.fixture(scope="module")
def ladder_run(tmp_path_factory):
    config = resolve_config(
        "quick",
        teachers=["tied"],
        loss="mse",
        depths=[2, 4, 8],
        replicates=1,
        teacher_depth=16,
        steps=30,
        batch=64,
        lr=1e-2,
        schedule="G",
        starts=["discretised"],
        test_batches=8,
        test_batch_size=64,
        evals=4,
        budget_rungs=[2, 4],
        save_students=True,
        device="cpu",
    )
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
    tails = pd.read_csv(written / "ladder_tails.csv")
    assert {"geometric", "power law", "α series", "span of the passing families"} <= set(tails.family)
    assert "α∞ over ℓ 2–8, joined" in result.output  # each family's limit, or why it fails, and the span
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
    for _ in range(100):
        parts = []
        for replicate, alpha in enumerate(3 + 0.15 * rng.standard_normal(3)):
            limits = 0.1 * depths**-alpha
            part = geometric_rungs(limits, first_moves=0.5 * limits, ratio=0.5, noise=0.003, rng=rng, depths=depths)
            parts.append(part.assign(replicate=replicate))
        exponents = ladder_exponents(extrapolate(pd.concat(parts), rng=rng), rng=rng)
        whole = exponents[(exponents.window == "6–48") & (exponents.rung == "inf")].iloc[0]
        if np.isfinite(whole.alpha):  # a sweep with a refused tail has no α∞ over the whole window
            covered.append(whole.alpha_low <= 3 <= whole.alpha_high)
    assert len(covered) >= 40 and 0.9 <= np.mean(covered) <= 0.99  # about 60 % of sweeps pass all 18 tails


def test_a_ladder_grows_by_a_rung_and_never_drops_one(tmp_path):
    """A finished ladder may be asked for a further rung (its rungs so far stand as they are): the
    folder's config takes the new rungs; a run there without one of its rungs is refused."""
    from toymodels.config import resolve_config
    from toymodels.results.storage import RunFolder

    two = resolve_config("quick", budget_rungs=[2])
    RunFolder.create(tmp_path / "run", two)
    assert RunFolder.create(tmp_path / "run", two.replace(budget_rungs=[2, 4])).config().budget_rungs == (2, 4)
    with pytest.raises(ToymodelsError, match="may add rungs, not drop or change them"):
        RunFolder.create(tmp_path / "run", two.replace(budget_rungs=[4]))
    with pytest.raises(ToymodelsError, match="another protocol"):
        RunFolder.create(tmp_path / "run", two.replace(budget_rungs=[2, 4], steps=7))
    # a further rung at the shallow depths only; the rungs held keep every depth
    shallow = two.replace(budget_rungs=[2, 4, 8], rung_depth_limits=[16, 16, 4])
    assert RunFolder.create(tmp_path / "run", shallow).config().rung_depths()[8] == (2, 4)
    with pytest.raises(ToymodelsError, match="not drop or change them"):
        RunFolder.create(tmp_path / "run", shallow.replace(rung_depth_limits=[4, 8, 4]))


def test_rung_depth_limits_are_one_per_rung():
    with pytest.raises(ToymodelsError, match="one deepest depth per budget rung"):
        resolve_config("quick", budget_rungs=[2, 4], rung_depth_limits=[8])
    with pytest.raises(ToymodelsError, match="at least the shallowest depth"):
        resolve_config("quick", depths=[4, 8], budget_rungs=[2], rung_depth_limits=[2])


def test_two_ratios_that_drift_apart_are_refused_and_one_ratio_is_not_enough():
    rng = np.random.default_rng(15)
    drifting = geometric_rungs(
        [1e-4] * 30, first_moves=[3e-5] * 30, ratio=lambda move: 0.55 if move == 1 else 0.8, noise=0.002, rng=rng
    )  # r 0.55 then 0.8: the geometric model fails its own test
    ladder = extrapolate(drifting, rng=np.random.default_rng(16))
    assert (ladder.status == "not extrapolable").all() and ladder.loss_inf.isna().all()
    assert ladder.reason.str.startswith("r drifts: 0.5").mean() > 0.9
    assert ladder.r_x4.median() == pytest.approx(0.55, abs=0.03) and ladder.r_x8.median() == pytest.approx(
        0.8, abs=0.03
    )
    three = geometric_rungs([1e-4] * 5, first_moves=[3e-5] * 5, ratio=0.5, noise=0.002, rng=rng, rungs=(1, 2, 4))
    ladder = extrapolate(three, rng=np.random.default_rng(17))
    assert (ladder.status == "not extrapolable").all() and (
        ladder.reason == "one ratio: a fourth rung tests the tail"
    ).all()


def test_the_spread_of_r_widens_the_limit_which_still_covers_the_truth():
    # r drifts a little (0.5, 0.55, within the test noise of the ratios): L∞'s interval carries it
    rng = np.random.default_rng(18)
    limits = np.full(300, 1e-4)
    steady = extrapolate(geometric_rungs(limits, 0.3 * limits, 0.5, 0.002, rng), rng=np.random.default_rng(19))
    drifting = extrapolate(
        geometric_rungs(limits, 0.3 * limits, lambda move: 0.5 if move == 1 else 0.55, 0.002, rng),
        rng=np.random.default_rng(19),
    )
    for ladder in (steady, drifting):
        extrapolated = ladder[ladder.status == "extrapolated"]
        assert len(extrapolated) > 0.8 * len(ladder)
        assert ((extrapolated.loss_inf_low <= 1e-4) & (1e-4 <= extrapolated.loss_inf_high)).mean() >= 0.9
    width = [(ladder.loss_inf_high - ladder.loss_inf_low).median() for ladder in (steady, drifting)]
    assert width[1] > width[0]


def test_a_joined_ladder_may_hold_a_part_one_rung_further():
    rng = np.random.default_rng(20)
    four = geometric_rungs([1e-4, 2e-5], first_moves=[3e-5, 6e-6], ratio=0.5, noise=0.001, rng=rng)
    three = geometric_rungs([1e-4, 2e-5], first_moves=[3e-5, 6e-6], ratio=0.5, noise=0.001, rng=rng, rungs=(1, 2, 4))
    ladder = extrapolate(pd.concat([four, three.assign(replicate=1)], ignore_index=True), rng=np.random.default_rng(21))
    by_replicate = ladder.set_index("replicate")
    assert (by_replicate.loc[0].status == "extrapolated").all() and by_replicate.loc[1].loss_x8.isna().all()
    assert (by_replicate.loc[1].reason == "one ratio: a fourth rung tests the tail").all()
    np.testing.assert_allclose(by_replicate.loc[1].r, 0.5, atol=0.05)  # its one ratio, from ×1, ×2, ×4


@pytest.mark.parametrize("power, slope", [(3, -1.0), (2, 0.0)])
def test_the_slope_over_the_euler_rule_reads_the_typical_case_and_the_coherent_one(power, slope):
    # trained students at c·u^power beside the untrained Euler rule's u², u = 1/ℓ − 1/128
    depths = np.array([6, 12, 16, 24, 32, 48])
    u = 1 / depths - 1 / 128
    limits = 0.05 * u**power
    rungs = geometric_rungs(
        limits,
        first_moves=0.3 * limits,
        ratio=0.5,
        noise=0.001,
        rng=np.random.default_rng(22),
        depths=depths,
        replicates=3,
    )
    ladder = extrapolate(rungs, rng=np.random.default_rng(23)).assign(
        reference_loss=lambda t: 2 * (1 / t.depth - 1 / 128) ** 2
    )
    exponents = ladder_exponents(ladder, teacher_depth=128)
    whole = exponents[exponents.window == "6–48"].set_index("rung")
    for rung in ("x1", "x8"):  # every rung is the law moved up by one share, so the same slope and p
        assert whole.loc[rung].discretisation_slope == pytest.approx(slope, abs=0.02)
        assert whole.loc[rung].p == pytest.approx(power, abs=0.05)
        assert whole.loc[rung].discretisation_slope_low < slope < whole.loc[rung].discretisation_slope_high
    assert whole.loc["x8"].alpha > power  # the log–log α reads steeper than p near ℓ*


@pytest.mark.slow
def test_a_committed_ladder_grows_by_a_rung_and_keeps_its_rungs_bit_for_bit(ladder_run, tmp_path):
    """A committed run keeps its ladder table, not its students: a rung trained into it later joins
    the saved rungs as they were, and every student gains its second r."""
    assert CliRunner().invoke(main, ["ladder", str(ladder_run.path)]).exit_code == 0
    committed = tmp_path / "committed"
    shutil.copytree(ladder_run.path, committed, ignore=shutil.ignore_patterns(RunFolder.STUDENTS))
    before = pd.read_csv(committed / RunFolder.LADDER / "ladder.csv")
    # the new rung where its ratio can decide: ℓ 2 and 4, not ℓ 8 (--rung-depth-limits)
    grown = RunFolder.open(committed).config().replace(budget_rungs=[2, 4, 8], rung_depth_limits=[8, 8, 4])
    run_sweep(grown, committed, progress=False, echo=lambda line: None)
    assert RunFolder(committed / "rung_x8").config().depths == (2, 4)
    result = CliRunner().invoke(main, ["ladder", str(committed)])
    assert result.exit_code == 0, result.output
    after = pd.read_csv(committed / RunFolder.LADDER / "ladder.csv")
    for column in ("loss_x1", "loss_x2", "loss_x4", "noise_x4", "steps_x4", "corr_x1_x4", "r_x4"):
        np.testing.assert_array_equal(after[column], before[column if column != "r_x4" else "r"])
    shallow, deep = after[after.depth < 8], after[after.depth == 8]
    assert shallow.loss_x8.notna().all() and shallow.r_x8.notna().all()
    assert (shallow.steps_x8 == 8 * shallow.steps_x1).all()
    assert deep.loss_x8.isna().all() and deep.r_x8.isna().all()  # never trained at ×8: no second ratio
    assert "r_x8" in result.output.splitlines()[1]  # the header of the ratios' columns
    # a saved rung that lost its table and its students: one line naming it
    write_table(committed / RunFolder.LADDER / "ladder.csv", before.drop(columns=["loss_x2"]))  # whole, recorded
    result = CliRunner().invoke(main, ["ladder", str(committed)])
    assert result.exit_code == 2 and "rung ×2" in result.output and len(result.output.strip().splitlines()) == 1


def test_a_repeat_of_the_run_widens_every_ratio_by_the_run_to_run_spread():
    from toymodels.results.ladder import rerun_spreads

    rng = np.random.default_rng(24)
    limits = np.full(50, 1e-4)
    rungs = geometric_rungs(limits, 0.3 * limits, 0.5, 0.001, rng)
    alone = extrapolate(rungs, rng=np.random.default_rng(25))
    again = alone.assign(
        **{
            f"loss_x{rung}": alone[f"loss_x{rung}"] * (1 + 0.004 * np.sign(rng.standard_normal(50)))
            for rung in (1, 2, 4)
        }
    )  # another machine: 0.4 % off at the rungs it repeated
    spreads = rerun_spreads(alone, again)
    np.testing.assert_allclose(spreads, 0.004 / np.sqrt(2), rtol=0.01)
    wider = extrapolate(rungs.assign(rerun_spread=np.tile(spreads.to_numpy(), 4)), rng=np.random.default_rng(25))
    assert (wider.r_high - wider.r_low > 2 * (alone.r_high - alone.r_low)).all()
    np.testing.assert_array_equal(wider.r, alone.r)  # the same point estimates, wider intervals


def test_a_joined_ladders_figure_keys_its_faint_replicate_lines(tmp_path, monkeypatch):
    import toymodels.plotting.ladder as drawing

    drawn = {}
    monkeypatch.setattr(drawing, "finish_figure", lambda fig, caption, path: drawn.setdefault("fig", fig) and [])
    rng = np.random.default_rng(3)
    limits = np.array([1e-3, 1e-4])
    for replicates, keyed in ((2, True), (1, False)):
        drawn.clear()
        drawing.plot_ladder(
            extrapolate(geometric_rungs(limits, limits, 0.5, 0.001, rng, replicates=replicates), rng=rng),
            "caption",
            tmp_path / "ladder",
        )
        [axis] = drawn["fig"].axes
        labels = [text.get_text() for text in axis.get_legend().get_texts()]
        assert (drawing.REPLICATE_LINE_LABEL in labels) == keyed and "ℓ=1" in labels


def test_a_rung_trained_at_the_shallow_depths_only_is_fitted_over_them():
    """`rung_depth_limits`: the last rung holds ℓ 1–3 of 1–5, so α, p and the slope at it are given
    over ℓ 1–3 (its window), and over the whole window only up to the rung before."""
    rng = np.random.default_rng(8)
    depths = np.array([1, 2, 3, 4, 5])
    rows = geometric_rungs(2e-3 * depths**-2.0, 1e-3 * depths**-2.0, 0.5, 0.001, rng, depths=depths)
    rows = rows[(rows.rung < 8) | (rows.depth <= 3)]
    exponents = ladder_exponents(extrapolate(rows, rng=rng), teacher_depth=128, rng=rng).set_index(["rung", "window"])
    assert exponents.loc[("x8", "1–3")].alpha == pytest.approx(2.0, abs=0.1)
    assert (
        np.isnan(exponents.loc[("x8", "1–5")].alpha) and exponents.loc[("x8", "1–5")].note == "not trained at ℓ=4, ℓ=5"
    )
    assert exponents.loc[("x4", "1–3")].alpha == pytest.approx(2.0, abs=0.1)


def test_the_ladders_figure_ends_each_depth_at_its_own_last_rung(tmp_path, monkeypatch):
    """A rung trained at ℓ 1–3 only: ℓ 4 and 5 are drawn to ×4 and marked open there (their last loss
    an upper bound), not dropped."""
    import toymodels.plotting.ladder as drawing

    drawn = {}
    monkeypatch.setattr(drawing, "finish_figure", lambda fig, caption, path: drawn.setdefault("fig", fig) and [])
    rng = np.random.default_rng(8)
    depths = np.array([1, 2, 3, 4, 5])
    rows = geometric_rungs(2e-3 * depths**-2.0, 1e-3 * depths**-2.0, 0.5, 0.001, rng, depths=depths)
    ladder = extrapolate(rows[(rows.rung < 8) | (rows.depth <= 3)], rng=rng)
    drawing.plot_ladder(ladder, "caption", tmp_path / "ladder")
    [axis] = drawn["fig"].axes
    lines = {line.get_label(): line for line in axis.get_lines()}
    assert list(lines["ℓ=5"].get_xdata()) == [1, 2, 4] and list(lines["ℓ=3"].get_xdata()) == [1, 2, 4, 8]
    deepest = ladder[ladder.depth == 5].loss_x4.iloc[0]
    open_ends = [line for line in axis.get_lines() if line.get_marker() == "s" and line.get_markerfacecolor() == "none"]
    assert any(np.isclose(line.get_ydata()[0], deepest) for line in open_ends)


def test_the_depth_ratio_reads_the_step_mismatch_exponent_of_a_pure_law():
    """Students that follow L = c·(1/ℓ − 1/128)^2.7 exactly give L(12)/L(24) = 8.73 and p = 2.7 at
    every rung; the interval holds them, and a ladder without ℓ 24 has no ratio."""
    from toymodels.results.ladder import depth_ratios

    rows = []
    for depth in (6, 12, 24):
        law = 0.3 * (1 / depth - 1 / 128) ** 2.7
        rows += [
            {
                "teacher": "tied",
                "temperature": np.nan,
                "replicate": 0,
                "depth": depth,
                "rung": rung,
                "test_loss": law * (1 + 0.5 * 0.6**k),
                "relative_noise": 0.005,
                "steps": 100 * rung,
            }
            for k, rung in enumerate((1, 2, 4))
        ]
    ladder = extrapolate(pd.DataFrame(rows))
    ratios = depth_ratios(ladder, 12, 24, 128)
    assert len(ratios) == 3 and ratios.ratio.to_numpy() == pytest.approx(8.73, abs=0.01)
    assert ratios.p.to_numpy() == pytest.approx(2.7, abs=1e-6)
    assert ((ratios.ratio_low < 8.73) & (8.73 < ratios.ratio_high)).all()
    assert depth_ratios(ladder[ladder.depth != 24], 12, 24, 128).empty
