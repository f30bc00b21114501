"""`/mcp` on the FastAPI app: MCP streamable HTTP (the SDK's session manager) and OpenEnv's dialect.

`mount_mcp(app, manager, name)` adds the route and returns an `McpEndpoint` whose
`running()` the app's lifespan enters. The route sits behind the app's bearer-token
middleware like every other route. MCP sessions are bounded like /ws: at most
`max_sessions` at once, closed after the idle timeout; each one's environment comes from
the same `SessionManager`, so /ws, HTTP and MCP share the capacity limit.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import FastAPI
from starlette.types import Receive, Scope, Send

from envharness.core import wire_json
from envharness.core.sessions import SessionManager
from envharness.core.wire_json import JSONLimitError
from envharness.mcp.handle import EnvSessionHandle

log = logging.getLogger(__name__)
MAX_BODY_BYTES = 4 * 1024 * 1024


def _not_session_end_noise(record: logging.LogRecord) -> bool:
    """The SDK logs a ClosedResourceError traceback whenever a client ends its session
    (its GET stream's reader is closed by the DELETE); that is a normal end, not an error."""
    exc = record.exc_info[1] if record.exc_info else None
    return not (
        record.getMessage() == "Error in standalone SSE writer"
        and type(exc).__name__ == "ClosedResourceError"
    )


logging.getLogger("mcp.server.streamable_http").addFilter(_not_session_end_noise)


class McpEndpoint:
    """The ASGI app behind `/mcp`. The SDK (a fifth of a server's start-up imports) is imported,
    and its session manager started, at the first `/mcp` request: a server that nobody asks for
    tools starts without it. A fresh SDK session manager each time the app starts."""

    def __init__(self, manager: SessionManager, name: str, fixed: tuple[str, ...] = ()) -> None:
        from envharness.mcp.outcomes import RolloutOutcomes

        self.manager, self.name, self.fixed = manager, name, fixed
        self.outcomes = RolloutOutcomes()  # what tagged sessions earned (`/mcp/rollouts/{id}`)
        self.provider: Any = None
        self.server: Any = None
        self.dialect: Any = None
        self._http: Any = None
        self._serving: asyncio.Task | None = None
        self._stop: asyncio.Event | None = None
        self._starting = asyncio.Lock()
        self._app_running = False

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        self._app_running = True
        try:
            yield
        finally:
            self._app_running = False
            if self._serving is not None:
                assert self._stop is not None
                self._stop.set()
                await self._serving
            self._serving = self._http = None
            if self.dialect is not None:
                await self.dialect.close()

    async def _started(self) -> Any:
        """The SDK's session manager, started on first use (in a task that holds its task group
        until the app stops); None once the app is stopping."""
        async with self._starting:
            if self._http is None and self._app_running:  # (no await between this check and the task's start)
                from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

                if self.server is None:
                    from envharness.mcp.openenv_dialect import OpenEnvDialect
                    from envharness.mcp.server import ToolsetProvider, build_server

                    self.provider = ToolsetProvider(self.manager, self.name, self.fixed)
                    self.server = build_server(self.manager, self.name, self.provider, self.outcomes)
                    self.dialect = OpenEnvDialect(self.manager, self.provider)
                http = StreamableHTTPSessionManager(
                    self.server,
                    session_idle_timeout=self.manager.idle_timeout_s,
                    max_sessions=self.manager.max_sessions,
                )
                started, self._stop = asyncio.Event(), asyncio.Event()

                async def serve() -> None:
                    async with http.run():
                        started.set()
                        await self._stop.wait()

                self._serving = asyncio.create_task(serve())
                waiting = asyncio.create_task(started.wait())
                await asyncio.wait({self._serving, waiting}, return_when=asyncio.FIRST_COMPLETED)
                waiting.cancel()
                if self._serving.done():  # it failed to start: say why, and try again next time
                    serving, self._serving = self._serving, None
                    serving.result()
                self._http = http
            return self._http

    def shared_handle(self, session_id: str | None) -> EnvSessionHandle | None:
        """The environment of an OpenEnv-dialect MCP session, for the WebSocket that
        OpenEnv's `MCPToolClient` opens with `?session_id=` (None: not one of ours)."""
        return self.dialect.handles.get(session_id) if session_id and self.dialect is not None else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not self._app_running:
            await _json(send, 503, {"detail": "the MCP endpoint is not running"})
            return
        http = await self._started()
        if http is None:
            await _json(send, 503, {"detail": "the MCP endpoint is not running"})
            return
        headers = dict(scope.get("headers") or [])
        if scope["method"] == "POST":
            body = await _read_body(receive)
            if body is None:
                await _json(send, 413, {"detail": f"request body over {MAX_BODY_BYTES} bytes"})
                return
            from envharness.mcp.openenv_dialect import is_openenv_request, parse_error

            beyond = _beyond_limits(body)
            if beyond is not None:  # the SDK would answer 500 with a traceback in the log
                await _json(send, 400, parse_error(beyond))
                return
            if b"mcp-session-id" not in headers and is_openenv_request(body):
                await _json(send, 200, await self.dialect.answer(body))
                return
            receive = _replay(body, receive)
        await http.handle_request(scope, receive, send)


def mount_mcp(app: FastAPI, manager: SessionManager, name: str) -> Callable[[], Any] | None:
    """Add `/mcp` to `app` (the endpoint is `app.state.mcp`); returns what runs while the app
    runs. None (and a log line) when the `mcp` SDK is not installed."""
    if importlib.util.find_spec("mcp") is None:
        log.info("no /mcp route: the mcp SDK is not installed; pip install 'envharness[mcp]'")
        return None
    endpoint = McpEndpoint(manager, name, tuple(getattr(app.state, "mcp_fixed", ())))
    for path in ("/mcp", "/mcp/"):
        app.add_route(path, endpoint, methods=["GET", "POST", "DELETE"], include_in_schema=False)
    _add_outcome_routes(app, endpoint)
    app.state.mcp = endpoint  # /ws sessions may share an MCP session's environment
    return endpoint.running


def _add_outcome_routes(app: FastAPI, endpoint: McpEndpoint) -> None:
    """`GET /mcp/rollouts/{id}`: what a tagged MCP session earned; `DELETE` forgets it."""
    from fastapi import HTTPException

    @app.get("/mcp/rollouts/{rollout_id}", include_in_schema=False)
    async def rollout_outcome(rollout_id: str) -> dict:
        outcome = endpoint.outcomes.get(rollout_id)
        if outcome is None:
            raise HTTPException(404, f"no MCP tool call was tagged with rollout {rollout_id!r}")
        return outcome.to_dict()

    @app.delete("/mcp/rollouts/{rollout_id}", include_in_schema=False)
    async def forget_outcome(rollout_id: str) -> dict:
        outcome = endpoint.outcomes.pop(rollout_id)
        return outcome.to_dict() if outcome is not None else {}


def _beyond_limits(body: bytes) -> JSONLimitError | None:
    """Whether `body` is JSON past the declared limits (`core/wire_json.py`), checked before
    the MCP SDK parses it; malformed JSON is left to the SDK's own parse error."""
    try:
        wire_json.loads(body)
    except JSONLimitError as exc:
        return exc
    except (ValueError, UnicodeDecodeError):
        pass
    return None


async def _read_body(receive: Receive) -> bytes | None:
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks)
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            return None
        chunks.append(chunk)
        if not message.get("more_body"):
            return b"".join(chunks)


def _replay(body: bytes, original: Receive) -> Receive:
    """The body already read, then the connection's own messages (its disconnect)."""
    sent = False

    async def receive() -> dict:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await original()

    return receive


async def _json(send: Send, status: int, payload: dict) -> None:
    body = json.dumps(payload).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})
