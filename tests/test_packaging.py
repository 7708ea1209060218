"""The wheel holds the whole package: an editable install maps the checkout, so only a built wheel
shows a subpackage, an experiment or a data file left out of it."""

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
# what building the wheel reads: the project's files, without run folders, figures or a stale build/
BUILT_FROM = ["pyproject.toml", "setup.py", "README.md", "toymodels", "experiments", "examples"]


@pytest.mark.slow
def test_the_wheel_holds_every_subpackage_the_experiments_and_the_data(tmp_path):
    source = tmp_path / "source"
    source.mkdir()
    for name in BUILT_FROM:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(ROOT / name, source / name)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-q",
            "-w",
            str(tmp_path / "wheel"),
            str(source),
        ],
        check=True,
        capture_output=True,
    )
    [wheel] = (tmp_path / "wheel").glob("toymodels-*.whl")
    held = set(zipfile.ZipFile(wheel).namelist())

    packages = {path.parent.relative_to(ROOT).as_posix() for path in (ROOT / "toymodels").rglob("__init__.py")}
    assert {"toymodels", "toymodels/workflows", "toymodels/training"} <= packages
    assert {f"{package}/__init__.py" for package in packages} <= held
    experiments = {
        f"toymodels/experiments/{path.name}"
        for pattern in ("*.toml", "*.md", "__init__.py")
        for path in (ROOT / "experiments").glob(pattern)
    }
    assert len(experiments) > 3 and experiments <= held
    data = {path.relative_to(ROOT).as_posix() for path in (ROOT / "toymodels" / "data").glob("*.csv")}
    assert data and data <= held
    assert {"toymodels/py.typed", "toymodels/__init__.pyi", "toymodels/api.pyi"} <= held  # what type checkers read
    examples = {f"toymodels/examples/{path.name}" for path in (ROOT / "examples").glob("*.py")}
    assert "toymodels/examples/rk4_student.py" in examples and examples <= held  # experiments name them
