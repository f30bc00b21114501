"""The JSON a server reads from a client, with declared limits on how deep and how long a number.

Python's `json` breaks on two hostile inputs in ways a handler that catches `JSONDecodeError`
does not expect: nesting deeper than the interpreter's recursion limit (about 1000) raises
`RecursionError`, and an integer longer than `sys.get_int_max_str_digits()` raises a plain
`ValueError`. Both answered a bare 500 or an `EXECUTION_ERROR` with a traceback. Every
server's body and frame (the environment server's HTTP and WebSocket, the policy endpoint) and
`replay`'s run folders are read here instead, under limits declared once, well inside what
Python can hold, so a refusal says which limit in words (`JSONLimitError`).
"""

from __future__ import annotations

import json
from typing import Any

#: The deepest nesting of objects and arrays a client may send (`{"a": [1]}` is 2 deep). An
#: action, a reset's options or a chat request with JSON-schema tools is a few levels; the
#: limit leaves room for any of them and for the handlers' own stack below Python's.
MAX_DEPTH = 100
#: The most digits an integer may have (a seed is at most 19; Python refuses over 4300).
MAX_INT_DIGITS = 1000


class JSONLimitError(ValueError):
    """Valid JSON beyond a declared limit: the client's mistake, said in words."""


def _int(text: str) -> int:
    if len(text) - text.startswith("-") > MAX_INT_DIGITS:
        raise JSONLimitError(f"a number in the JSON has more than {MAX_INT_DIGITS} digits")
    return int(text)


def loads(raw: str | bytes) -> Any:
    """`json.loads(raw)`, refusing (`JSONLimitError`) what is nested deeper than `MAX_DEPTH`
    or holds an integer of more than `MAX_INT_DIGITS` digits. Malformed JSON raises as
    `json.loads` does (`JSONDecodeError`, `UnicodeDecodeError`)."""
    try:
        value = json.loads(raw, parse_int=_int)
    except RecursionError:  # deeper than Python parses: far over the limit
        raise JSONLimitError(_too_deep()) from None
    check_depth(value)
    return value


def check_depth(value: Any) -> None:
    """Raise `JSONLimitError` when `value` nests lists and dicts deeper than `MAX_DEPTH`;
    walked with a stack of its own, so a deep value cannot exhaust Python's."""
    pending: list[tuple[Any, int]] = [(value, 1)]
    while pending:
        node, depth = pending.pop()
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else None
        if children is None:
            continue
        if depth > MAX_DEPTH:
            raise JSONLimitError(_too_deep())
        pending.extend((child, depth + 1) for child in children if isinstance(child, dict | list))


def _too_deep() -> str:
    return f"the JSON is nested deeper than {MAX_DEPTH} levels of objects and arrays"


__all__ = ["MAX_DEPTH", "MAX_INT_DIGITS", "JSONLimitError", "check_depth", "loads"]
