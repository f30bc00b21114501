"""Tool calls written as JSON inside model text.

Models that were taught tool calling write them as JSON: bare, in a code fence, or in
`<tool_call>...</tool_call>` tags (Hermes/Qwen), under a few key spellings. This module
finds such objects anywhere in the text with `json`'s own decoder (never eval) and turns
them into `ToolCall`s. It is the default parser of `BatchingModelStep`; env-specific
parsers (BrowserGym's action text) build on it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

from envharness.harness.types import ToolCall

ToolCallParser = Callable[[str], "ToolCall | list[ToolCall] | None"]

_decoder = json.JSONDecoder()


#: Braces tried before giving up: degenerate output ("{{{{..." for thousands of tokens)
#: would otherwise cost one decode attempt per brace.
MAX_JSON_ATTEMPTS = 256


def iter_json_objects(
    text: str, max_attempts: int = MAX_JSON_ATTEMPTS
) -> Iterator[tuple[int, dict[str, Any]]]:
    """(position, object) of every top-level JSON object in `text`, in order (nested ones
    are not repeated). Never raises on hostile text: too-deep nesting is just not JSON."""
    pos = text.find("{")
    attempts = 0
    while pos != -1 and attempts < max_attempts:
        attempts += 1
        try:
            value, end = _decoder.raw_decode(text, pos)
        except (json.JSONDecodeError, RecursionError):
            pos = text.find("{", pos + 1)
            continue
        if isinstance(value, dict):
            yield pos, value
        pos = text.find("{", end)


def tool_call_from_json(obj: dict[str, Any], call_id: str) -> ToolCall | None:
    """A ToolCall from the common JSON spellings, or None when `obj` is not a tool call.

    Accepted: `{"name", "arguments"|"args"|"parameters"}`, `{"tool"|"tool_name"|"action", ...}`,
    OpenAI's `{"function": {"name", "arguments": "<json string>"}}`.
    """
    if isinstance(obj.get("function"), dict):
        obj = obj["function"]
    name = next(
        (obj[k] for k in ("name", "tool", "tool_name", "action") if isinstance(obj.get(k), str)), None
    )
    if not name or not name.isidentifier():
        return None
    args: Any = next((obj[k] for k in ("arguments", "args", "parameters", "input") if k in obj), {})
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError:
            return None
    if not isinstance(args, dict):
        return None
    return ToolCall(id=call_id, name=name, args=args)


def parse_json_tool_calls(text: str) -> list[ToolCall]:
    """All JSON tool calls in `text` (an empty list when there are none: the model is done)."""
    calls: list[ToolCall] = []
    for _, obj in iter_json_objects(text):
        call = tool_call_from_json(obj, call_id=f"call_{len(calls)}")
        if call is not None:
            calls.append(call)
    return calls


def normalize_parsed(value: ToolCall | list[ToolCall] | None) -> list[ToolCall]:
    """A parser's result as a list (parsers may return one call, a list, or None); anything
    else is refused in words, at the first reply it reads."""
    if value is None:
        return []
    if isinstance(value, ToolCall):
        return [value]
    calls = list(value) if isinstance(value, list | tuple) else [value]
    wrong = next((c for c in calls if not isinstance(c, ToolCall)), None)
    if wrong is not None:
        raise TypeError(
            f"the tool_call_parser returned {type(wrong).__name__} ({wrong!r:.80}); it must return a "
            "ToolCall, a list of ToolCall, or None: from envharness import ToolCall; "
            "ToolCall(id='call_0', name=TOOL, args={...})"
        )
    return calls
