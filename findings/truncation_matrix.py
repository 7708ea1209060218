"""Issue 68's truncation matrix: a copy of a committed ladder run, one results table cut at a time
(at half its bytes, at 95 %, in the middle of its last row, at a row's end), and what the command
that reads it says: its exit status and its one line.

    python findings/truncation_matrix.py    # from the repository root; a minute or two on a CPU
"""

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from test_damaged_files import cut  # noqa: E402 - the cuts the tests make, one definition

COMMITTED = Path("figures/ladder_tied_r0/cpu")
TABLES = {"metrics.csv": "fit", "fits.csv": None, "ladder/ladder.csv": "ladder"}  # the command that reads it
CUTS = ("50 %", "95 %", "mid-row", "row end")  # as test_damaged_files.cut names them


def outcome(run: Path, table: str) -> tuple[int, str]:
    if TABLES[table] is None:  # fits.csv: read by the API (load_fits), as the docs and a user's script read it
        probe = f"from toymodels import load_fits\nload_fits({str(run)!r})"
        done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
        last = (done.stderr.strip().splitlines() or [""])[-1]
        return done.returncode, last
    done = subprocess.run(["toymodels", TABLES[table], str(run)], capture_output=True, text=True)
    lines = (done.stdout + done.stderr).strip().splitlines()
    return done.returncode, lines[-1] if done.returncode else f"({len(lines)} lines of results)"


with tempfile.TemporaryDirectory() as scratch:
    print("| file | cut | exit | what it says |\n|---|---|---|---|")
    for table in TABLES:
        for where in CUTS:
            run = Path(scratch) / "run"
            shutil.rmtree(run, ignore_errors=True)
            shutil.copytree(COMMITTED, run)
            cut(run / table, where)
            code, line = outcome(run, table)
            print(f"| {table} | {where} | {code} | {line.replace(scratch, '…')} |")
