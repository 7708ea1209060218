"""The CLI as a user meets it: one real run end to end, and every bad input answered in one line."""

import json
import math
import os
import re
import subprocess
import sys

import pandas as pd
import pytest
from click.testing import CliRunner

from toymodels.cli.main import main
from toymodels.errors import ToymodelsError

TINY = [
    "--preset",
    "quick",
    "--teacher",
    "tied",
    "--temps",
    "0.5,1.0",
    "--depths",
    "1,2,4",
    "--teacher-depth",
    "8",
    "--steps",
    "40",
    "--batch",
    "32",
    "--replicates",
    "2",
    "--device",
    "cpu",
    "--quiet",
]


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """One real `toymodels run`, as a user would type it (test_jobs runs it in processes of its own)."""
    out = tmp_path_factory.mktemp("runs") / "tiny"
    done = CliRunner().invoke(main, ["run", *TINY, "--save-students", "--out", str(out)])
    assert done.exit_code == 0, done.output
    assert "no checksums.json" not in done.output  # a new run records its tables: no note about old runs
    return out, done.stdout


def test_run_prints_the_table_and_writes_the_results_folder(tiny_run):
    out, stdout = tiny_run
    assert "α_ℓ" in stdout and "95% interval" in stdout and "protocol:" in stdout
    assert len([line for line in stdout.splitlines() if line.startswith("tied ")]) == 2
    for name in ("config.json", "metrics.csv", "fit.txt", "fit.json", "fits.csv", "students.pt"):
        assert (out / name).is_file(), name
    metrics = pd.read_csv(out / "metrics.csv")
    assert {"teacher", "replicate", "temperature", "depth", "step", "train_loss", "test_loss"} <= set(metrics)
    assert metrics.groupby(["replicate", "temperature", "depth"]).ngroups == 2 * 2 * 3
    assert metrics.step.max() == 40 and (metrics.test_loss > 0).all()


@pytest.mark.slow
def test_config_json_reruns_the_same_numbers(tiny_run, tmp_path):
    out, _ = tiny_run
    result = CliRunner().invoke(
        main, ["run", "--config", str(out / "config.json"), "--quiet", "--out", str(tmp_path / "again")]
    )
    assert result.exit_code == 0, result.output
    first, again = (pd.read_csv(p / "metrics.csv") for p in (out, tmp_path / "again"))
    pd.testing.assert_frame_equal(first, again)


def test_fit_json_and_table(tiny_run):
    out, _ = tiny_run
    result = CliRunner().invoke(main, ["fit", str(out), "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["protocol"]["steps"] == 40 and len(document["fits"]) == 2
    fit = document["fits"][0]
    assert {"alpha", "alpha_low", "alpha_high", "local_slopes", "floor_fit", "certified", "alpha_over_training"} <= set(
        fit
    )
    assert fit["alpha_low"] <= fit["alpha"] <= fit["alpha_high"]
    table = CliRunner().invoke(main, ["fit", str(out), "--min-depth", "2"])
    assert table.exit_code == 0 and "local slopes" in table.stdout and "ℓ=1 " not in table.stdout


def test_fit_and_plot_read_a_run_as_stopped_at_an_earlier_budget(tiny_run, tmp_path):
    out, _ = tiny_run
    steps = sorted(pd.read_csv(out / "metrics.csv").step.unique())
    budget = steps[-3]  # an evaluation step before the end
    document = json.loads(CliRunner().invoke(main, ["fit", str(out), "--json", "--budget", str(budget)]).stdout)
    assert document["protocol"]["steps"] == budget and all(fit["steps"] == budget for fit in document["fits"])
    drawn = CliRunner().invoke(main, ["plot", str(out), "--budget", str(budget), "--out", str(tmp_path)])
    assert drawn.exit_code == 0, drawn.output
    wrong = CliRunner().invoke(main, ["fit", str(out), "--budget", str(budget + 1)])
    assert wrong.exit_code == 2 and len(wrong.output.strip().splitlines()) == 1
    assert f"not an evaluation step of {out}; the nearest: {budget}, " in wrong.output


@pytest.mark.slow
def test_plot_writes_png_and_pdf(tiny_run, tmp_path):
    out, _ = tiny_run
    result = CliRunner().invoke(main, ["plot", str(out), "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    for name in ("loss_vs_depth", "alpha_vs_temperature", "alpha_vs_step"):
        for suffix in (".png", ".pdf"):
            assert (tmp_path / (name + suffix)).stat().st_size > 1000


def test_help_lists_every_command():
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0
    for command in ("run", "fit", "plot"):
        assert command in result.stdout
    assert "--temps" in CliRunner().invoke(main, ["run", "--help"]).stdout


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--teacher", "wobbly"], "unknown teacher 'wobbly'"),
        (["--temps", "0.1,abc"], "temperatures must be comma-separated floats"),
        (["--temps", "0,1"], "temperatures must be positive"),
        (["--temps", "-0.5"], "temperatures must be positive"),
        (["--temps", ","], "no temperature given"),
        (["--depths", "0,4"], "depths must be between 1 and 1e+12"),
        (["--depths", ""], "no depth given"),
        (["--depths", "2,x"], "depths must be comma-separated ints"),
        (["--steps", "0"], "steps must be between 1 and 1e+12"),
        (["--steps", str(10**22)], "steps must be between 1 and 1e+12"),
        (["--batch", "-3"], "batch must be between 1 and 1e+12"),
        (["--teacher", ""], "no teacher given"),
        (["--preset", "huge"], "huge"),
        (["--config", "/nonexistent/config.toml"], "cannot read config"),
        (["--temps", "inf"], "temperatures must be finite"),
        (["--temps", "1e400"], "temperatures must be finite"),
        (["--seed", "-3"], "seed must be a whole number ≥ 0"),
        (["--teacher-pool", "3"], "teacher pool must be 0 (fresh samples) or at least the batch"),
        (["--preset", "quick", "--start", "zero,trained"], "the trained start and --start-from RUN"),
        (["--start", "trained", "--start-from", "/", "--pretrain-loss", "none"], "cannot read config /config.json"),
        (["--start-from", "/"], "this protocol trains its own first (on mse): add --pretrain-loss none"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(arguments, message, tmp_path):
    result = CliRunner().invoke(main, ["run", *arguments, "--out", str(tmp_path / "never")])
    assert result.exit_code == 2, result.output
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.output
    assert not (tmp_path / "never").exists()


def test_unwritable_output_folder(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    if os.access(locked, os.W_OK):  # root ignores permissions: use a path under a file instead
        target = tmp_path / "a_file"
        target.write_text("")
        out = target / "run"
    else:
        out = locked / "run"
    result = CliRunner().invoke(main, ["run", *TINY, "--out", str(out)])
    assert result.exit_code == 2 and "cannot write the results folder" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_existing_run_is_kept(tiny_run):
    """The same protocol into a finished run's folder trains nothing and prints its table;
    another protocol is refused."""
    out, stdout = tiny_run
    before = (out / "metrics.csv").read_text()
    again = CliRunner().invoke(main, ["run", *TINY, "--out", str(out)])
    assert again.exit_code == 0 and again.stdout.split("results:")[0] == stdout.split("results:")[0]
    other = CliRunner().invoke(main, ["run", *TINY, "--steps", "41", "--out", str(out)])
    assert other.exit_code == 2 and "holds a run of another protocol" in other.stderr
    assert (out / "metrics.csv").read_text() == before


@pytest.mark.parametrize("command", ["fit", "plot"])
def test_fit_and_plot_refuse_a_folder_that_is_not_a_run(command, tmp_path):
    result = CliRunner().invoke(main, [command, str(tmp_path)])
    assert result.exit_code == 2 and "not a toymodels results folder" in result.stderr
    missing = CliRunner().invoke(main, [command, str(tmp_path / "missing")])
    assert missing.exit_code == 2 and "is not a folder" in missing.stderr


@pytest.mark.parametrize(
    "line, message",
    [
        ('steps = "three"', "steps must be a whole number, got 'three'"),
        ("depths = [2, 4.5]", "depths must be a list of whole numbers"),
        ("lr = nan", "lr must be finite"),
    ],
)
def test_a_wrongly_typed_config_value_is_one_line(line, message, tmp_path):
    config = tmp_path / "mine.toml"
    config.write_text(line + "\n")
    result = CliRunner().invoke(main, ["run", "--config", str(config), "--out", str(tmp_path / "never")])
    assert result.exit_code == 2 and message in result.stderr, result.output
    assert len(result.stderr.strip().splitlines()) == 1 and not (tmp_path / "never").exists()


def test_a_run_says_where_it_came_from(tiny_run):
    import toymodels
    from toymodels.results.provenance import provenance_line

    out, _ = tiny_run
    sessions = json.loads((out / "provenance.json").read_text())["sessions"]
    assert len(sessions) == 1
    session = sessions[0]
    assert {
        "toymodels",
        "git_commit",
        "git_dirty",
        "python",
        "torch",
        "numpy",
        "device",
        "device_name",
        "host",
        "started",
        "finished",
        "stages",
    } <= set(session)
    assert session["toymodels"] == toymodels.__version__ and session["device"] == "cpu"  # the device used, not "auto"
    assert session["stages"]["sweep"] > 0 and "fit" in session["stages"] and session["finished"] >= session["started"]
    fitted = CliRunner().invoke(main, ["fit", str(out)])
    assert provenance_line(json.loads((out / "provenance.json").read_text())) in fitted.stdout


def test_the_fits_a_user_loads_are_the_table_the_run_printed(tiny_run):
    from toymodels import load_fits

    out, stdout = tiny_run
    fits = load_fits(out)
    document = json.loads((out / "fit.json").read_text())
    assert list(fits.alpha) == pytest.approx([fit["alpha"] for fit in document["fits"]])
    for row in fits.itertuples():
        assert f"{row.alpha:.2f}" in stdout and f"[{row.alpha_low:.2f}, {row.alpha_high:.2f}]" in stdout
    assert set(fits.fit_min_depth) == {1} and set(fits.depths) == {"1 2 4"} and set(fits.loss) == {"kl"}


def test_show_config_prints_toml_that_config_reads_back(tmp_path):
    from toymodels.config import resolve_config

    shown = CliRunner().invoke(
        main,
        ["run", "--teacher", "tied,independent", "--depth-lr", "16=0.01", "--set", "race_margin=0.3", "--show-config"],
    )
    assert shown.exit_code == 0, shown.output
    (tmp_path / "shown.toml").write_text(shown.stdout)
    again = CliRunner().invoke(main, ["run", "--config", str(tmp_path / "shown.toml"), "--show-config"])
    assert again.stdout == shown.stdout
    config = resolve_config("quick", tmp_path / "shown.toml")
    assert (config.teachers, config.depth_lr, config.race_margin, config.pretrain_loss) == (
        ("tied", "independent"),
        ((16, 0.01),),
        0.3,
        "mse",
    )  # the certified preset's, and what was set
    assert shown.stdout.startswith('preset = "certified"')  # the base it was built from
    unset = (
        CliRunner().invoke(main, ["run", "--pretrain-loss", "none", "--start", "discretised", "--show-config"]).stdout
    )
    assert not unset.startswith('preset = "certified"')  # certified sets the pretrain: the base must not
    (tmp_path / "unset.toml").write_text(unset)
    assert resolve_config("certified", tmp_path / "unset.toml").pretrain_loss is None
    assert not list(tmp_path.glob("runs*")) and not os.path.exists("runs/shown")


def test_set_reaches_a_key_no_option_has_and_bad_settings_are_one_line():
    shown = CliRunner().invoke(
        main, ["run", "--set", "head_lr_depth_scaled=true", "--set", "race_from_step=500", "--show-config"]
    )
    assert "head_lr_depth_scaled = true" in shown.stdout and "race_from_step = 500" in shown.stdout
    for bad, said in (
        (["--set", "no_such_key=1"], "unknown config key(s): no_such_key"),
        (["--set", "race_margn=0.3"], "race_margn (did you mean race_margin?)"),
        (["--set", "race_margin"], "write KEY=VALUE"),
        (["--set", "race_margin=fast"], "race_margin must be"),
    ):
        result = CliRunner().invoke(main, ["run", *bad, "--show-config"])
        assert result.exit_code == 2 and said in result.output and "Traceback" not in result.output


def test_version_and_full_command_summaries():
    import toymodels

    assert CliRunner().invoke(main, ["--version"]).stdout.strip() == f"toymodels {toymodels.__version__}"
    listing = CliRunner().invoke(main, ["--help"]).stdout
    commands = listing.partition("Commands:")[2]
    assert "run " in commands and "..." not in commands  # no summary cut mid-sentence
    run_help = " ".join(CliRunner().invoke(main, ["run", "--help"]).stdout.split())  # as read, not as wrapped
    assert "[certified preset: 20000]" in run_help and "[certified preset: trained]" in run_help


def test_a_single_depth_is_refused_before_training(tmp_path):
    result = CliRunner().invoke(main, ["run", "--depths", "4", "--out", str(tmp_path / "one")])
    assert result.exit_code == 2 and "two or more with --depths" in result.output
    assert not (tmp_path / "one").exists()


def test_without_a_terminal_progress_is_plain_lines(tmp_path, monkeypatch, capfd):
    from toymodels.workflows import parallel

    monkeypatch.setattr(parallel, "LINE_EVERY_SECONDS", 0)
    result = CliRunner().invoke(
        main,
        [
            "run",
            *[a for a in TINY if a != "--quiet"],
            "--depths",
            "1,2",
            "--replicates",
            "1",
            "--out",
            str(tmp_path / "logged"),
        ],
    )
    assert result.exit_code == 0, result.output
    logged = result.stderr + capfd.readouterr().err
    assert "steps (100%) after" in logged and "\r" not in logged and "\x1b[" not in logged


def test_every_config_field_is_a_run_option_with_the_certified_value():
    """The options are generated from the fields: each field is one option of that name, with its
    declared meaning as help and the certified preset's value beside it."""
    import dataclasses

    from toymodels.cli.run import run
    from toymodels.config import PRESETS, SweepConfig

    options = {param.name: param for param in run.params}
    for field in dataclasses.fields(SweepConfig):
        assert field.name in options, field.name
        assert options[field.name].help.startswith(field.metadata["meaning"]), field.name
        value = getattr(PRESETS["certified"], field.name)
        assert value is None or field.name == "device" or "[certified preset: " in options[field.name].help


def test_a_new_field_is_validated_and_on_the_command_line_with_no_other_edit():
    """Declaring a field is all it takes: its range is checked with one clear line, and the command
    line takes it, typed, with its meaning as help."""
    import dataclasses

    import click

    from toymodels.cli.options import config_options
    from toymodels.config import SweepConfig, validate
    from toymodels.settings import MAX_COUNT, setting

    Extended = dataclasses.make_dataclass(
        "Extended",
        [
            ("warmup_steps", int, setting(0, "Steps of linear warm-up.", low=0, high=MAX_COUNT)),
            ("label_noise", tuple[float, ...], setting((0.0,), "Noise levels, comma-separated.", low=0, high=1)),
        ],
        bases=(SweepConfig,),
        frozen=True,
    )
    with pytest.raises(ToymodelsError, match="warmup steps must be a whole number ≥ 0, got -5"):
        validate(Extended(warmup_steps=-5))
    with pytest.raises(ToymodelsError, match="label noise must be between 0 and 1, got"):
        validate(Extended(label_noise=(0.1, 2.0)))

    @click.command()
    def probe(**fields):
        click.echo(f"{fields['warmup_steps']!r} {fields['label_noise']!r}")

    from unittest.mock import patch

    with patch("toymodels.cli.options.SweepConfig", Extended):
        command = config_options(probe)
    result = CliRunner().invoke(command, ["--warmup-steps", "200", "--label-noise", "0.1,0.2"])
    assert result.exit_code == 0 and result.output.strip() == "200 (0.1, 0.2)"
    assert "Steps of linear warm-up." in CliRunner().invoke(command, ["--help"]).output
    assert CliRunner().invoke(command, ["--warmup-steps", "many"]).exit_code == 2


def test_a_stage_takes_every_declared_reset():
    """A stage trained inside a run (pretrain, polish, rung) runs no stages of its own and keeps its
    students: its config is the run's with each field's declared `stage_reset`."""
    from toymodels.config import PRESETS

    run = PRESETS["certified"].replace(polish_batch=1024, budget_rungs=(2, 4))
    stage = run.stage(steps=5, starts=("discretised",))
    assert (
        stage.pretrain_loss,
        stage.polish_batch,
        stage.budget_doubling,
        stage.budget_rungs,
        stage.save_students,
    ) == (None, 0, False, (), True)
    assert stage.steps == 5 and stage.lr == run.lr


def test_the_help_lists_the_registries_built_in_names_as_they_are():
    """In a fresh interpreter: a worker that read a committed run of a plug-in holds its names too."""
    import subprocess
    import sys

    from toymodels.cli.options import BUILT_IN_NAMES

    listing = subprocess.run(
        [
            sys.executable,
            "-c",
            (
                "import json; from toymodels import LOSSES, OPTIMIZERS, SCHEDULES, STARTS, STUDENTS, TEACHERS; "
                "print(json.dumps({'teacher': list(TEACHERS), 'student': list(STUDENTS), 'loss': list(LOSSES), "
                "'start': list(STARTS), 'schedule': list(SCHEDULES), 'optimizer': list(OPTIMIZERS)}))"
            ),
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert {kind: tuple(names) for kind, names in json.loads(listing).items()} == BUILT_IN_NAMES


@pytest.mark.parametrize("command", [["--help"], ["run", "--help"], ["--version"]])
def test_the_help_starts_without_the_training_stack(command):
    """`toymodels --help` and `run --help` import neither torch nor pandas: they start in a fraction
    of a second (the command's own module loads when it runs)."""
    probe = (
        "import sys\nfrom toymodels.cli.main import main\n"
        f"try:\n    main({command!r})\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in ('torch', 'pandas', 'matplotlib', 'scipy') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip().splitlines()[-1] == "[]"


def invalid_values(field):
    """Values that break `field`'s own declaration, one per rule it declares (as scikit-learn
    generates invalid parameter values from its constraints): a wrong type, a non-finite number,
    each bound crossed, a choice not offered, a repeated item, an empty list."""
    import math
    import typing

    rules, kind = field.metadata, field.type
    options = typing.get_args(kind) if typing.get_origin(kind) is not tuple else (kind,)
    item = next((option for option in options if option is not type(None)), kind)
    listed = typing.get_origin(item) is tuple
    element = typing.get_args(item)[0] if listed else item
    wrap = (lambda value: (value,)) if listed else (lambda value: value)
    values = [wrap(object()) if element is not str else wrap(3), "text" if listed else [1, 2]]
    if element in (int, float):
        values += [wrap(math.nan)] if element is float else [wrap(2.5)]
        if rules["low"] is not None:
            values.append(wrap(rules["low"] - 1))
        if rules["high"] is not None:
            values.append(wrap(rules["high"] + 1))
        if rules["positive"]:
            values.append(wrap(0))
        if rules["below"] is not None:
            values.append(wrap(rules["below"]))
    if rules["choices"]:
        values.append("no-such-choice")
    if rules["distinct"]:
        values.append({int: (2, 2), float: (0.5, 0.5)}.get(element, ("zero", "zero")))
    if rules["empty"]:
        values.append(())
    return values


@pytest.mark.parametrize(
    "options, message",
    [
        (["--temps", "0.1,0.1"], "temperatures must be distinct, got [0.1, 0.1]"),
        (["--teacher", "tied,tied"], "teachers must be distinct"),
        (["--depths", "2,4,4"], "depths must be distinct"),
    ],
)
def test_inputs_that_mean_nothing_are_refused_in_one_line_before_anything_is_written(tmp_path, options, message):
    result = CliRunner().invoke(main, ["run", "--preset", "quick", *options, "--out", str(tmp_path / "run")])
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1, result.output
    assert message in result.output and not (tmp_path / "run").exists()


def test_every_config_field_refuses_each_invalid_value_in_one_line_naming_it():
    import dataclasses

    from toymodels.config import SweepConfig

    checked = 0
    for field in dataclasses.fields(SweepConfig):
        for value in invalid_values(field):
            with pytest.raises(ToymodelsError) as refused:
                SweepConfig().replace(**{field.name: value})
            message = str(refused.value)
            named = field.name.replace("_", " ").removesuffix("s")  # "no teacher given" names teachers
            assert "\n" not in message and named in message.replace("_", " "), (field.name, value, message)
            checked += 1
    assert checked >= 3 * len(dataclasses.fields(SweepConfig))


@pytest.mark.slow
def test_a_student_deeper_than_its_teacher_is_named_so_and_its_gap_reads_as_a_ratio(tmp_path):
    """The paper's teacher24 trains students up to ℓ 48 on a 24-layer teacher: allowed, and said."""
    options = "--preset quick --teacher tied --temps 1.0 --depths 2,4,16 --teacher-depth 8 --steps 40 --batch 32"
    result = CliRunner().invoke(main, ["run", *options.split(), "--replicates", "2", "--quiet", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "ℓ=16: deeper than the teacher (8 layers)" in result.output
    assert not re.search(r"\d{5,}%", result.output)  # a gap of 10 000 % or more reads as ×N


def test_a_gap_of_ten_thousand_percent_or_more_reads_as_how_many_times_the_best_it_is():
    from toymodels.results.report import _percent

    gaps = (0.04, 14.53, 99.4, 45204.19, math.inf, None)
    assert [_percent(gap) for gap in gaps] == ["4%", "1453%", "9940%", "×45205", "∞", "—"]
