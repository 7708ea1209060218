"""The package's version, as installed (`toymodels --version`, and every run's provenance)."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("toymodels")
except PackageNotFoundError:  # a source tree that was never installed
    __version__ = "unknown"
