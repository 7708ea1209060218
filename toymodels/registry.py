"""Named components: one registry per kind (teacher dynamics, student architectures, losses,
starts, schedules), so that adding a variant is one new definition and its name works everywhere.

Every kind plugs in the same way: a decorator `@register_KIND("name")` on a function (a teacher,
a student's block, a start, a schedule) or a class (a loss). A name may also point outside the
package, to a user's own file: `path/to/file.py:NAME` (or `package.module:NAME`) loads the file,
whose decorators register its definitions, and takes the one it registered as NAME. Lookups
that fail raise one clear line (ToymodelsError).
"""

import ast
import importlib
import importlib.util
import re
import sys
from pathlib import Path

from .errors import ToymodelsError


def plugin_file(source: str) -> Path:
    """The file a plug-in's `path/to/file.py` names: the path itself where it exists, else, for
    `examples/NAME.py`, the worked example the package ships (an installed wheel has no
    examples/ beside the user, but an experiment file names them so)."""
    path = Path(source)
    if path.is_file() or path.parent != Path("examples"):
        return path
    shipped = importlib.util.find_spec("toymodels.examples")
    return Path(shipped.submodule_search_locations[0]) / path.name if shipped else path


def load_module(kind: str, name: str):
    """The module `path/to/file.py:NAME` or `package.module:NAME` names, run (its decorators
    register what it defines)."""
    source = name.rpartition(":")[0]
    try:
        if source.endswith(".py"):
            module_spec = importlib.util.spec_from_file_location(Path(source).stem, plugin_file(source))
            module = importlib.util.module_from_spec(module_spec)
            sys.modules[module_spec.name] = module  # torch.compile imports a traced function's module by name
            module_spec.loader.exec_module(module)
            return module
        return importlib.import_module(source)
    except (OSError, ImportError, SyntaxError) as error:
        raise ToymodelsError(f"cannot load {kind} {name!r}: {error}") from None


def short_name(name: str) -> str:
    """A component's name as tables and figures show it: a plug-in's `path/to/file.py:drifting(m=0.9)`
    as `drifting(m=0.9)` (its path is in the run's config)."""
    head, parenthesis, parameters = name.partition("(")
    return head.rpartition(":")[2] + parenthesis + parameters


def parse_call(kind: str, spec: str) -> tuple[str, dict]:
    """ "correlated(rho=0.5)" → ("correlated", {"rho": 0.5}): a component's name and the parameters
    it sets."""
    match = re.fullmatch(r"\s*([^()\s]+)\s*(?:\((.*)\))?\s*", spec)
    if not match:
        raise ToymodelsError(f"cannot read {kind} {spec!r}; write NAME or NAME(key=value, ...)")
    name, arguments = match.groups()
    params = {}
    for item in filter(None, (a.strip() for a in (arguments or "").split(","))):
        key, _, value = item.partition("=")
        try:
            params[key.strip()] = ast.literal_eval(value.strip())
        except (ValueError, SyntaxError):
            raise ToymodelsError(f"{kind} {spec!r}: {item!r} is not key=number") from None
    return name, params


class Registry(dict):
    """Name → definition for one kind of component. A plug-in file's definitions are looked up
    without staying registered: the next run's names are the package's own."""

    every: list["Registry"] = []  # what a plug-in file may register into

    def __init__(self, kind: str):
        super().__init__()
        self.kind = kind
        Registry.every.append(self)

    def register(self, name: str, make=None):
        """Decorator: make a definition available under `name` (as `make(definition)` where the
        registry keeps something built from it, e.g. a student's Architecture from its block)."""

        def add(definition):
            self[name] = definition if make is None else make(definition)
            return definition

        return add

    def lookup(self, name: str):
        """The definition `name` stands for: a registered one, or a plug-in `file.py:NAME`: what
        the file registered as NAME, else the file's own NAME (an object of the kind)."""
        if ":" in name:
            attribute = name.rpartition(":")[2]
            before = [dict(registry) for registry in Registry.every]
            try:
                module = load_module(self.kind, name)
                if attribute in self and self[attribute] is not before[Registry.every.index(self)].get(attribute):
                    return self[attribute]
            finally:  # what the file registered stays with the definition, not in the registries
                for registry, kept in zip(Registry.every, before):
                    registry.clear()
                    registry.update(kept)
            if not hasattr(module, attribute):
                raise ToymodelsError(
                    f"cannot load {self.kind} {name!r}: it registers no {self.kind} {attribute!r} "
                    f"and defines no {attribute}"
                )
            return getattr(module, attribute)
        if name not in self:
            raise ToymodelsError(
                f"unknown {self.kind} {name!r}; choose from {', '.join(sorted(self))}, or name your own as file.py:NAME"
            )
        return self[name]
