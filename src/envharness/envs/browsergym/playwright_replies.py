"""Playwright's replies, read without walking those that hold no Playwright object.

Playwright's Python client turns every reply into its own objects: `Connection.dispatch` copies
the reply's whole `result`, item by item, to swap each ``{"guid": ...}`` it finds for the object's
channel. A reply to CDP's ``Accessibility.getFullAXTree`` has thousands of items and no guid;
profiled under the RL benchmark, that copy was the server's largest cost after the socket itself.

`install()` lets the transport look at the raw bytes first: a reply whose text holds no
``"guid"`` cannot hold a Playwright object, so its `result` is passed on as parsed, uncopied.
Every other message is read exactly as before. (The driver writes keys as plain JSON: a key is
never spelled with escapes.)
"""

from __future__ import annotations

from typing import Any

_installed = False


class _Plain:
    """A reply's `result` known to hold no Playwright object."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


def install() -> None:
    """Patch Playwright's transport and connection as described above (idempotent)."""
    global _installed
    if _installed:
        return
    from playwright._impl import _connection, _transport

    deserialize = _transport.Transport.deserialize_message
    replace = _connection.Connection._replace_guids_with_channels

    def deserialize_message(self: Any, data: str | bytes) -> Any:
        message = deserialize(self, data)
        if "id" in message and "result" in message and "error" not in message:
            marker = b'"guid"' if isinstance(data, bytes) else '"guid"'
            if marker not in data:
                message["result"] = _Plain(message["result"])
        return message

    def replace_guids_with_channels(self: Any, payload: Any) -> Any:
        if type(payload) is _Plain:
            return payload.value
        return replace(self, payload)

    _transport.Transport.deserialize_message = deserialize_message
    _connection.Connection._replace_guids_with_channels = replace_guids_with_channels
    _installed = True
