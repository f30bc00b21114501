"""The action grammar: BrowserGym's high-level action strings, parsed, never executed as code.

An action string is one or more calls on separate lines, e.g. ``click('12')`` or
``fill('a5', "hello")\\nkeyboard_press('Enter')``. Each line is parsed with Python's
`ast` and accepted only if it is a plain call of an allow-listed name whose arguments
are literals (strings, numbers, booleans, lists of those). Anything else -- attribute
access, names, lambdas, starred arguments, comprehensions, calls inside arguments --
is rejected with an `ActionParseError` whose message says why, in words.

The signatures below are BrowserGym's (``browsergym/core/action/functions.py``), with
the same parameter names and defaults, so keyword arguments work as they do there.
Two aliases used by OpenEnv's BrowserGym harness tools are accepted as well and
rewritten into BrowserGym actions: ``send_keys(text)`` and ``scroll('down'|'up')``.
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass, field
from typing import Any

#: Whole action strings longer than this are refused before parsing.
MAX_ACTION_CHARS = 20_000
#: Longest string argument (``fill`` text, ``keyboard_type`` text, a URL...).
MAX_STRING_CHARS = 10_000
#: Most calls in one multi-action string.
MAX_CALLS = 20
#: Largest coordinate, delta or wait accepted (pixels or milliseconds).
MAX_NUMBER = 1_000_000
#: Pixels one ``scroll('down')`` moves (before BrowserGym's coordinate scaling).
SCROLL_STEP = 200

_REQUIRED = object()
_BUTTONS = ("left", "middle", "right")
_MODIFIERS = ("Alt", "Control", "ControlOrMeta", "Meta", "Shift")


class ActionParseError(ValueError):
    """The action string is not a valid BrowserGym action; the message says why."""


@dataclass(frozen=True)
class Param:
    name: str
    kind: str  # one of the keys of _CHECKS
    default: Any = _REQUIRED


@dataclass(frozen=True)
class ParsedAction:
    """One allow-listed call with checked, literal arguments (defaults filled in)."""

    name: str
    args: dict[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        return f"{self.name}({', '.join(f'{k}={v!r}' for k, v in self.args.items())})"


def _p(name: str, kind: str, default: Any = _REQUIRED) -> Param:
    return Param(name, kind, default)


_BID = _p("bid", "str")
_XY = (_p("x", "number"), _p("y", "number"))
_BUTTON = _p("button", "button", "left")

#: name -> parameters, in BrowserGym's order. `executor.py` has one function per name.
ACTION_SIGNATURES: dict[str, tuple[Param, ...]] = {
    # chat / infeasibility
    "send_msg_to_user": (_p("text", "str"),),
    "report_infeasible": (_p("reason", "str"),),
    "noop": (_p("wait_ms", "number", None),),  # None: the environment's default wait
    # element (bid) actions
    "click": (_BID, _BUTTON, _p("modifiers", "modifiers", ())),
    "dblclick": (_BID, _BUTTON, _p("modifiers", "modifiers", ())),
    "hover": (_BID,),
    "fill": (_BID, _p("value", "str"), _p("enable_autocomplete_menu", "bool", False)),
    "clear": (_BID,),
    "check": (_BID,),
    "uncheck": (_BID,),
    "select_option": (_BID, _p("options", "str_or_list")),
    "press": (_BID, _p("key_comb", "key")),
    "focus": (_BID,),
    "drag_and_drop": (_p("from_bid", "str"), _p("to_bid", "str")),
    "scroll": (_p("delta_x", "number"), _p("delta_y", "number")),
    # coordinate actions
    "scroll_at": (*_XY, _p("dx", "number"), _p("dy", "number")),
    "mouse_move": _XY,
    "mouse_up": (*_XY, _BUTTON),
    "mouse_down": (*_XY, _BUTTON),
    "mouse_click": (*_XY, _BUTTON),
    "mouse_dblclick": (*_XY, _BUTTON),
    "mouse_drag_and_drop": (
        _p("from_x", "number"), _p("from_y", "number"), _p("to_x", "number"), _p("to_y", "number")
    ),
    "keyboard_press": (_p("key", "key"),),
    "keyboard_down": (_p("key", "key"),),
    "keyboard_up": (_p("key", "key"),),
    "keyboard_type": (_p("text", "str"),),
    "keyboard_insert_text": (_p("text", "str"),),
    # navigation and tabs
    "goto": (_p("url", "str"),),
    "go_back": (),
    "go_forward": (),
    "new_tab": (),
    "tab_close": (),
    "tab_focus": (_p("index", "int"),),
}

#: BrowserGym actions deliberately not offered, with the reason given to the caller.
UNSUPPORTED_ACTIONS = {
    "upload_file": "uploading files from the server's disk is disabled in this environment",
    "mouse_upload_file": "uploading files from the server's disk is disabled in this environment",
}

#: Key names `send_keys` presses as one key (anything else is typed as text).
_NAMED_KEYS = {
    "Enter", "Tab", "Escape", "Backspace", "Delete", "Insert", "Home", "End", "PageUp",
    "PageDown", "ArrowUp", "ArrowDown", "ArrowLeft", "ArrowRight", "Space", "Shift", "Control",
    "Alt", "Meta", *(f"F{i}" for i in range(1, 13)),
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
        raise ActionParseError(f"modifiers must be a list drawn from {', '.join(_MODIFIERS)}, got {_describe(v)}")
    return tuple(v)


def _check_str_or_list(v: Any) -> str | tuple[str, ...]:
    if isinstance(v, (list, tuple)):
        if len(v) > 100:
            raise ActionParseError(f"list of {len(v)} options is longer than the limit of 100")
        return tuple(_check_str(x) for x in v)
    return _check_str(v)


_CHECKS = {
    "str": _check_str,
    "key": lambda v: _check_str(v, 100),
    "number": _check_number,
    "int": _check_int,
    "bool": _check_bool,
    "button": _check_button,
    "modifiers": _check_modifiers,
    "str_or_list": _check_str_or_list,
}


def _describe(v: Any) -> str:
    text = repr(v)
    return f"{type(v).__name__} {text[:40] + '...' if len(text) > 40 else text}"


# -- literal evaluation (the only values an action may carry) -------------------------
def _literal(node: ast.AST) -> Any:
    if isinstance(node, ast.Constant) and (node.value is None or isinstance(node.value, (str, int, float, bool))):
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
    raise ActionParseError(f"arguments must be literals (strings, numbers, True/False, lists); got {_node_kind(node)}")


def _node_kind(node: ast.AST) -> str:
    kinds = {
        ast.Name: "a variable name", ast.Attribute: "attribute access", ast.Call: "a function call",
        ast.Lambda: "a lambda", ast.Starred: "a starred argument", ast.BinOp: "an arithmetic expression",
        ast.Subscript: "a subscript", ast.JoinedStr: "an f-string", ast.Dict: "a dict",
    }
    for cls, words in kinds.items():
        if isinstance(node, cls):
            return words
    return f"a {type(node).__name__} expression"


# -- binding --------------------------------------------------------------------------
def _bind(name: str, args: list[Any], kwargs: dict[str, Any]) -> ParsedAction:
    params = ACTION_SIGNATURES[name]
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
            if param.default is _REQUIRED:
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
    return ParsedAction(name, checked)


def _alias(name: str, args: list[Any], kwargs: dict[str, Any]) -> ParsedAction | None:
    """OpenEnv harness aliases: ``send_keys(text)`` and ``scroll('down'|'up'|'left'|'right')``."""
    if name == "send_keys":
        if kwargs.keys() - {"text"} or len(args) + len(kwargs) != 1:
            raise ActionParseError("send_keys() takes exactly one argument: the text or key to send")
        text = _check_str(args[0] if args else kwargs["text"])
        parts = text.split("+")
        if all(part in _NAMED_KEYS or (len(part) == 1 and len(parts) > 1) for part in parts):
            return ParsedAction("keyboard_press", {"key": text})
        return ParsedAction("keyboard_type", {"text": text})
    if name == "scroll" and len(args) + len(kwargs) == 1:
        direction = args[0] if args else kwargs.get("direction")
        moves = {"down": (0, SCROLL_STEP), "up": (0, -SCROLL_STEP), "right": (SCROLL_STEP, 0), "left": (-SCROLL_STEP, 0)}
        if direction not in moves:
            raise ActionParseError(
                "scroll() takes either (delta_x, delta_y) or one direction: 'up', 'down', 'left' or 'right'"
            )
        dx, dy = moves[direction]
        return ParsedAction("scroll", {"delta_x": dx, "delta_y": dy})
    return None


def _parse_call(stmt: ast.stmt) -> ParsedAction:
    if not isinstance(stmt, ast.Expr) or not isinstance(stmt.value, ast.Call):
        raise ActionParseError(f"each line must be a single action call such as click('12'); got a {type(stmt).__name__} statement")
    call = stmt.value
    if not isinstance(call.func, ast.Name):
        raise ActionParseError(f"the action must be called by its bare name; got {_node_kind(call.func)}")
    name = call.func.id
    if name in UNSUPPORTED_ACTIONS:
        raise ActionParseError(f"{name}() is not available: {UNSUPPORTED_ACTIONS[name]}")
    if name not in ACTION_SIGNATURES and name != "send_keys":
        raise ActionParseError(f"unknown action {name!r}; valid actions: {', '.join(sorted(ACTION_SIGNATURES))}, send_keys")
    args = [_literal(a) for a in call.args]
    kwargs: dict[str, Any] = {}
    for kw in call.keywords:
        if kw.arg is None:
            raise ActionParseError("**keyword unpacking is not allowed in actions")
        kwargs[kw.arg] = _literal(kw.value)
    return _alias(name, args, kwargs) or _bind(name, args, kwargs)


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
        raise ActionParseError(f"not a valid action call: {e.msg} (line {e.lineno}, column {e.offset})") from None
    except (RecursionError, MemoryError, ValueError) as e:
        raise ActionParseError(f"not a valid action call: {type(e).__name__}") from None
    if not module.body:
        raise ActionParseError("received an empty action; send e.g. noop() to do nothing")
    if len(module.body) > MAX_CALLS:
        raise ActionParseError(f"{len(module.body)} calls in one action; the limit is {MAX_CALLS}")
    return [_parse_call(stmt) for stmt in module.body]
