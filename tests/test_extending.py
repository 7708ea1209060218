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

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
TINY = ["--preset", "quick", "--teacher", "tied", "--depths", "1,2", "--teacher-depth", "8", "--steps", "40", "--batch", "32",
        "--replicates", "1", "--device", "cpu", "--quiet"]


def falls(out: Path) -> bool:
    metrics = pd.read_csv(out / "metrics.csv")
    first, last = (metrics[metrics.step == step].test_loss.to_numpy() for step in (1, metrics.step.max()))
    return bool((last < first).all())


@pytest.mark.parametrize("option", [["--loss", f"{EXAMPLES / 'custom_loss.py'}:cosine"],
                                    ["--loss", "mse", "--student", f"{EXAMPLES / 'custom_student.py'}:heun"]])
def test_the_worked_examples_train_from_the_cli(option, tmp_path):
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


def test_a_heun_student_costs_two_mlp_calls_per_block():
    sys.path.insert(0, str(EXAMPLES))
    try:
        from custom_student import heun
    finally:
        sys.path.remove(str(EXAMPLES))
    from toymodels.models.students import STUDENTS
    assert heun.matmul_flops_per_layer(32) == 2 * STUDENTS["euler"].matmul_flops_per_layer(32)
    assert heun.weights_per_layer(32) == STUDENTS["euler"].weights_per_layer(32)


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
    got = loss.losses(readout_s, targets[rows], student_head, teacher_head, instances,
                      temperatures[temperature_index].view(-1, 1, 1))
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
    probe = ("import json, sys, toymodels.config as c\n"
             "c.resolve_config('quick', steps=10)\n"
             "print(json.dumps(sorted(m for m in sys.modules if m.startswith('toymodels') or m == 'torch')))")
    modules = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert json.loads(modules) == ["toymodels", "toymodels.config", "toymodels.errors", "toymodels.version"]


def test_no_module_imports_one_below_it_in_the_design_pages_module_table():
    """Data flows one way: the design page lists the modules in that order, folder by folder, and
    the imports obey it (a folder's __init__ only describes it, or re-exports from below it)."""
    root = Path(__file__).resolve().parent.parent
    package = root / "toymodels"
    section = (root / "docs" / "design.md").read_text()
    table = section.split("| module | part |", 1)[1].split("\n\n", 1)[0]
    order = [name for row in table.splitlines() if row.startswith("| `")
             for name in re.findall(r"`([\w/]+)\.py`", row.split("|")[1])]
    modules = {path.relative_to(package).with_suffix("").as_posix() for path in package.rglob("*.py")
               if path.stem not in ("__init__", "__main__")}
    assert sorted(order) == sorted(modules)  # every module has its row
    for module in order:
        folder = module.split("/")[:-1]
        for dots, name in re.findall(r"^from (\.+)([\w.]*) import", (package / f"{module}.py").read_text(), re.MULTILINE):
            imported = "/".join([*folder[:len(folder) - (len(dots) - 1)], *name.split(".")])
            assert order.index(imported) < order.index(module), f"{module} imports {imported}, listed below it"