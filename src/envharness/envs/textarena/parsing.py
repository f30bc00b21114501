"""A model's plain-text reply -> the `send` call that plays its move.

Small models rarely emit JSON tool calls, and TextArena's own convention is a bracketed move
in free text ("I'll try [crane]"). In order, the parser takes:

1. JSON tool calls (``{"name": "send", "arguments": {"message": "[crane]"}}``); the names
   ``guess``/``move``/``play``/``answer`` are read as `send`, and a Wordle-style ``word``
   argument becomes ``[word]``;
2. a call written as code: ``send("[crane]")``, ``guess('crane')``, ``send(message="[A C]")``
   (read with a regex, never evaluated);
3. the last bracketed move in the text: ``[crane]``, ``[1 2 3 4]``, ``[A C]``;
4. ``guess: crane`` / ``Move: A C`` / ``Answer: 12`` -> ``[crane]`` / ``[A C]`` / ``[12]``;
5. otherwise the last non-empty line (at most 200 characters), marked ``parse_error``, so the
   game answers with its own invalid-move message.

An empty reply is no call (the episode ends).
"""

from __future__ import annotations

import re

from envharness.harness.tool_parsing import iter_json_objects, tool_call_from_json
from envharness.harness.types import ToolCall

ALIASES = {"send", "guess", "move", "play", "answer", "submit", "step"}
_CODE_CALL = re.compile(
    r"\b(send|guess|move|play|answer|submit)\s*\(\s*(?:\w+\s*=\s*)?(['\"])(.{1,200}?)\2\s*\)",
    re.IGNORECASE | re.DOTALL,
)
_BRACKETED = re.compile(r"\[([^\[\]\n]{1,200})\]")
_LABELLED = re.compile(
    r"^\s*(?:final\s+)?(?:guess|move|answer)\s*[:=]\s*\**\s*([^\n*]{1,200}?)\s*\**\s*$",
    re.IGNORECASE | re.MULTILINE,
)
MAX_FALLBACK = 200


def _bracket(text: str) -> str:
    text = text.strip()
    return text if text.startswith("[") and text.endswith("]") else f"[{text.strip('[]')}]"


def _send(message: str, **metadata: str) -> ToolCall:
    return ToolCall(id="call_0", name="send", args={"message": message}, metadata=dict(metadata))


def _from_json(text: str) -> ToolCall | None:
    for _, obj in iter_json_objects(text):
        call = tool_call_from_json(obj, call_id="call_0")
        if call is None or call.name.lower() not in ALIASES:
            continue
        args = call.args
        value = next(
            (
                args[k]
                for k in ("message", "move", "action", "guess", "word", "text")
                if isinstance(args.get(k), str)
            ),
            None,
        )
        if value is None and len(args) == 1 and isinstance(next(iter(args.values())), (str, int)):
            value = str(next(iter(args.values())))
        if value is None or not value.strip():
            continue
        word_like = call.name.lower() == "guess" or "word" in args or "guess" in args
        return _send(_bracket(value) if word_like else value)
    return None


def parse_move(text: str) -> ToolCall | None:
    """The `send` call in a reply (see the module docstring), or None for an empty reply."""
    if not text or not text.strip():
        return None
    if "{" in text and (call := _from_json(text)) is not None:
        return call
    calls = list(_CODE_CALL.finditer(text))
    if calls:
        name, value = calls[-1].group(1).lower(), calls[-1].group(3)
        return _send(_bracket(value) if name == "guess" else value)
    bracketed = [m.group(0) for m in _BRACKETED.finditer(text) if m.group(1).strip()]
    if bracketed:
        return _send(bracketed[-1])
    labelled = _LABELLED.findall(text)
    if labelled:
        return _send(_bracket(labelled[-1]))
    last = next(line.strip() for line in reversed(text.strip().splitlines()) if line.strip())
    return _send(last[:MAX_FALLBACK], parse_error="no bracketed move in the reply; its last line was sent")


__all__ = ["parse_move"]
