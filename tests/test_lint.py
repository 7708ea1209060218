"""The tree keeps the house style: `ruff check` (its rule set in pyproject.toml) and `ruff format`
find nothing, so a new violation fails the suite and with it CI."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def ruff(*arguments: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ruff", *arguments, "."], cwd=ROOT, capture_output=True, text=True)


def test_the_linter_finds_nothing():
    result = ruff("check", "--no-cache", "--output-format", "concise")
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_tree_is_formatted():
    result = ruff("format", "--check", "--no-cache")
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_linter_fails_on_a_violation(tmp_path):
    """The check can fail: a file with an unused import and a line past the limit is two findings."""
    bad = tmp_path / "bad.py"
    bad.write_text("import os\n" + "x = " + "1 + " * 40 + "1\n")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "ruff",
            "check",
            "--no-cache",
            "--config",
            str(ROOT / "pyproject.toml"),
            "--output-format",
            "concise",
            str(bad),
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 1 and "F401" in result.stdout and "E501" in result.stdout, result.stdout
