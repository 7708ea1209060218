"""The package list, found rather than written out (pyproject.toml holds everything else): every
folder of toymodels/ with an `__init__.py`, so a new subpackage ships without a line here, and the
experiments and the examples, which live in the top-level experiments/ and examples/ (pyproject.toml's
package-dir maps them).
pyproject.toml's own `packages.find` cannot name a package that sits outside the folder it
searches, so the wheel would lack the experiments."""

from setuptools import find_packages, setup

setup(packages=[*find_packages(include=["toymodels", "toymodels.*"]), "toymodels.experiments", "toymodels.examples"])
