import json
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from toymodels.api import load_fits, reproduce
from toymodels.cli.main import main
from toymodels.errors import ToymodelsError
from toymodels.results.storage import RunFolder
from toymodels.training.planning import sweep_flops, sweep_flops_per_step
from toymodels.training.protocol import Protocol
from toymodels.workflows.experiment import (
    FIGURES,
    PACKAGED_EXPERIMENTS,
    Experiment,
    experiment_names,
    resolve_run_config,
)
from toymodels.workflows.experiment_figures import reference_fits

PAPER_FIGURES = {"fig3b", "fig4c", "fig4ab", "fig5", "rk2", "teacher24", "regimes"}
TINY = dict(
    steps=20,
    batch=16,
    teacher_depth=6,
    replicates=2,
    test_batches=1,
    test_batch_size=32,
    evals=4,
    teacher_pool=0,
    pool_refresh=0,
    starts=["zero"],
    device="cpu",
)  # one start: speed


def test_every_paper_figure_has_an_experiment_with_both_scales():
    assert PAPER_FIGURES <= set(experiment_names())
    for name in PAPER_FIGURES:
        experiment = Experiment.load(name)
        assert {"cpu", "paper"} <= set(experiment.scales)
        cpu, paper = experiment.config("cpu"), experiment.config("paper")
        assert (
            sweep_flops_per_step(Protocol.of(cpu)) < sweep_flops_per_step(Protocol.of(paper)) / 5
        )  # a laptop's share of the work
        assert cpu.converge and cpu.replicates >= 3  # science: converged students, 3 teachers at least


def test_paper_scale_is_the_papers_protocol():
    fig3b, fig4ab, fig5 = (Experiment.load(n).config("paper") for n in ("fig3b", "fig4ab", "fig5"))
    assert fig3b.teachers == ("independent",) and fig3b.loss == "kl" and fig3b.steps == 40_000
    assert fig3b.lr == 6e-4 and fig3b.schedule == "constant" and len(fig3b.temperatures) == 16
    assert fig3b.depths == (6, 12, 16, 24, 32, 48) and fig3b.replicates == 3 and fig3b.batch == 1024
    assert fig4ab.loss == "kl-fixed-head" and fig4ab.steps == 80_000 and fig4ab.lr == pytest.approx(6e-4 * 4)
    assert fig5.loss == "mse" and fig5.lr == pytest.approx(6e-4 * 2) and fig5.lr_depth_exponent == 0.5
    assert Experiment.load("rk2").config("paper").depths == (3, 6, 8, 12, 16, 24)
    assert Experiment.load("teacher24").config("paper").teacher_depth == 24


def test_a_caption_names_the_grid_and_the_papers_where_it_is_smaller():
    fig3b = Experiment.load("fig3b")
    cpu = fig3b.caption("cpu", Protocol.of(fig3b.config("cpu")))
    assert cpu.startswith(
        "fig3b, cpu scale: ℓ ∈ {2, 4, 8, 16}, T ∈ {0.01, 0.0464, 0.215, 1} "
        "(the paper's: 6 depths 6–48, 16 T in [0.01, 1]); kl loss"
    )
    assert "the paper's" not in fig3b.caption("paper", Protocol.of(fig3b.config("paper")))
    regimes = Experiment.load("regimes")  # no temperatures
    assert "T ∈" not in regimes.caption("cpu", Protocol.of(regimes.config("cpu")))


def test_run_accepts_an_experiment_file():
    config = resolve_run_config("quick", PACKAGED_EXPERIMENTS / "regimes.toml", scale="cpu")
    assert config.teachers == ("independent", "tied") and config.loss == "mse"
    result = CliRunner().invoke(main, ["run", "--config", str(PACKAGED_EXPERIMENTS / "fig5.toml"), "--scale", "huge"])
    assert result.exit_code == 2 and "has no scale 'huge'" in result.stderr


def test_list_names_every_experiment_with_its_cost():
    result = CliRunner().invoke(main, ["reproduce", "--list"])
    assert result.exit_code == 0
    for name in PAPER_FIGURES:
        assert name in result.stdout
    fig5 = Experiment.load("fig5").config("paper")
    assert f"{sweep_flops(Protocol.of(fig5)) / 1e15:.3g} PFLOP" in result.stdout


@pytest.mark.slow
def test_reproduce_runs_fits_and_draws_then_reuses_the_run(tmp_path):
    folder, fits, figures = reproduce("regimes", "cpu", tmp_path / "regimes", progress=False, **TINY)
    assert {f.teacher for f in fits} == {"independent", "tied"}
    assert all(f.depths == [4, 8, 16] for f in fits)  # the experiment fits ℓ ≥ 4
    names = {p.name for p in figures}
    assert {"regimes.png", "regimes.pdf", "loss_vs_depth.png", "alpha_vs_step.png"} <= names
    assert json.loads((folder.path / "fit.json").read_text())["protocol"]["steps"] == 20
    assert {"alpha_vs_budget.png", "alpha_vs_budget.pdf"} <= names  # its cpu scale trains at a constant rate
    stamp = (folder.path / "metrics.csv").stat().st_mtime_ns
    with pytest.MonkeyPatch.context() as patch:  # drawn above; what counts now is the reuse
        patch.setattr(
            "toymodels.workflows.experiment_figures.FIGURES",
            {kind: replace(figure, draw=lambda *_: []) for kind, figure in FIGURES.items()},
        )
        reproduce("regimes", "cpu", tmp_path / "regimes", progress=False, **TINY)
    assert (folder.path / "metrics.csv").stat().st_mtime_ns == stamp  # reused, not retrained


def test_the_budget_figure_is_drawn_only_where_the_rate_is_constant(tmp_path, monkeypatch):
    """Under an annealing schedule a run capped early is not this run's prefix: no budget figure."""
    drawn = []
    monkeypatch.setattr(
        "toymodels.workflows.experiment_figures.FIGURES",
        {
            kind: replace(figure, draw=lambda fits, caption, path, kind=kind: drawn.append(kind) or [])
            for kind, figure in FIGURES.items()
        },
    )
    reproduce("regimes", "cpu", tmp_path / "annealed", progress=False, **{**TINY, "schedule": "S"})
    assert drawn == ["regimes", "depth", "training"]


def test_where_and_what_is_kept_is_not_part_of_the_protocol():
    config = Experiment.load("regimes").config("cpu")
    assert config.replace(device="cuda", compile=True, save_students=False).protocol() == config.protocol()
    assert config.replace(seed=1).protocol() != config.protocol()


def test_reproduce_refuses_a_folder_with_another_protocol(tmp_path):
    RunFolder.create(tmp_path / "r", Experiment.load("regimes").config("cpu", **TINY))
    result = CliRunner().invoke(main, ["reproduce", "fig5", "--out", str(tmp_path / "r"), "--device", "cpu"])
    assert result.exit_code == 2 and "another protocol" in result.stderr


def test_unknown_experiment_is_one_line():
    result = CliRunner().invoke(main, ["reproduce", "fig99"])
    assert result.exit_code == 2 and "unknown experiment 'fig99'" in result.stderr


@pytest.mark.slow
def test_correlation_study_draws_alpha_against_rho(tmp_path):
    folder, fits, figures = reproduce(
        "correlation", "cpu", tmp_path / "rho", progress=False, **{**TINY, "depths": [4, 8]}
    )
    assert len(fits) == 4 and (folder.path / "alpha_vs_rho.png").is_file()


@pytest.mark.slow
def test_lns_study_is_drawn_beside_euler_students_of_the_same_protocol_only(tmp_path):
    committed = Path(__file__).resolve().parent.parent / "figures"  # regimes at its own cpu protocol, not TINY's
    _, at_its_protocol = reference_fits("regimes", "cpu", [committed])
    lns = Experiment.load("lns").config("cpu", **TINY)
    assert at_its_protocol.replace(student="lns").protocol() != lns.protocol()  # so it is not drawn beside
    with pytest.MonkeyPatch.context() as patch:  # its fit is what is read; its own figures are another test's
        patch.setattr(
            "toymodels.workflows.experiment_figures.FIGURES",
            {kind: replace(figure, draw=lambda *_: []) for kind, figure in FIGURES.items()},
        )
        reproduce("regimes", "cpu", tmp_path / "regimes-cpu", progress=False, **TINY)
    folder, fits, _ = reproduce("lns", "cpu", tmp_path / "lns-cpu", progress=False, reference=committed, **TINY)
    assert {f.teacher for f in fits} == {"independent", "tied"}
    assert (folder.path / "compared_with_regimes.png").stat().st_size > 1000  # the regimes run beside it
    table = (folder.path / "compared_with_regimes.txt").read_text()
    assert table.count("Δα: lns (lns) − regimes (euler)") == 2  # one per teacher, paired over its replicates


USERS_OWN = """
[experiment]
title = "my sweep"
figures = ["depth"]

[protocol]
teachers = ["tied"]
loss = "mse"

[scales.tiny]
preset = "quick"
depths = [1, 2]
replicates = 1
steps = 20
batch = 16
teacher_depth = 8
test_batches = 1
test_batch_size = 32
evals = 3
device = "cpu"
"""


def test_reproduce_runs_a_users_own_experiment_file(tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text(USERS_OWN)
    result = CliRunner().invoke(
        main, ["reproduce", str(path), "--scale", "tiny", "--out", str(tmp_path / "out"), "--quiet"]
    )
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in (tmp_path / "out").glob("*.png")) == ["loss_vs_depth.png"]  # what it names


def test_a_run_folder_knows_its_experiments_fit_window(tmp_path):
    """`fit` reads a reproduced run over the experiment's window, says so, and --min-depth overrides it."""
    path = tmp_path / "mine.toml"
    path.write_text(
        USERS_OWN.replace('figures = ["depth"]', 'figures = ["depth"]\nfit_min_depth = 2').replace(
            "depths = [1, 2]", "depths = [1, 2, 4]"
        )
    )
    reproduce(path, "tiny", tmp_path / "out", progress=False)
    assert RunFolder.open(tmp_path / "out").experiment() == {
        "name": "mine",
        "title": "my sweep",
        "scale": "tiny",
        "fit_min_depth": 2,
    }
    own = CliRunner().invoke(main, ["fit", str(tmp_path / "out")])
    assert "fit window: ℓ ≥ 2 (the mine experiment's" in own.output and "ℓ=1 " not in own.output
    assert own.output.splitlines()[0] == (tmp_path / "out" / "fit.txt").read_text().splitlines()[0]
    every = CliRunner().invoke(main, ["fit", str(tmp_path / "out"), "--min-depth", "1"])
    assert "ℓ=1 " in every.output and "fit window" not in every.output
    fits = load_fits(tmp_path / "out")  # the table users load is the experiment's fit, not the run's over every depth
    assert set(fits.fit_min_depth) == {2} and set(fits.depths) == {"2 4"} and "loss_depth_1" not in fits
    assert json.loads((tmp_path / "out" / "fit.json").read_text())["window"] == {"min_depth": 2, "max_depth": None}


@pytest.mark.slow
def test_an_experiment_that_starts_from_anothers_students_runs_that_one_first_beside_it(tmp_path):
    (tmp_path / "mine.toml").write_text(USERS_OWN.replace('device = "cpu"', 'device = "cpu"\nsave_students = true'))
    (tmp_path / "warm.toml").write_text(
        USERS_OWN.replace('figures = ["depth"]', 'figures = ["depth"]\nstart_from = "mine.toml"').replace(
            'loss = "mse"', 'loss = "kl"\nstarts = ["zero", "trained"]'
        )
    )
    folder, fits, _ = reproduce(tmp_path / "warm.toml", "tiny", tmp_path / "out" / "warm-tiny", progress=False)
    source = tmp_path / "out" / "mine-tiny"
    assert RunFolder.open(source).finished() and folder.config().start_from == str(source.resolve())
    assert {s["start"] for fit in fits for s in fit.students} == {"zero", "trained"}
    reproduce(tmp_path / "warm.toml", "tiny", tmp_path / "out" / "warm-tiny", progress=False)  # both reused
    assert len(list(tmp_path.glob("out/*"))) == 2


def test_a_grid_split_over_files_is_drawn_whole_by_the_file_drawn_with_the_others(tmp_path, monkeypatch):
    """crossover_high's way: b draws a's fits beside its own once a has run; a's run at another
    protocol (the teachers apart) is an error, not a figure mixing protocols."""
    drawn = {}

    def record(fits, caption, path, kind):
        drawn[kind] = [f.teacher for f in fits], caption
        return []

    monkeypatch.setattr(
        "toymodels.workflows.experiment_figures.FIGURES",
        {
            kind: replace(figure, draw=lambda *drawing, kind=kind: record(*drawing, kind))
            for kind, figure in FIGURES.items()
        },
    )
    mine = USERS_OWN.replace('figures = ["depth"]', 'figures = ["correlation"]')
    (tmp_path / "a.toml").write_text(mine.replace('teachers = ["tied"]', 'teachers = ["correlated(rho=0.5)"]'))
    (tmp_path / "b.toml").write_text(
        mine.replace('teachers = ["tied"]', 'teachers = ["correlated(rho=0.9)"]').replace(
            'figures = ["correlation"]', 'figures = ["correlation"]\ndrawn_with = ["a.toml"]'
        )
    )
    reproduce(tmp_path / "b.toml", "tiny", tmp_path / "runs" / "b-tiny", progress=False)
    assert drawn["correlation"][0] == ["correlated(rho=0.9)"]  # a has not run: b alone
    reproduce(tmp_path / "a.toml", "tiny", tmp_path / "runs" / "a-tiny", progress=False)
    reproduce(tmp_path / "b.toml", "tiny", tmp_path / "runs" / "b-tiny", progress=False)
    teachers, caption = drawn["correlation"]
    assert teachers == ["correlated(rho=0.5)", "correlated(rho=0.9)"] and caption.endswith("beside the fits of a")
    table = pd.read_csv(tmp_path / "runs" / "b-tiny" / "alpha_vs_rho.csv").set_index("rho")  # the figure's numbers
    a_fit = json.loads((tmp_path / "runs" / "a-tiny" / "fit.json").read_text())["fits"][0]
    depths = a_fit["depths"]
    assert table.loc[0.5, "alpha"] == pytest.approx(a_fit["alpha"])
    assert table.loc[0.5, f"slope {depths[0]}→{depths[1]}"] == pytest.approx(a_fit["local_slopes"][0])
    (tmp_path / "a.toml").write_text((tmp_path / "a.toml").read_text().replace("steps = 20", "steps = 21"))
    reproduce(tmp_path / "a.toml", "tiny", tmp_path / "runs" / "a-tiny-21", progress=False)
    (tmp_path / "runs" / "a-tiny").rename(tmp_path / "runs" / "a-tiny-20")
    (tmp_path / "runs" / "a-tiny-21").rename(tmp_path / "runs" / "a-tiny")
    with pytest.raises(ToymodelsError, match="drawn with a, whose tiny run has another protocol"):
        reproduce(tmp_path / "b.toml", "tiny", tmp_path / "runs" / "b-tiny", progress=False)


def test_a_grid_split_by_depth_is_drawn_whole_too(tmp_path, monkeypatch):
    """paper_budget_deep's way: the deep half draws the shallow half's fits beside its own."""
    drawn = {}
    monkeypatch.setattr(
        "toymodels.workflows.experiment_figures.FIGURES",
        {
            kind: replace(figure, draw=lambda fits, caption, path, kind=kind: drawn.__setitem__(kind, fits) or [])
            for kind, figure in FIGURES.items()
        },
    )
    (tmp_path / "shallow.toml").write_text(USERS_OWN)
    (tmp_path / "deep.toml").write_text(
        USERS_OWN.replace("depths = [1, 2]", "depths = [3, 4]").replace(
            'figures = ["depth"]', 'figures = ["depth"]\ndrawn_with = ["shallow.toml"]'
        )
    )
    reproduce(tmp_path / "shallow.toml", "tiny", tmp_path / "runs" / "shallow-tiny", progress=False)
    reproduce(tmp_path / "deep.toml", "tiny", tmp_path / "runs" / "deep-tiny", progress=False)
    assert [fit.depths for fit in drawn["depth"]] == [[1, 2], [3, 4]]


def test_a_runs_gap_to_the_certified_students_of_the_same_teachers_is_measured_student_by_student(tmp_path):
    """paper_loop's way: b's students beside a's fitted (best) ones on the same teacher and depth,
    gap = loss / optimum − 1; nothing before a has run; a's run on other teachers is an error."""
    certified = USERS_OWN.replace('device = "cpu"', 'device = "cpu"\nstarts = ["zero", "discretised"]')
    (tmp_path / "a.toml").write_text(certified.replace("replicates = 1", "replicates = 2"))
    (tmp_path / "b.toml").write_text(
        USERS_OWN.replace('figures = ["depth"]', 'figures = ["depth"]\noptimum_from = "a.toml"')
    )
    runs = tmp_path / "runs"
    folder, fits, figures = reproduce(tmp_path / "b.toml", "tiny", runs / "b-tiny", progress=False)
    assert not (runs / "b-tiny" / "gaps_to_a.csv").exists()  # a has not run
    _, optima, _ = reproduce(tmp_path / "a.toml", "tiny", runs / "a-tiny", progress=False)
    folder, fits, figures = reproduce(tmp_path / "b.toml", "tiny", runs / "b-tiny", progress=False)
    gaps = pd.read_csv(runs / "b-tiny" / "gaps_to_a.csv")
    assert list(gaps["depth"]) == [1, 2] and set(gaps["replicate"]) == {0}  # b's one teacher is a's first
    best = {s["depth"]: s["test_loss"] for s in optima[0].students if s["fitted"] and s["replicate"] == 0}
    mine = {s["depth"]: s["test_loss"] for s in fits[0].students if s["fitted"]}
    for row in gaps.itertuples():
        assert row.optimum_loss == best[row.depth] and row.gap == pytest.approx(mine[row.depth] / best[row.depth] - 1)
    assert runs / "b-tiny" / "gaps_to_a.png" in figures
    assert "optimum: the fitted (best, certified) student of a" in (runs / "b-tiny" / "gaps_to_a.txt").read_text()
    (tmp_path / "b.toml").write_text(
        (tmp_path / "b.toml").read_text().replace("teacher_depth = 8", "teacher_depth = 7")
    )
    with pytest.raises(
        ToymodelsError,
        match="gaps to a, whose tiny run trains other teachers or students "
        r"\(teacher_depth differ\)",
    ):
        reproduce(tmp_path / "b.toml", "tiny", runs / "b-tiny-7", progress=False)
    assert not (runs / "b-tiny-7").exists()  # said before training, not after


@pytest.mark.parametrize(
    "change, message",
    [
        (("[experiment]", '[experiment]\nfigure = "depth"'), "[experiment]: unknown key(s) figure"),
        (('figures = ["depth"]', 'figures = ["depht"]'), "unknown figure(s) depht"),
        (('loss = "mse"', 'loss = "mse"\nstpes = 3'), "unknown config key(s): stpes"),
        (("[protocol]", "[protocoll]"), "unknown key(s) protocoll"),
        (("[scales.tiny]", "[scale.tiny]"), "unknown key(s) scale"),
        (
            ("[experiment]", "[experiment.cost]\ntiny = { minutes = -3 }\n[experiment]"),
            "minutes must be a positive number",
        ),
        (("[experiment]", "[experiment.cost]\ntiny = { minuts = 3 }\n[experiment]"), "unknown key(s) minuts"),
        (("[experiment]", '[experiment.cost]\nhuge = "3 h"\n[experiment]'), "[experiment.cost]: unknown key(s) huge"),
        (("[experiment]", '[experiment]\nclaimed_alpha = { tied = "3" }'), "claimed_alpha must be a table"),
    ],
)
def test_a_typo_in_an_experiment_file_is_one_line_and_exit_2(tmp_path, change, message):
    path = tmp_path / "mine.toml"
    path.write_text(USERS_OWN.replace(*change))
    for command in (["reproduce", str(path), "--scale", "tiny"], ["run", "--config", str(path), "--scale", "tiny"]):
        result = CliRunner().invoke(main, [*command, "--out", str(tmp_path / "never")])
        assert result.exit_code == 2 and message in result.stderr, result.output
        assert len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "never").exists()


def test_the_paper_budget_runs_are_fig5s_protocol_field_by_field():
    """The paper's Fig. 5 loop at its own budget, split by depth: zero start, MSE, 80 000 × 1024, S,
    6e-4·2/√ℓ, ℓ 6–48 over the two parts, on paper_depths' first tied teacher."""
    parts = [Experiment.load(name).config("cpu") for name in ("paper_budget", "paper_budget_deep")]
    paper_depths = Experiment.load("paper_depths").config("cpu")
    for config in parts:
        assert config.starts == ("zero",) and config.loss == "mse" and config.student == "euler"
        assert (config.steps, config.batch, config.schedule) == (80_000, 1024, "S")
        assert all(config.student_lr(depth) == pytest.approx(6e-4 * 2 / depth**0.5) for depth in config.depths)
        assert not config.converge and config.polish_batch == 0 and config.teacher_pool == 0  # fresh samples
        assert config.teachers == ("tied",) and config.replicates == 1 and config.save_students
        assert (config.teacher_depth, config.width, config.seed) == (128, 32, paper_depths.seed)
        assert (
            paper_depths.teacher_instances[paper_depths.teachers.index("tied") * paper_depths.replicates]
            == config.teacher_instances[0]
        )  # the same (teacher, replicate): the same weights from the same seed
    assert sorted(parts[0].depths + parts[1].depths) == [6, 12, 16, 24, 32, 48]


def test_redraw_draws_the_figures_again_from_the_fit_alone(tmp_path):
    from toymodels.plotting.style import figure_caption

    path = tmp_path / "mine.toml"
    path.write_text(USERS_OWN)
    out = tmp_path / "out"
    reproduce(path, "tiny", out, progress=False)
    (out / "loss_vs_depth.png").unlink()
    fit_json, metrics = (out / "fit.json").read_bytes(), (out / "metrics.csv").read_bytes()
    result = CliRunner().invoke(main, ["reproduce", str(path), "--scale", "tiny", "--out", str(out), "--redraw"])
    assert result.exit_code == 0, result.output
    assert figure_caption(out / "loss_vs_depth.png").startswith("mine, tiny scale")  # the protocol, in its metadata
    assert (out / "fit.json").read_bytes() == fit_json and (out / "metrics.csv").read_bytes() == metrics
    missing = CliRunner().invoke(
        main, ["reproduce", str(path), "--scale", "tiny", "--out", str(tmp_path / "none"), "--redraw"]
    )
    assert missing.exit_code == 2 and "is not a folder" in missing.output


def test_the_list_resolves_the_shipped_examples_from_anywhere_and_names_a_plugin_that_is_not_here(
    tmp_path, monkeypatch
):
    """rk4 names examples/rk4_student.py: from elsewhere (an installed wheel's user) it is the shipped
    example; a plug-in file that is nowhere is named, and the list goes on."""
    import toymodels.registry
    from toymodels.workflows.reproduce import describe_experiments

    monkeypatch.chdir(tmp_path)
    assert "not resolvable" not in describe_experiments()
    monkeypatch.setattr(toymodels.registry, "plugin_file", Path)  # as if the package shipped no examples
    listing = describe_experiments()
    assert "not resolvable here: cannot load student 'examples/rk4_student.py:rk4'" in listing
    assert "regimes" in listing
