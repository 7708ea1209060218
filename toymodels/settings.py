"""Settings that declare themselves: a field's default, its meaning and its rules, checked in one
clear line each. The sweep's config (config.py) and a teacher's parameters (models/teachers.py)
are declared with `setting` and checked with `declared_problem`, as scikit-learn keeps its
parameter validation apart from the estimators.
"""

import dataclasses
import math
import types
import typing
from dataclasses import dataclass

MAX_COUNT = 10**12  # of steps, samples, …: far beyond any sweep, and inside a step counter's int64


def setting(
    default,
    meaning: str,
    *,
    low=None,
    high=None,
    positive: bool = False,
    below=None,
    choices: tuple = (),
    distinct: bool = False,
    empty: str | None = None,
    names: str | None = None,
    option: str | None = None,
    pair: bool = False,
    metavar: str | None = None,
    path: bool = False,
    operational: bool = False,
    stage_reset=dataclasses.MISSING,
):
    """A config field that declares itself: its default, what it means (the CLI's help), and its
    rules: a range (`low`/`high` inclusive, `positive`: above 0, `below`: under it; on every item of
    a list), `choices`,
    `distinct` items, the line for an `empty` list. For the command line: the registry of components
    it `names` (the help lists them), its `option` spelling (default --field-name), an on/off `pair`
    (--x/--no-x), a `metavar`, a folder `path`. `operational`: where or how fast the numbers are
    computed, or what is kept, not what they are (`SweepConfig.protocol` leaves it out). `stage_reset`:
    the value a stage trained inside the run takes (`SweepConfig.stage`), where it is not the run's."""
    rules = dict(
        meaning=meaning,
        low=low,
        high=high,
        positive=positive,
        below=below,
        choices=choices,
        distinct=distinct,
        empty=empty,
        names=names,
        option=option,
        pair=pair,
        metavar=metavar,
        path=path,
        operational=operational,
        stage_reset=stage_reset,
    )
    return dataclasses.field(default=default, metadata=rules)


def _conforms(value, kind) -> bool:
    """Whether `value` (from Python, TOML or JSON) is of the field type `kind`; ints pass as floats."""
    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        return any(_conforms(value, option) for option in typing.get_args(kind))
    if typing.get_origin(kind) is tuple:
        items = typing.get_args(kind)
        if not isinstance(value, tuple):
            return False
        if items[-1] is Ellipsis:
            return all(_conforms(item, items[0]) for item in value)
        return len(value) == len(items) and all(map(_conforms, value, items))
    if kind is type(None):
        return value is None
    if isinstance(value, bool):
        return kind is bool
    return isinstance(value, (int, float)) if kind is float else isinstance(value, kind)


def _describe(kind) -> str:
    names = {int: "a whole number", float: "a number", str: "text", bool: "true or false", type(None): "none"}
    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        return " or ".join(_describe(option) for option in typing.get_args(kind))
    if typing.get_origin(kind) is tuple:
        items = typing.get_args(kind)
        if items[-1] is Ellipsis:
            return f"a list of {_describe(items[0]).removeprefix('a ')}s"
        return "a pair (" + ", ".join(_describe(item) for item in items) + ")"
    return names[kind]


def _numbers(value):
    """Every number inside a value (lists and pairs included)."""
    if isinstance(value, tuple):
        return [number for item in value for number in _numbers(item)]
    return [value] if isinstance(value, (int, float)) and not isinstance(value, bool) else []


def field_problem(name: str, value, rules: dict) -> str | None:
    """What is wrong with one field's `value` under its declared `rules` (`setting`), or None."""
    label = name.replace("_", " ")
    items = value if isinstance(value, tuple) else () if value is None else (value,)
    if isinstance(value, tuple) and not value and rules["empty"]:
        return rules["empty"]
    if rules["distinct"] and len(set(value)) != len(value):
        return f"{label} must be distinct, got {list(value)}"
    if rules["choices"] and value is not None and value not in rules["choices"]:
        return f"unknown {label} {value!r}; choose from {', '.join(rules['choices'])}"
    numbers = [item for item in items if isinstance(item, (int, float)) and not isinstance(item, bool)]
    low, high = rules["low"], math.inf if rules["high"] is None else rules["high"]
    if rules["positive"] and any(not number > 0 for number in numbers):
        return f"{label} must be positive, got {value!r}"
    if rules["below"] is not None and any(not number < rules["below"] for number in numbers):
        return f"{label} must be under {rules['below']:g}, got {value!r}"
    if low is not None and any(not low <= number <= high for number in numbers):
        span = (
            f"at least {low:g}"
            if high == math.inf
            else f"a whole number ≥ {low}"
            if (low, high) == (0, MAX_COUNT)
            else f"between {low} and {high:.0e}"
            if high == MAX_COUNT
            else f"between {low:g} and {high:g}"
        )
        return f"{label} must be {span}, got {value if isinstance(value, tuple) else value!r}"
    return None


@dataclass(frozen=True)
class Constraint:
    """A rule between fields: `broken(config)` says it is, `message(config)` the one line that says why."""

    broken: typing.Callable[[typing.Any], bool]
    message: typing.Callable[[typing.Any], str]


def declared_problem(name: str, value, kind, rules: dict) -> str | None:
    """What is wrong with `value` for a setting `name` of type `kind` declared with `rules`: its
    type, then finiteness, then its declared rules (`field_problem`); None if nothing is."""
    if not _conforms(value, kind):
        return f"{name} must be {_describe(kind)}, got {value!r}"
    if not all(math.isfinite(number) for number in _numbers(value)):
        return f"{name} must be finite, got {value!r}"
    return field_problem(name, value, rules)
