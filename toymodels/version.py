"""The package's version, as installed (`toymodels --version`, and every run's provenance)."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("toymodels")
except PackageNotFoundError:  # a source tree that was never installed
    __version__ = "unknown"

# The numbers' version: raised by every change after which `reproduce` gives a committed run other
# numbers (a default changed, arithmetic the golden records catch; a stream keyed anew also raises
# `STREAM_KEYS`). Every run records it in its provenance, the page of a run made under an earlier
# one says so, and the golden numbers cannot be re-recorded under an unchanged one (tests/test_golden.py).
NUMBERS = 1
