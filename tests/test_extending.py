"""One place per idea: a new loss or architecture is one definition; every built-in loss is the
plain PyTorch formula; the config is a leaf that validates values without the training stack."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from click.testing import CliRunner

from toymodels.cli.main import main
from toymodels.config import SweepConfig
from toymodels.models.losses import LOSSES, loss_named
from toymodels.models.starts import STARTS
from toymodels.models.students import STUDENTS
from toymodels.models.teachers import TEACHERS
from toymodels.training.optim import SCHEDULES

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
TINY = [
    "--preset",
    "quick",
    "--teacher",
    "tied",
    "--depths",
    "1,2",
    "--teacher-depth",
    "8",
    "--steps",
    "40",
    "--batch",
    "32",
    "--replicates",
    "1",
    "--device",
    "cpu",
    "--quiet",
]


def falls(out: Path) -> bool:
    metrics = pd.read_csv(out / "metrics.csv")
    first, last = (metrics[metrics.step == step].test_loss.to_numpy() for step in (1, metrics.step.max()))
    return bool((last < first).all())


@pytest.mark.parametrize(
    "option",
    [
        ["--loss", f"{EXAMPLES / 'custom_loss.py'}:cosine"],
        ["--loss", "mse", "--student", f"{EXAMPLES / 'custom_student.py'}:heun"],
        ["--loss", "mse", "--student", f"{EXAMPLES / 'leapfrog_student.py'}:leapfrog"],
        ["--loss", "mse", "--student", f"{EXAMPLES / 'rk4_student.py'}:rk4"],
        ["--loss", "mse", "--teacher", f"{EXAMPLES / 'heavy_ball_teacher.py'}:heavy_ball"],
    ],
)
def test_the_worked_examples_train_from_the_cli(option, tmp_path, registries):
    result = CliRunner().invoke(main, ["run", *TINY, *option, "--out", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    assert falls(tmp_path / "run")


def test_the_readme_example_registers_and_trains_a_loss(tmp_path, monkeypatch):
    """The docs' Python example of a registered loss (docs/extending.md) runs as written."""
    page = (Path(__file__).resolve().parent.parent / "docs" / "extending.md").read_text()
    code = next(block for block in re.findall(r"```python\n(.*?)```", page, re.S) if "@register_loss" in block)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(LOSSES, "cosine", None)  # so that the example's registration is undone afterwards
    exec(compile(code, "docs/extending.md", "exec"), {})
    assert falls(next((tmp_path / "runs").iterdir()))


def test_a_heun_student_costs_two_mlp_calls_per_block(registries):
    heun = STUDENTS.lookup(f"{EXAMPLES / 'custom_student.py'}:heun")  # the name its decorator registers
    assert heun.matmul_flops_per_layer(32) == 2 * STUDENTS["euler"].matmul_flops_per_layer(32)
    assert heun.weights_per_layer(32) == STUDENTS["euler"].weights_per_layer(32)
    assert heun.order == 2  # Heun's method: the verdict judges it against α ≥ 4, its midpoint 2.5


@pytest.mark.parametrize("order", [0, 2.0, "2", True, 9, None])
def test_a_student_registered_without_a_valid_order_is_refused_in_one_line(registries, tmp_path, order):
    plugin = tmp_path / "bad_order.py"
    plugin.write_text(
        "from toymodels import register_student\nfrom toymodels.models.blocks import euler_block\n"
        f"register_student('bad'{'' if order is None else f', order={order!r}'})(euler_block)\n"
    )
    result = CliRunner().invoke(
        main,
        ["run", "--preset", "quick", "--student", f"{plugin}:bad", "--depths", "1,2", "--out", str(tmp_path / "run")],
    )
    assert result.exit_code == 2, result.output
    assert (
        "declares no order: set `order = N` on its class or register it with order=N"
        if order is None
        else "order must be a whole number from 1 to 8"
    ) in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "run").exists()


PLUGINS = """
import math
import torch
from toymodels import (StudentStart, register_loss, register_schedule, register_start, register_student,
                       register_teacher)
from toymodels.models.losses import Loss
from toymodels.models.weights import default_layers


@register_teacher("halved")
def halved(depth, width, generator):
    layers = default_layers(depth, width, generator)
    return type(layers)(layers.w_in / 2, layers.b_in, layers.w_out)


@register_student("plain", order=1)
def plain(h, field):
    return h + field(h)


@register_loss("absolute")
class Absolute(Loss):
    uses_temperature = False

    def losses(self, readout, targets, student_head, teacher_head, instances, temperatures):
        return (readout - targets).abs().mean((-1, -2))


@register_start("small")
def small(protocol, spec, generator):
    layers = default_layers(spec.depth, protocol.config.width, generator)
    return StudentStart(type(layers)(layers.w_in, layers.b_in, layers.w_out * 0.01))


@register_schedule("halfway")
def halfway(step, total_steps):
    return torch.where(step < total_steps / 2, 1.0, 0.5)
"""


def test_one_plugin_of_each_kind_from_outside_the_package_trains_a_sweep(registries, tmp_path):
    from toymodels import resolve_config, run_sweep

    plugins = tmp_path / "plugins.py"
    plugins.write_text(PLUGINS)
    config = resolve_config(
        "quick",
        teachers=[f"{plugins}:halved"],
        student=f"{plugins}:plain",
        loss=f"{plugins}:absolute",
        starts=[f"{plugins}:small"],
        schedule=f"{plugins}:halfway",
        depths=[1, 2],
        teacher_depth=8,
        steps=40,
        batch=32,
        replicates=1,
        device="cpu",
    )
    folder = run_sweep(config, tmp_path / "run", progress=False)
    assert falls(folder.path)
    # looked up, not left registered: the next run's names are the package's own
    assert not {"halved", "plain", "absolute", "small", "halfway"} & {
        *TEACHERS,
        *STUDENTS,
        *LOSSES,
        *STARTS,
        *SCHEDULES,
    }


@pytest.mark.parametrize("name", ["kl", "kl-fixed-head", "mse"])
def test_every_loss_is_the_plain_pytorch_formula(name):
    """The population's loss, one student at a time, against F.kl_div / F.mse_loss written out."""
    generator = torch.Generator().manual_seed(0)
    config = SweepConfig().replace(loss=name, width=8, vocab=16, temperatures=[0.3, 1.0])
    loss = loss_named(name)
    heads = [loss.teacher_head(config, generator) for _ in range(2)]
    teacher_head = None if heads[0] is None else torch.stack(heads)
    readout_t, readout_s = (F.rms_norm(torch.randn(2, 5, 8, generator=generator), (8,)) for _ in range(2))
    student_head = torch.randn(2, 8, 16, generator=generator)
    temperatures = torch.tensor([0.3, 1.0])
    instances, temperature_index = torch.tensor([1, 0]), torch.tensor([0, 1])
    targets = loss.teacher_targets(readout_t, teacher_head, temperatures)
    rows = loss.target_rows(instances, temperature_index, 2)
    got = loss.losses(
        readout_s, targets[rows], student_head, teacher_head, instances, temperatures[temperature_index].view(-1, 1, 1)
    )
    for m, (i, t) in enumerate(zip(instances, temperatures[temperature_index])):
        if name == "mse":
            expected = F.mse_loss(readout_s[m], readout_t[i])
        else:
            teacher = F.log_softmax(readout_t[i] @ teacher_head[i] / t, -1)
            logits = readout_s[m] @ (student_head[m] if name == "kl" else teacher_head[i] / t)
            expected = F.kl_div(F.log_softmax(logits, -1), teacher, reduction="batchmean", log_target=True)
        assert got[m].item() == pytest.approx(expected.item(), rel=1e-6)


def test_a_plugin_that_is_not_a_loss_is_one_line(tmp_path):
    plugin = tmp_path / "notaloss.py"
    plugin.write_text("wrong = 42\n")
    result = CliRunner().invoke(main, ["run", *TINY, "--loss", f"{plugin}:wrong", "--out", str(tmp_path / "run")])
    assert result.exit_code == 2 and "is a int, not a toymodels Loss" in result.stderr
    assert not (tmp_path / "run").exists()  # refused before anything was written


def test_config_is_a_leaf_that_checks_values_without_the_training_stack():
    probe = (
        "import json, sys, toymodels.config as c\n"
        "c.resolve_config('quick', steps=10)\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('toymodels') or m == 'torch')))"
    )
    modules = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert json.loads(modules) == [
        "toymodels",
        "toymodels.api",
        "toymodels.config",
        "toymodels.errors",
        "toymodels.settings",
        "toymodels.version",
    ]  # api: the export table, no import


def test_no_module_imports_one_below_it_in_the_design_pages_module_table():
    """Data flows one way: the design page lists the modules in that order, folder by folder, and
    the imports obey it (a folder's __init__ only describes it, or re-exports from below it)."""
    root = Path(__file__).resolve().parent.parent
    package = root / "toymodels"
    section = (root / "docs" / "design.md").read_text()
    table = section.split("| module | part |", 1)[1].split("\n\n", 1)[0]
    order = [
        name
        for row in table.splitlines()
        if row.startswith("| `")
        for name in re.findall(r"`([\w/]+)\.py`", row.split("|")[1])
    ]
    modules = {
        path.relative_to(package).with_suffix("").as_posix()
        for path in package.rglob("*.py")
        if path.stem not in ("__init__", "__main__")
    }
    assert sorted(order) == sorted(modules)  # every module has its row
    for module in order:
        folder = module.split("/")[:-1]
        source = (package / f"{module}.py").read_text()
        for dots, name, first in re.findall(r"^from (\.+)([\w.]*) import (\w+)", source, re.MULTILINE):
            # `from .. import api` imports the module api; `from ..api import x`, api too
            imported = "/".join([*folder[: len(folder) - (len(dots) - 1)], *(name.split(".") if name else [first])])
            assert order.index(imported) < order.index(module), f"{module} imports {imported}, listed below it"


def test_a_run_keeps_its_plugins_source_and_every_version_a_resume_trains_with(registries, tmp_path):
    """A run folder reproduces alone: every plug-in file its config names is copied into plugins/
    with its SHA-256; a resume after the file changed (the fix of a failed job) keeps the new
    version beside the old, with the jobs that finished before it, and says so."""
    import hashlib
    import json

    from toymodels import resolve_config, run_sweep
    from toymodels.results.storage import RunFolder

    plugins = tmp_path / "plugins.py"
    plugins.write_text(PLUGINS)
    config = resolve_config(
        "quick",
        teachers=[f"{plugins}:halved"],
        depths=[1, 2],
        teacher_depth=8,
        steps=20,
        batch=16,
        replicates=1,
        device="cpu",
    )
    folder = run_sweep(config, tmp_path / "run", progress=False)
    record_file = folder.path / "plugins" / "plugins.json"
    [entry] = json.loads(record_file.read_text())[f"{plugins}:halved"]
    assert entry["sha256"] == hashlib.sha256(PLUGINS.encode()).hexdigest() and entry["jobs_finished_before"] == []
    assert (folder.path / entry["copy"]).read_text() == PLUGINS
    (folder.path / RunFolder.METRICS).unlink()  # as if its one job had been left to finish
    done = folder.job(folder.job_names()[0]).path / "done.json"
    done.unlink()
    plugins.write_text(PLUGINS + "\n# edited\n")
    said = []
    run_sweep(config, tmp_path / "run", progress=False, echo=said.append)
    old, new = json.loads(record_file.read_text())[f"{plugins}:halved"]
    assert old == entry and new["sha256"] == hashlib.sha256((PLUGINS + "\n# edited\n").encode()).hexdigest()
    assert (folder.path / new["copy"]).read_text().endswith("# edited\n")
    assert any("has changed since" in line for line in said)


def test_the_extending_page_names_every_built_in_schedule_and_the_teachers_weight_layout():
    from toymodels import SCHEDULES
    from toymodels.models.weights import default_layers

    page = (Path(__file__).resolve().parent.parent / "docs" / "extending.md").read_text()
    assert all(f"- `{name}`:" in page for name in SCHEDULES)
    layers = default_layers(3, 8, torch.Generator())
    shapes = [tuple(getattr(layers, name).shape) for name in ("w_in", "b_in", "w_out")]
    assert shapes == [(3, 8, 32), (3, 1, 32), (3, 32, 8)]  # as the page lays them out
    assert "`w_in` (depth, width, 4·width), `b_in` (depth, 1, 4·width), `w_out` (depth, 4·width, width)" in page


def test_a_plugins_module_imports_by_name_as_torch_compile_asks(registries):
    """--compile traces a plug-in's functions and imports their module by name: a file's module is
    registered under it (a compiled RK4 run failed with "No module named 'rk4_student'")."""
    import importlib

    rk4 = STUDENTS.lookup(f"{EXAMPLES / 'rk4_student.py'}:rk4")
    module = importlib.import_module(rk4.integrator.block.__module__)
    assert module.rk4_block is rk4.integrator.block


def test_a_committed_run_of_a_plugin_reads_from_anywhere(registries, tmp_path, monkeypatch):
    """A run names its plug-in by the path it was given (examples/rk4_student.py); read from another
    folder, its components come from the copy it kept, and its config still says what it ran."""
    import shutil

    from toymodels.results.storage import RunFolder
    from toymodels.workflows.fits import run_protocol

    run = shutil.copytree(EXAMPLES.parent / "figures" / "rk4" / "cpu", tmp_path / "run")
    monkeypatch.chdir(tmp_path)
    protocol = run_protocol(RunFolder(run))
    assert protocol.architecture.order == 4 and protocol.config.student == "examples/rk4_student.py:rk4"
