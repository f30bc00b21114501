"""The action grammar: BrowserGym's high-level action strings, parsed, never executed as code.

An action string is one or more calls on separate lines, e.g. ``click('12')`` or
``fill('a5', "hello")\\nkeyboard_press('Enter')``. Each line is parsed with Python's
`ast` and accepted only if it is a plain call of an allow-listed name whose arguments
are literals (strings, numbers, booleans, lists of those). Anything else -- attribute
access, names, lambdas, starred arguments, comprehensions, calls inside arguments --
is rejected with an `ActionParseError` whose message says why, in words.

The signatures are BrowserGym's (``browsergym/core/action/functions.py``), with the same
parameter names and defaults, so keyword arguments work as they do there. They are not
written here: `ACTION_SIGNATURES` is derived from the actions `executor.py` declares, and so
is `SHORTHANDS`, OpenEnv's harness tools that the grammar rewrites into BrowserGym actions:
``send_keys(text)`` and ``scroll('down'|'up'|'left'|'right')``.
"""

from __future__ import annotations

import ast
import math
from typing import Any

from envharness.envs.browsergym.action_set import (
    REQUIRED,
    SCROLL_DIRECTIONS,
    Action,
    ActionSet,
    Derived,
    Param,
    ParsedAction,
)
from envharness.envs.browsergym.executor import ACTIONS, SCROLL_STEP

#: Whole action strings longer than this are refused before parsing.
MAX_ACTION_CHARS = 20_000
#: Longest string argument (``fill`` text, ``keyboard_type`` text, a URL...).
MAX_STRING_CHARS = 10_000
#: Most calls in one multi-action string.
MAX_CALLS = 20
#: Largest coordinate, delta or wait accepted (pixels or milliseconds).
MAX_NUMBER = 1_000_000

_BUTTONS = ("left", "middle", "right")
_MODIFIERS = ("Alt", "Control", "ControlOrMeta", "Meta", "Shift")


class ActionParseError(ValueError):
    """The action string is not a valid BrowserGym action; the message says why."""


def _signatures(actions: ActionSet) -> dict[str, tuple[Param, ...]]:
    return {name: declared.params for name, declared in actions.actions.items()}


#: name -> parameters, in BrowserGym's order, as `executor.py` declares them.
ACTION_SIGNATURES: Derived[tuple[Param, ...]] = Derived(ACTIONS, _signatures)
#: Calls the grammar rewrites into an action (a shorthand may share a primitive's name).
SHORTHANDS: Derived[Action] = Derived(ACTIONS, lambda actions: dict(actions.shorthands))

#: BrowserGym actions deliberately not offered, with the reason given to the caller.
UNSUPPORTED_ACTIONS = {
    "upload_file": "uploading files from the server's disk is disabled in this environment",
    "mouse_upload_file": "uploading files from the server's disk is disabled in this environment",
}


# -- argument checks ------------------------------------------------------------------
def _check_str(v: Any, limit: int = MAX_STRING_CHARS) -> str:
    if not isinstance(v, str):
        raise ActionParseError(f"expected a string, got {_describe(v)}")
    if len(v) > limit:
        raise ActionParseError(f"string of {len(v)} characters is longer than the limit of {limit}")
    return v


def _check_number(v: Any) -> float | int:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ActionParseError(f"expected a number, got {_describe(v)}")
    if not math.isfinite(v) or abs(v) > MAX_NUMBER:
        raise ActionParseError(f"number {v!r} is out of range (limit ±{MAX_NUMBER})")
    return v


def _check_int(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise ActionParseError(f"expected an integer, got {_describe(v)}")
    if abs(v) > MAX_NUMBER:
        raise ActionParseError(f"integer {v} is out of range")
    return v


def _check_bool(v: Any) -> bool:
    if not isinstance(v, bool):
        raise ActionParseError(f"expected True or False, got {_describe(v)}")
    return v


def _check_button(v: Any) -> str:
    if v not in _BUTTONS:
        raise ActionParseError(f"button must be one of {', '.join(map(repr, _BUTTONS))}, got {_describe(v)}")
    return v


def _check_modifiers(v: Any) -> tuple[str, ...]:
    if not isinstance(v, (list, tuple)) or any(m not in _MODIFIERS for m in v):
        raise ActionParseError(
            f"modifiers must be a list drawn from {', '.join(_MODIFIERS)}, got {_describe(v)}"
        )
    return tuple(v)


def _check_str_or_list(v: Any) -> str | tuple[str, ...]:
    if isinstance(v, (list, tuple)):
        if len(v) > 100:
            raise ActionParseError(f"list of {len(v)} options is longer than the limit of 100")
        return tuple(_check_str(x) for x in v)
    return _check_str(v)


def _check_direction(v: Any) -> str:
    if v not in SCROLL_DIRECTIONS:
        raise ActionParseError(f"expected one direction: 'up', 'down', 'left' or 'right', got {_describe(v)}")
    return v


#: One check per argument kind (`action_set.KINDS`).
_CHECKS = {
    "str": _check_str,
    "key": lambda v: _check_str(v, 100),
    "number": _check_number,
    "int": _check_int,
    "bool": _check_bool,
    "button": _check_button,
    "modifiers": _check_modifiers,
    "str_or_list": _check_str_or_list,
    "direction": _check_direction,
}


def _describe(v: Any) -> str:
    text = repr(v)
    return f"{type(v).__name__} {text[:40] + '...' if len(text) > 40 else text}"


# -- literal evaluation (the only values an action may carry) -------------------------
def _literal(node: ast.AST) -> Any:
    if isinstance(node, ast.Constant) and (
        node.value is None or isinstance(node.value, (str, int, float, bool))
    ):
        return node.value
    if isinstance(node, (ast.List, ast.Tuple)):
        if len(node.elts) > 100:
            raise ActionParseError("a list argument may hold at most 100 items")
        return [_literal(e) for e in node.elts]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _literal(node.operand)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ActionParseError("a sign may only precede a number")
        return -value if isinstance(node.op, ast.USub) else value
    raise ActionParseError(
        f"arguments must be literals (strings, numbers, True/False, lists); got {_node_kind(node)}"
    )


def _node_kind(node: ast.AST) -> str:
    kinds = {
        ast.Name: "a variable name",
        ast.Attribute: "attribute access",
        ast.Call: "a function call",
        ast.Lambda: "a lambda",
        ast.Starred: "a starred argument",
        ast.BinOp: "an arithmetic expression",
        ast.Subscript: "a subscript",
        ast.JoinedStr: "an f-string",
        ast.Dict: "a dict",
    }
    for cls, words in kinds.items():
        if isinstance(node, cls):
            return words
    return f"a {type(node).__name__} expression"


# -- binding --------------------------------------------------------------------------
def _bind(name: str, params: tuple[Param, ...], args: list[Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The call's arguments by parameter name, checked, defaults filled in."""
    if len(args) > len(params):
        raise ActionParseError(f"{name}() takes at most {len(params)} arguments ({len(args)} given)")
    bound: dict[str, Any] = {}
    for param, value in zip(params, args):
        bound[param.name] = value
    names = {p.name for p in params}
    for key, value in kwargs.items():
        if key not in names:
            raise ActionParseError(f"{name}() got an unexpected keyword argument {key!r}")
        if key in bound:
            raise ActionParseError(f"{name}() got multiple values for argument {key!r}")
        bound[key] = value
    checked: dict[str, Any] = {}
    for param in params:
        if param.name not in bound:
            if param.default is REQUIRED:
                raise ActionParseError(f"{name}() is missing the required argument {param.name!r}")
            checked[param.name] = param.default
            continue
        value = bound[param.name]
        if value is None and param.default is None:
            checked[param.name] = None
            continue
        try:
            checked[param.name] = _CHECKS[param.kind](value)
        except ActionParseError as e:
            raise ActionParseError(f"{name}() argument {param.name!r}: {e}") from None
    return checked


def _shorthand(name: str, args: list[Any], kwargs: dict[str, Any]) -> ParsedAction | None:
    """The action a shorthand call stands for; None when the call is the primitive of that name
    (``scroll(0, 200)``: a shorthand takes a primitive's name only for its own argument count)."""
    short = SHORTHANDS.get(name)
    if short is None:
        return None
    primitive = ACTION_SIGNATURES.get(name)
    if primitive is not None and (
        len(args) + len(kwargs) != len(short.params) or not set(kwargs) <= {p.name for p in short.params}
    ):
        return None
    return short.run(**_bind(name, short.params, args, kwargs))


def _parse_call(stmt: ast.stmt) -> ParsedAction:
    if not isinstance(stmt, ast.Expr) or not isinstance(stmt.value, ast.Call):
        raise ActionParseError(
            f"each line must be a single action call such as click('12'); got a {type(stmt).__name__} statement"
        )
    call = stmt.value
    if not isinstance(call.func, ast.Name):
        raise ActionParseError(f"the action must be called by its bare name; got {_node_kind(call.func)}")
    name = call.func.id
    if name in UNSUPPORTED_ACTIONS:
        raise ActionParseError(f"{name}() is not available: {UNSUPPORTED_ACTIONS[name]}")
    if name not in ACTION_SIGNATURES and name not in SHORTHANDS:
        valid = [*sorted(ACTION_SIGNATURES), *(n for n in SHORTHANDS if n not in ACTION_SIGNATURES)]
        raise ActionParseError(f"unknown action {name!r}; valid actions: {', '.join(valid)}")
    args = [_literal(a) for a in call.args]
    kwargs: dict[str, Any] = {}
    for kw in call.keywords:
        if kw.arg is None:
            raise ActionParseError("**keyword unpacking is not allowed in actions")
        kwargs[kw.arg] = _literal(kw.value)
    return _shorthand(name, args, kwargs) or ParsedAction(
        name, _bind(name, ACTION_SIGNATURES[name], args, kwargs)
    )


def _strip_fences(text: str) -> str:
    text = text.strip()
    if text.startswith("```"):
        text = text.split("\n", 1)[1] if "\n" in text else ""
        text = text.rsplit("```", 1)[0]
    return text.strip()


def parse_actions(text: str) -> list[ParsedAction]:
    """Parse an action string (one call per line, ``#`` comments allowed) into checked calls."""
    if not isinstance(text, str):
        raise ActionParseError(f"the action must be a string, got {type(text).__name__}")
    if len(text) > MAX_ACTION_CHARS:
        raise ActionParseError(f"the action is {len(text)} characters long; the limit is {MAX_ACTION_CHARS}")
    source = _strip_fences(text)
    if not source:
        raise ActionParseError("received an empty action; send e.g. noop() to do nothing")
    try:
        module = ast.parse(source, mode="exec")
    except SyntaxError as e:
        raise ActionParseError(
            f"not a valid action call: {e.msg} (line {e.lineno}, column {e.offset})"
        ) from None
    except (RecursionError, MemoryError, ValueError) as e:
        raise ActionParseError(f"not a valid action call: {type(e).__name__}") from None
    if not module.body:
        raise ActionParseError("received an empty action; send e.g. noop() to do nothing")
    if len(module.body) > MAX_CALLS:
        raise ActionParseError(f"{len(module.body)} calls in one action; the limit is {MAX_CALLS}")
    return [_parse_call(stmt) for stmt in module.body]


__all__ = [
    "ACTION_SIGNATURES",
    "MAX_ACTION_CHARS",
    "MAX_CALLS",
    "MAX_NUMBER",
    "MAX_STRING_CHARS",
    "SCROLL_STEP",
    "SHORTHANDS",
    "UNSUPPORTED_ACTIONS",
    "ActionParseError",
    "Param",
    "ParsedAction",
    "parse_actions",
]
