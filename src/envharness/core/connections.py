"""How much one client can make a server hold: WebSocket frames and half-sent HTTP requests.

uvicorn reads a whole WebSocket message before the app sees it, up to `ws_max_size`; a frame
larger than that is refused from its header (close 1009, nothing buffered). So the size is the
app's own message limit plus room for the envelope: a message a little over the limit gets
MESSAGE_TOO_LARGE in words, a larger one never reaches memory.

uvicorn has no timeout for a request's headers: its keep-alive timeout runs only after a
response, so a client that opens a connection and sends half a request holds it, and its
buffers, forever. `HeaderTimeout` closes a connection whose request line and headers are not
all in within `HEADER_TIMEOUT_S`, from its opening and after every response. A request
whose headers are in is never cut, however long its route takes.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.auto import AutoHTTPProtocol

#: Room over the message limit for the envelope of a message refused in words.
WS_FRAME_HEADROOM = 64 * 1024
#: Messages uvicorn's (legacy) websockets protocol reads ahead of the app; the default is 32.
WS_MAX_QUEUE = 2
#: Seconds a client has to send a request's line and headers (nginx: 60, Apache: 20 to 40).
HEADER_TIMEOUT_S = 10.0


def ws_max_size(message_limit: int) -> int:
    """The largest WebSocket message uvicorn reads for an app that takes `message_limit` bytes."""
    return message_limit + WS_FRAME_HEADROOM


class HeaderTimeout(AutoHTTPProtocol):  # type: ignore[misc,valid-type]
    """uvicorn's HTTP protocol (httptools, or h11 without it), closing a connection whose next
    request's headers do not arrive within `header_timeout_s`."""

    header_timeout_s = HEADER_TIMEOUT_S

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_header_timer()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._arm_header_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_header_timer()
        super().connection_lost(exc)

    def _arm_header_timer(self) -> None:
        self._disarm_header_timer()
        self._header_timer = self.loop.call_later(self.header_timeout_s, self._headers_due)

    def _disarm_header_timer(self) -> None:
        timer = getattr(self, "_header_timer", None)
        if timer is not None:
            timer.cancel()
        self._header_timer = None

    def _headers_due(self) -> None:
        self._header_timer = None
        transport: Any = self.transport
        if transport is None or transport.is_closing() or transport.get_protocol() is not self:
            return  # closed already, or upgraded to a WebSocket that answers for itself
        cycle = getattr(self, "cycle", None)
        if cycle is not None and not cycle.response_complete:
            return  # its headers came in: the route runs (the response re-arms the timer)
        transport.close()
