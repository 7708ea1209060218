"""The `run` command's configuration options, generated from the config's own declarations
(`settings.setting`): one option per field, its type from the field's annotation, its help from
the field's meaning (with the built-in names of the registry it names), its spelling from the
declaration. A new field is on the command line with no edit here."""

import dataclasses
import re
import types
import typing

import click

from ..config import SweepConfig

# The built-in names of each registry the help lists, without importing the registries (they import
# torch, and `run --help` would wait for it): a test holds them to the registries.
BUILT_IN_NAMES = {
    "teacher": ("independent", "tied", "correlated", "smooth", "grouped"),
    "student": ("euler", "rk2", "lns", "depth-mup", "ode", "scaled-init"),
    "loss": ("mse", "kl", "kl-fixed-head"),
    "start": ("zero", "discretised", "trained"),
    "schedule": ("constant", "S", "G"),
    "optimizer": ("adam", "muon"),
}


class CommaList(click.ParamType):
    """`0.1,1.0` → (0.1, 1.0); one clear line when an item is not a number."""

    def __init__(self, kind, what):
        self.kind, self.what, self.name = kind, what, f"{what} list"

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        items = [item.strip() for item in str(value).split(",") if item.strip()]
        if not items:
            self.fail(f"no {self.what} given", param, ctx)
        try:
            return tuple(self.kind(item) for item in items)
        except ValueError:
            self.fail(f"{self.what}s must be comma-separated {self.kind.__name__}s, got {value!r}", param, ctx)


class Names(click.ParamType):
    """Comma-separated names; commas inside parentheses belong to a name's parameters."""

    name = "names"

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        return tuple(n.strip() for n in re.split(r",(?![^()]*\))", value) if n.strip())


def depth_rates(ctx, param, values):
    """`--depth-lr 16=0.1` (repeatable) → ((16, 0.1),)."""
    pairs = []
    for value in values:
        depth, _, rate = value.partition("=")
        try:
            pairs.append((int(depth), float(rate)))
        except ValueError:
            raise click.BadParameter(f"write DEPTH=RATE, e.g. 16=0.1; got {value!r}") from None
    return tuple(pairs) or None


def option_type(field: dataclasses.Field) -> dict:
    """click's arguments for a field's values, read from its annotation and declaration."""
    rules = field.metadata
    kind = field.type
    if typing.get_origin(kind) in (typing.Union, types.UnionType):  # X | None: an unset value is None anyway
        kind = next(option for option in typing.get_args(kind) if option is not type(None))
    if kind is bool:
        return {} if rules["pair"] else {"is_flag": True}
    if typing.get_origin(kind) is tuple:
        item = typing.get_args(kind)[0]
        if typing.get_origin(item) is tuple:  # (depth, rate) pairs
            return {"multiple": True, "callback": depth_rates}
        if item is str:
            return {"type": Names()}
        return {"type": CommaList(item, field.name.replace("_", " ").removesuffix("s"))}
    if rules["choices"]:
        return {"type": click.Choice(rules["choices"])}
    if rules["path"]:
        return {"type": click.Path(file_okay=False, exists=True, resolve_path=True)}
    return {"type": kind}


def option_help(field: dataclasses.Field) -> str:
    rules = field.metadata
    names = BUILT_IN_NAMES.get(rules["names"])
    return rules["meaning"] + (f" Built in: {', '.join(names)}." if names is not None else "")


def field_help(name: str) -> str:
    """The help of config field `name`, for any command that takes it."""
    return option_help(next(field for field in dataclasses.fields(SweepConfig) if field.name == name))


def config_option(field: dataclasses.Field):
    """The click option of one config field, named as the field (so its value is that key's)."""
    rules = field.metadata
    flag = rules["option"] or "--" + field.name.replace("_", "-")
    spelling = f"{flag}/--no-{flag[2:]}" if rules["pair"] else flag
    return click.option(
        spelling, field.name, default=None, metavar=rules["metavar"], help=option_help(field), **option_type(field)
    )


def config_options(command):
    """Every config field as an option of `command`, in the config's order."""
    for field in reversed(dataclasses.fields(SweepConfig)):
        command = config_option(field)(command)
    return command


def protocol_fields() -> list[str]:
    """The fields that decide the numbers (the ones a resume may not change)."""
    return [field.name for field in dataclasses.fields(SweepConfig) if not field.metadata["operational"]]
