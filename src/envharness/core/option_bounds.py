"""The reset options an environment takes, and the bounds of their values, checked before it sees them.

A client's reset options are the cost of an episode (a 2000x2000 board, three million disks):
an environment declares what it takes as `Environment.reset_options` (a `ResetOptions`), and
the server (`core/sessions.run_reset`, shared by HTTP, `/ws` and `/mcp`) refuses a value out of
bounds, or an option the environment does not take, in words (VALIDATION_ERROR) before `reset`
runs. Options may depend on the task (a game's board size): `by_task` names them per task.

    reset_options = ResetOptions({"level": integer(1, 20), "hard": flag()})

None is never out of bounds (the environment's default). An environment that declares nothing
(`reset_options = None`) checks its own options.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from envharness.core.environment import InvalidOptions


@dataclass(frozen=True)
class Bound:
    """What one option's value may be: `kind` int | number | bool | text | choice | list | any_of."""

    kind: str
    minimum: float | None = None
    maximum: float | None = None
    #: Characters of a text, items of a list.
    max_length: int | None = None
    choices: tuple[Any, ...] = ()
    #: A list's items (`list`), or the alternatives (`any_of`).
    items: tuple[Bound, ...] = ()

    def problem(self, value: Any) -> str | None:
        """Why `value` is out of bounds, in words; None when it is within them."""
        check = _CHECKS[self.kind]
        return check(self, value)

    def describe(self) -> str:
        """The bound in a few words, for a refusal and for docs."""
        if self.kind in ("int", "number"):
            return f"{'an integer' if self.kind == 'int' else 'a number'} from {self.minimum:g} to {self.maximum:g}"
        if self.kind == "bool":
            return "true or false"
        if self.kind == "text":
            return f"a text of at most {self.max_length} characters"
        if self.kind == "choice":
            return "one of " + ", ".join(repr(c) for c in self.choices)
        if self.kind == "list":
            return f"a list of at most {self.max_length} items, each {self.items[0].describe()}"
        return " or ".join(b.describe() for b in self.items)


def integer(minimum: int, maximum: int) -> Bound:
    return Bound("int", minimum, maximum)


def number(minimum: float, maximum: float) -> Bound:
    return Bound("number", minimum, maximum)


def flag() -> Bound:
    return Bound("bool")


def text(max_length: int) -> Bound:
    return Bound("text", max_length=max_length)


def one_of(*choices: Any) -> Bound:
    return Bound("choice", choices=tuple(choices))


def list_of(item: Bound, max_items: int, min_items: int = 0) -> Bound:
    return Bound("list", minimum=min_items, max_length=max_items, items=(item,))


def any_of(*bounds: Bound) -> Bound:
    return Bound("any_of", items=tuple(bounds))


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _range(bound: Bound, value: Any) -> str | None:
    if bound.kind == "int" and not _is_int(value):
        return f"must be an integer, got {_shown(value)}"
    if bound.kind == "number" and (
        isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
    ):
        return f"must be a number, got {_shown(value)}"
    if not bound.minimum <= value <= bound.maximum:  # type: ignore[operator]
        return f"must be {bound.describe()}, got {_shown(value)}"
    return None


def _bool(bound: Bound, value: Any) -> str | None:
    return None if isinstance(value, bool) else f"must be true or false, got {_shown(value)}"


def _text(bound: Bound, value: Any) -> str | None:
    if not isinstance(value, str):
        return f"must be a text, got {_shown(value)}"
    if len(value) > (bound.max_length or 0):
        return f"must be {bound.describe()}, got {len(value)}"
    return None


def _choice(bound: Bound, value: Any) -> str | None:
    ok = any(type(value) is type(c) and value == c for c in bound.choices)
    return None if ok else f"must be {bound.describe()}, got {_shown(value)}"


def _list(bound: Bound, value: Any) -> str | None:
    if not isinstance(value, (list, tuple)):
        return f"must be a list, got {_shown(value)}"
    if not (bound.minimum or 0) <= len(value) <= (bound.max_length or 0):
        return f"must be {bound.describe()}, got {len(value)} items"
    for i, item in enumerate(value):
        problem = bound.items[0].problem(item)
        if problem:
            return f"item {i} {problem}"
    return None


def _any_of(bound: Bound, value: Any) -> str | None:
    if any(b.problem(value) is None for b in bound.items):
        return None
    return f"must be {bound.describe()}, got {_shown(value)}"


_CHECKS: dict[str, Callable[[Bound, Any], str | None]] = {
    "int": _range,
    "number": _range,
    "bool": _bool,
    "text": _text,
    "choice": _choice,
    "list": _list,
    "any_of": _any_of,
}


def _shown(value: Any) -> str:
    """A value in a refusal, cut short (it may be a client's megabytes)."""
    if _is_int(value) and value.bit_length() > 64:
        return f"an integer of {value.bit_length()} bits"
    shown = repr(value)
    return shown if len(shown) <= 60 else shown[:57] + "..."


#: What every reset takes (OpenEnv's protocol), whatever the environment declares.
PROTOCOL_OPTIONS: Mapping[str, Bound] = {
    "seed": integer(0, 2**63 - 1),
    "episode_id": text(256),
}


@dataclass(frozen=True)
class ResetOptions:
    """The reset options an environment takes (`common`, and per task `by_task(task)`), and
    their bounds. `task_keys`: the options that name the task (the first one given wins;
    none: `default_task`). `closed`: an option not declared is refused, naming those taken."""

    common: Mapping[str, Bound]
    by_task: Callable[[str], Mapping[str, Bound]] | None = None
    task_keys: tuple[str, ...] = ("task",)
    default_task: str | None = None
    closed: bool = True

    def with_default_task(self, task: str | None) -> ResetOptions:
        return dataclasses.replace(self, default_task=task)

    def taken(self, options: Mapping[str, Any]) -> dict[str, Bound]:
        """The options a reset with `options` may name, and their bounds."""
        task = next((options[k] for k in self.task_keys if options.get(k) is not None), self.default_task)
        declared = {**PROTOCOL_OPTIONS, **self.common}
        if self.by_task is not None and isinstance(task, str):
            declared.update(self.by_task(task))  # may refuse an unknown task (InvalidOptions)
        return declared

    def check(self, options: Mapping[str, Any]) -> None:
        """InvalidOptions naming the first option out of bounds, or not taken."""
        for key in self.task_keys:
            if options.get(key) is not None:
                problem = text(256).problem(options[key])
                if problem:
                    raise InvalidOptions(f"option {key} {problem}")
        declared = self.taken(options)
        for name, value in options.items():
            if value is None:
                continue
            bound = declared.get(name)
            if bound is None:
                if self.closed:
                    raise InvalidOptions(_not_taken(name, declared, options, self))
                continue
            problem = bound.problem(value)
            if problem:
                raise InvalidOptions(f"option {name} {problem}")


def _not_taken(
    name: str, declared: Mapping[str, Bound], options: Mapping[str, Any], spec: ResetOptions
) -> str:
    task = next((options[k] for k in spec.task_keys if options.get(k) is not None), spec.default_task)
    names = ", ".join(sorted(n for n in declared if n not in PROTOCOL_OPTIONS)) or "none"
    subject = task if isinstance(task, str) and task else "this environment"
    return f"{subject} does not take these arguments: {_shown(name)} (it takes: {names})"


def check_reset_options(env: Any, options: Mapping[str, Any]) -> None:
    """Refuse `options` out of what `env` declares (`reset_options`); nothing when undeclared."""
    declared = getattr(env, "reset_options", None)
    if isinstance(declared, ResetOptions):
        declared.check(options)
