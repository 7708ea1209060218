"""The `toymodels` command: click commands over the Python API (`main`), and the scaling-law
commands (`scaling_law`). Nothing below imports this.
"""

from .main import main

__all__ = ["main"]
