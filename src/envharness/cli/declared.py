"""The argument parser and the configuration, both read from a configuration's declared options
(`core/declared.py`): each option is written once, as its field."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any, TypeVar

from envharness.core.declared import FIELD_DEFAULT, Option, declared, group_of

T = TypeVar("T")


def _default(field: dataclasses.Field) -> Any:
    if field.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return field.default_factory()  # type: ignore[misc]
    return None if field.default is dataclasses.MISSING else field.default


def _argument(field: dataclasses.Field, opt: Option, help_values: dict[str, str]) -> dict[str, Any]:
    default = _default(field)
    kwargs: dict[str, Any] = {
        "dest": opt.destination(field.name),
        "default": default if opt.cli_default is FIELD_DEFAULT else opt.cli_default,
        "help": opt.help.format(**help_values) if help_values else opt.help,
    }
    if opt.action is not None:
        kwargs["action"] = opt.action
    elif isinstance(default, bool):
        kwargs["action"] = "store_false" if default else "store_true"
    else:
        kwargs["type"] = opt.type or (type(default) if isinstance(default, (int, float)) else None)
    if opt.choices is not None:
        kwargs["choices"] = list(opt.choices)
    if opt.metavar is not None:
        kwargs["metavar"] = opt.metavar
    return {k: v for k, v in kwargs.items() if v is not None or k == "default"}


def add_declared(
    parser: argparse.ArgumentParser, cls: type, help_values: dict[str, str] | None = None
) -> None:
    """An argument for each option `cls` declares for the command line (`help_values` fill
    the ``{name}`` slots of help texts that depend on what is installed): the command's own
    first, then a section per group it is composed of (`core.declared.group_of`)."""
    sections: dict[str | None, Any] = {None: parser}
    chosen = [(group_of(cls, field.name), field, opt) for field, opt in declared(cls) if opt.cli]
    titles = {title for title, _, _ in chosen}
    for group in cls.__mro__[1:]:  # in the order the configuration names its groups
        title = group.__dict__.get("group")
        if title in titles and title not in sections:
            sections[title] = parser.add_argument_group(f"{title} options")
    for title, field, opt in chosen:
        sections[title].add_argument(
            *(opt.flags or (opt.flag(field.name),)), **_argument(field, opt, help_values or {})
        )


def from_args(cls: type[T], args: argparse.Namespace, **given: Any) -> T:
    """The `cls` the parsed command line describes (`given`: fields the command computes)."""
    values = {}
    for field, opt in declared(cls):
        if not opt.cli or field.name in given:
            continue
        value = getattr(args, opt.destination(field.name))
        values[field.name] = opt.from_cli(value) if opt.from_cli else value
    return cls(**values, **given)


def cli_fields(cls: type) -> list[tuple[str, str]]:
    """(field, flag) of every option `cls` declares for the command line."""
    return [(field.name, opt.flag(field.name)) for field, opt in declared(cls) if opt.cli]
