"""Named components: one registry per kind (teacher dynamics, student architectures, losses,
schedules), so that adding a variant is one new definition and its name works everywhere.

A name may also point outside the package, to a user's own definition: `path/to/file.py:NAME`
or `package.module:NAME`. Lookups that fail raise one clear line (ToymodelsError).
"""

import importlib
import importlib.util
from pathlib import Path

from .errors import ToymodelsError


def load_plugin(kind: str, name: str):
    """The object `path/to/file.py:NAME` or `package.module:NAME` names."""
    source, _, attribute = name.rpartition(":")
    try:
        if source.endswith(".py"):
            module_spec = importlib.util.spec_from_file_location(Path(source).stem, source)
            module = importlib.util.module_from_spec(module_spec)
            module_spec.loader.exec_module(module)
        else:
            module = importlib.import_module(source)
        return getattr(module, attribute)
    except (OSError, ImportError, AttributeError, SyntaxError) as error:
        raise ToymodelsError(f"cannot load {kind} {name!r}: {error}") from None


class Registry(dict):
    """Name → definition for one kind of component."""

    def __init__(self, kind: str):
        super().__init__()
        self.kind = kind

    def register(self, name: str):
        """Decorator: make a definition available under `name`."""

        def add(definition):
            self[name] = definition
            return definition

        return add

    def lookup(self, name: str):
        """The definition `name` stands for: a registered one, or a plug-in `file.py:NAME`."""
        if ":" in name:
            return load_plugin(self.kind, name)
        if name not in self:
            raise ToymodelsError(f"unknown {self.kind} {name!r}; choose from {', '.join(sorted(self))}, "
                                 f"or name your own as file.py:NAME")
        return self[name]
