"""Options declared once, as dataclass fields, as TRL's `HfArgumentParser` reads them.

A configuration's field says everything about its option: the default (the field's), the help
text, the command-line flags and their older spellings, choices, and bounds:

    steps: int = option(30, "optimizer steps", flags=("--steps",), minimum=1)

A configuration is composed of groups, as `HfArgumentParser((ScriptArguments, GRPOConfig,
ModelConfig))` composes dataclasses: each group a frozen dataclass of options (the environment,
the fleet, the model: `harness/groups.py`), each command's configuration a subclass of the
groups it takes plus its own options. A rule about two fields lives with their group, as its
`rules()` method.

`cli/declared.py` builds the argument parser (a section per group) and reads the
configuration back from the declaration; `check_options` refuses a value out of bounds, or a
broken rule, in the options' words, for the command line and for Python callers alike.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Any

#: The field metadata key that holds an option's declaration.
KEY = "option"
#: `Option.cli_default` when argparse's default is the field's.
FIELD_DEFAULT: Any = type("FieldDefault", (), {"__repr__": lambda self: "FIELD_DEFAULT"})()


@dataclasses.dataclass(frozen=True)
class Option:
    """How one field appears on the command line and what values it takes."""

    help: str
    #: Flags, the first one the name in messages; empty: ``--field-name``.
    flags: tuple[str, ...] = ()
    #: argparse's destination (the name tests and older code read on the namespace).
    dest: str | None = None
    choices: tuple[Any, ...] | None = None
    metavar: str | None = None
    #: argparse's `type` (text -> value) or `action` ("store_true", "append", a class, ...).
    type: Callable[[str], Any] | None = None
    action: Any = None
    #: argparse's default when it is not the field's (e.g. None where the command computes one).
    cli_default: Any = FIELD_DEFAULT
    #: The parsed value -> the field's value (e.g. "0 means none" -> None).
    from_cli: Callable[[Any], Any] | None = None
    #: Bounds, checked by `check_bounds` (None values are never out of bounds).
    minimum: float | None = None
    positive: bool = False
    #: False: a setting for Python callers only, not on the command line.
    cli: bool = True

    def flag(self, name: str) -> str:
        return self.flags[0] if self.flags else "--" + name.replace("_", "-")

    def destination(self, name: str) -> str:
        return self.dest or self.flag(name).lstrip("-").replace("-", "_")


def option(default: Any = dataclasses.MISSING, help: str = "", **declared: Any) -> Any:
    """A dataclass field declaring its option (`Option`'s fields as keywords). A list or dict
    default is copied for each instance."""
    metadata = {KEY: Option(help=help, **declared)}
    if isinstance(default, (list, dict)):
        value = default
        return dataclasses.field(default_factory=lambda: type(value)(value), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def declared(cls: type) -> list[tuple[dataclasses.Field, Option]]:
    """The fields of `cls` that declare an option, in order."""
    return [(f, f.metadata[KEY]) for f in dataclasses.fields(cls) if KEY in f.metadata]


def check_bounds(config: Any) -> None:
    """ValueError naming the first option of `config` whose value is out of its bounds."""
    for field, opt in declared(type(config)):
        value = getattr(config, field.name)
        if value is None or isinstance(value, bool):
            continue
        if opt.minimum is not None and value < opt.minimum:
            raise ValueError(f"{opt.flag(field.name)} must be at least {opt.minimum:g}")
        if opt.positive and value <= 0:
            raise ValueError(f"{opt.flag(field.name)} must be positive")


def check_options(config: Any) -> None:
    """ValueError naming the first option of `config` out of its bounds, then the first rule
    of its groups that it breaks: a rule about two fields of a group is that group's
    `rules()` method, written once, checked for every configuration composed of the group."""
    check_bounds(config)
    for group in reversed(type(config).__mro__):
        rules = group.__dict__.get("rules")
        if rules is not None:
            rules(config)


def group_values(config: Any, group: type) -> dict[str, Any]:
    """The values of `config`'s fields that `group` declares, by name (what a function whose
    keywords are the group's fields takes: `create_app(..., **group_values(config, AppArgs))`)."""
    return {field.name: getattr(config, field.name) for field in dataclasses.fields(group)}


def group_of(cls: type, name: str) -> str | None:
    """The title of the group that declares field `name` of `cls` (its class attribute
    `group`, as TRL's `HfArgumentParser` reads `_argument_group_name`); None: the command's own."""
    for klass in cls.__mro__:
        if name in klass.__dict__.get("__annotations__", {}):
            return None if klass is cls else getattr(klass, "group", None)
    return None


def json_or_text(text: str) -> Any:
    """An option's value from the command line: JSON when it parses (``5``, ``true``, ``[1, 2]``),
    the text otherwise."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def key_values(pairs: list[str], flag: str = "--env-option") -> dict[str, Any]:
    """`KEY=VALUE` pairs as options (values through `json_or_text`); a pair without `=` is
    refused naming `flag`."""
    options = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"{flag} expects KEY=VALUE, got {pair!r}")
        options[key.strip()] = json_or_text(value)
    return options
