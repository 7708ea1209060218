"""`python -m toymodels.examples`: each worked plug-in, its first line and its file."""

import ast
from pathlib import Path

for path in sorted(Path(__file__).parent.glob("*.py")):
    if not path.name.startswith("__"):
        summary = (ast.get_docstring(ast.parse(path.read_text())) or "").splitlines()[0].partition(":")[0]
        print(f"{path.stem:<20} {summary}\n{'':<20} {path}")
