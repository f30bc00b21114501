"""Model text -> one BrowserGym tool call: what real models write, read without evaluating it.

The tools are `action_tools.ACTION_TOOLS` (derived from the actions `executor.py` declares;
re-exported here with `DEFAULT_TOOL_NAMES` and `build_browsergym_action_str`).

`build_browsergym_action_tool_call(text)` reads what real models write: `Action: click('13')`,
code fences, double quotes, `click(13)`, prose around the call, several calls (the first
valid one wins, and calls after an `Action:` marker win over calls in the reasoning), JSON
tool-call blobs (also as Python dicts). Arguments are parsed with `ast` as literals only;
nothing is evaluated.
When nothing parses it returns `noop()` with the problem in `ToolCall.metadata["parse_error"]`.
"""

from __future__ import annotations

import ast
import functools
import itertools
import re
from typing import Any

from envharness.envs.browsergym.action_set import SCROLL_DIRECTIONS
from envharness.envs.browsergym.action_tools import (
    ACTION_TOOLS,
    DEFAULT_TOOL_NAMES,
    NUM,
    STR,
    ActionTool,
    build_browsergym_action_str,
)
from envharness.envs.browsergym.executor import ACTIONS
from envharness.harness.tool_parsing import iter_json_objects, tool_call_from_json
from envharness.harness.types import ToolCall

#: Keyword spellings models use for our parameter names.
_KEYWORD_ALIASES = {"value": "text", "element": "bid", "id": "bid", "dir": "direction"}


@functools.lru_cache(maxsize=4)
def _call_start(version: int) -> re.Pattern[str]:
    """A call of any tool, for the tools of this registry version. Case-insensitive: small
    models write `Click('13')` and `CLICK('13')` as often as `click('13')`."""
    return re.compile(
        r"(?<![\w.])(" + "|".join(sorted(ACTION_TOOLS, key=len, reverse=True)) + r")\s*\(", re.IGNORECASE
    )


_ACTION_MARKER = re.compile(r"\baction\s*:", re.IGNORECASE)
#: Bounds on the work one model output can cause (degenerate outputs repeat "click(" or
#: "{" thousands of times): the longest call or dict read, and how many of each are tried.
_MAX_SPAN_CHARS = 4000
_MAX_CANDIDATES = 64
#: What parsing hostile text with `ast` may raise: `{{}}` is an unhashable set (TypeError),
#: very deep nesting exhausts the parser (RecursionError/MemoryError).
_LITERAL_ERRORS = (ValueError, TypeError, SyntaxError, RecursionError, MemoryError)
_SMART_QUOTES = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"'})


def _call_span(text: str, open_paren: int) -> int | None:
    """Index just past the parenthesis closing the one at `open_paren` (quotes respected);
    None when it does not close within `_MAX_SPAN_CHARS`."""
    depth, quote, i = 0, None, open_paren
    stop = min(len(text), open_paren + _MAX_SPAN_CHARS)
    while i < stop:
        ch = text[i]
        if quote:
            if ch == "\\":
                i += 1
            elif ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return None


def _coerce(tool: ActionTool, param: str, value: Any) -> Any:
    """`value` as the JSON type of `param` (numbers a model wrote for text become text)."""
    kind = dict(tool.params)[param]
    if kind == STR or (isinstance(kind, list) and not isinstance(value, list)):
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise ValueError(f"{param} must be text, got {value!r}")
        return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)
    if kind == NUM and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise ValueError(f"{param} must be a number, got {value!r}")
    if kind == "integer" and (isinstance(value, bool) or not isinstance(value, int)):
        raise ValueError(f"{param} must be a whole number, got {value!r}")
    if kind == "boolean" and not isinstance(value, bool):
        raise ValueError(f"{param} must be True or False, got {value!r}")
    if kind == "array" and not isinstance(value, list):
        raise ValueError(f"{param} must be a list, got {value!r}")
    if isinstance(value, list) and not all(isinstance(v, str) for v in value):
        raise ValueError(f"{param} must be a list of text")
    return value


def _normalize(name: str, positional: list[Any], keywords: dict[str, Any]) -> dict[str, Any]:
    """Our tool arguments for a call written BrowserGym's way (raises ValueError when it cannot be)."""
    tool = ACTION_TOOLS[name]
    if name == "scroll" and len(positional) == 2 and not keywords:  # BrowserGym's scroll(dx, dy)
        dx, dy = positional
        if (
            not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (dx, dy))
            or dx == dy == 0
        ):
            raise ValueError("scroll(dx, dy) needs two numbers, not both zero")
        if dy:
            return {"direction": "down" if dy > 0 else "up"}
        return {"direction": "right" if dx > 0 else "left"}
    if name == "noop" and positional and not isinstance(positional[0], (int, float)):
        raise ValueError("noop takes an optional number of milliseconds")
    names = [p for p, _ in tool.params]
    if len(positional) > len(names):
        raise ValueError(f"{name} takes at most {len(names)} argument(s), got {len(positional)}")
    args = dict(zip(names, positional))
    renamed = dict(tool.aliases)
    for key, value in keywords.items():
        key = key if key in names else renamed.get(key) or _KEYWORD_ALIASES.get(key, key)
        if key not in names:
            raise ValueError(f"{name} has no argument {key!r}")
        args[key] = value
    missing = [p for p in tool.required if p not in args]
    if missing:
        raise ValueError(f"{name} needs {', '.join(missing)}")
    args = {k: _coerce(tool, k, v) for k, v in args.items()}
    for param in tool.declared:
        if param.kind == "direction" and param.name in args:  # models write 'Down', ' up'
            args[param.name] = args[param.name].strip().lower()
            if args[param.name] not in SCROLL_DIRECTIONS:
                raise ValueError(f"{name} direction must be one of {', '.join(SCROLL_DIRECTIONS)}")
    return args


def _parse_call(source: str) -> tuple[str, dict[str, Any]]:
    """One `name(args...)` call as (tool name, arguments); literals only."""
    try:
        node = ast.parse(source.strip(), mode="eval").body
    except SyntaxError:
        node = ast.parse(
            source.strip().translate(_SMART_QUOTES), mode="eval"
        ).body  # raises SyntaxError again if hopeless
    if (
        not isinstance(node, ast.Call)
        or not isinstance(node.func, ast.Name)
        or node.func.id.lower() not in ACTION_TOOLS
    ):
        raise ValueError(f"not an action call: {source[:80]!r}")
    name = node.func.id.lower()
    try:
        positional = [ast.literal_eval(a) for a in node.args]
        keywords = {kw.arg: ast.literal_eval(kw.value) for kw in node.keywords if kw.arg}
    except _LITERAL_ERRORS:
        raise ValueError(f"arguments must be literals (quoted text or numbers): {source[:80]!r}") from None
    if any(kw.arg is None for kw in node.keywords) or any(isinstance(a, ast.Starred) for a in node.args):
        raise ValueError("*args/**kwargs are not allowed")
    return name, _normalize(name, positional, keywords)


def _json_candidate(obj: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """A JSON blob as an action: `{"name": "click", "arguments": {...}}`, `{"action": "click", "bid": ...}`
    or `{"action": "click('13')"}`."""
    for key in ("action", "action_str", "command", "code"):
        value = obj.get(key)
        if isinstance(value, str) and "(" in value:
            return _parse_call(value)
    call = tool_call_from_json(obj, call_id="")
    if call is None or call.name not in ACTION_TOOLS:
        raise ValueError("JSON object is not a BrowserGym tool call")
    args = call.args or {
        k: v for k, v in obj.items() if k not in ("name", "tool", "tool_name", "action", "type")
    }
    return call.name, _normalize(call.name, [], args)


def _candidates(text: str, marker: int | None) -> list[tuple[int, str, Any]]:
    """(position, kind, payload) of everything that might be the action, in text order.
    Calls are looked for after the `Action:` marker first, so reasoning cannot crowd them out."""
    found: list[tuple[int, str, Any]] = []
    call_start = _call_start(ACTIONS.version)
    after = [] if marker is None else itertools.islice(call_start.finditer(text, marker), _MAX_CANDIDATES)
    before = itertools.takewhile(lambda m: marker is None or m.start() < marker, call_start.finditer(text))
    for match in itertools.chain(after, itertools.islice(before, _MAX_CANDIDATES)):
        end = _call_span(text, match.end() - 1)
        if end is not None:
            found.append((match.start(), "call", text[match.start() : end]))
    json_objects = list(iter_json_objects(text))
    found.extend((pos, "json", obj) for pos, obj in json_objects)
    found.extend(_python_dicts(text, skip={pos for pos, _ in json_objects}))
    return sorted(found, key=lambda c: c[0])


def _python_dicts(text: str, skip: set[int]) -> list[tuple[int, str, Any]]:
    """Tool calls written as Python dicts (`{'name': 'click', ...}`, single quotes), which
    small models often produce; read with `ast.literal_eval` (literals only), never eval."""
    found: list[tuple[int, str, Any]] = []
    pos = text.find("{")
    for _ in range(_MAX_CANDIDATES):
        if pos == -1:
            break
        end = _call_span(text, pos)
        if end is not None and pos in skip:  # a JSON object, already a candidate: skip it whole
            pos = text.find("{", end)
            continue
        if end is not None:
            try:
                value = ast.literal_eval(text[pos:end])
            except _LITERAL_ERRORS:
                value = None
            if isinstance(value, dict):
                found.append((pos, "json", value))
                pos = text.find("{", end)
                continue
        pos = text.find("{", pos + 1)
    return found


def build_browsergym_action_tool_call(text: str) -> ToolCall:
    """Exactly one tool call for a model's output; `noop()` with `metadata["parse_error"]` if none parses."""
    text = text or ""
    marker = max((m.end() for m in _ACTION_MARKER.finditer(text)), default=None)
    candidates = _candidates(text, marker)
    if marker is not None:  # the declared action first, then the rest in order
        candidates = [c for c in candidates if c[0] >= marker] + [c for c in candidates if c[0] < marker]
    problems: list[str] = []
    for _, kind, payload in candidates:
        try:
            name, args = _parse_call(payload) if kind == "call" else _json_candidate(payload)
        except _LITERAL_ERRORS as exc:
            problems.append(
                str(exc) if type(exc) is ValueError else f"{type(exc).__name__} in {str(payload)[:60]!r}"
            )
            continue
        return ToolCall(id=f"browsergym-{name}", name=name, args=args)
    reason = "; ".join(problems[:3]) if problems else "no BrowserGym action found in the model output"
    return ToolCall(
        id="browsergym-noop", name="noop", args={}, metadata={"parse_error": reason, "raw_text": text[:500]}
    )


__all__ = [
    "ACTION_TOOLS",
    "DEFAULT_TOOL_NAMES",
    "SCROLL_DIRECTIONS",
    "ActionTool",
    "build_browsergym_action_str",
    "build_browsergym_action_tool_call",
]
