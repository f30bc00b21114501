"""`create_app(env_factory, ...)`: the routes that serve any `Environment`.

The wire lives in `protocol.py`, session bookkeeping in `sessions.py`; this module only
maps requests onto them. HTTP /reset, /step and /state are stateless as in OpenEnv: each
runs on a fresh environment that is closed afterwards (/step resets it first). Episodes
that span several steps use the WebSocket, one environment per connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import logging
import signal
import socket
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute, APIWebSocketRoute
from pydantic import BaseModel, ValidationError
from starlette.middleware import Middleware

from envharness.core import wire_json
from envharness.core.connections import WS_MAX_QUEUE, HeaderTimeout, ws_max_size
from envharness.core.guards import (
    Access,
    BodyLimit,
    HostOriginGuard,
    Refusal,
    Refusals,
    TokenGuard,
    checked_origins,
)
from envharness.core.mounts import AppMount, resolve_mounts
from envharness.core.protocol import (
    HTTP_STATUS,
    ErrorCode,
    HealthResponse,
    ProtocolError,
    ResetRequest,
    SchemaResponse,
    StepRequest,
    error_message,
    serialize_observation,
    validation_error,
)
from envharness.core.sessions import EnvFactory, SessionManager, run_reset, run_state, run_step
from envharness.core.task_api import mount_task_api
from envharness.core.wire_json import JSONLimitError
from envharness.core.ws_session import execution_error, websocket_session

log = logging.getLogger(__name__)

DEFAULT_MAX_MESSAGE_BYTES = 4 * 1024 * 1024


def create_app(
    env_factory: EnvFactory,
    *,
    name: str | None = None,
    max_sessions: int = 64,
    idle_timeout_s: float | None = 600.0,
    token: str | None = None,
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    mcp: bool = True,
    web: bool = False,
    mounts: Sequence[AppMount] = (),
    allowed_hosts: Sequence[str] = (),
    allowed_origins: Sequence[str] = (),
    allow_null_origin: bool = False,
    mcp_fixed: Sequence[str] | str = (),
) -> FastAPI:
    """A FastAPI app serving `env_factory()` environments over OpenEnv's wire.

    `token`: when set, every route but /health needs `Authorization: Bearer <token>` (the
    WebSocket and the /web page may pass `?token=` instead: browsers cannot send headers there).
    Only loopback names and the server's own address are served, and only pages of its own
    origin; `allowed_hosts` / `allowed_origins` widen that (`core/guards.py`,
    docs/security.md; the origin `null` is refused unless `allow_null_origin`). `idle_timeout_s=None` disables the
    idle timeout. Messages over `max_message_bytes` get MESSAGE_TOO_LARGE. `mcp`: serve the
    environment's tools at `/mcp` (when the `mcp` SDK is installed); `web`: the page at `/web`.
    `mounts`: more features to add (`core/mounts.py`); the core knows none of them by import.
    `mcp_fixed`: reset options (`seat,seed`) an MCP client may not choose: the operator's.
    """
    allowed_origins = checked_origins(allowed_origins, allow_null=allow_null_origin)
    manager = SessionManager(env_factory, max_sessions=max_sessions, idle_timeout_s=idle_timeout_s)
    env_name = name or getattr(env_factory, "__name__", type(env_factory).__name__)
    docs = {} if token is None else {"docs_url": None, "redoc_url": None, "openapi_url": None}
    refusals = Refusals(lambda r: error_response(refusal_error(r)), lambda r: error_message(refusal_error(r)))
    middleware = [
        Middleware(
            HostOriginGuard, refusals=refusals, allowed_hosts=allowed_hosts, allowed_origins=allowed_origins
        ),  # fmt: skip
        Middleware(
            TokenGuard, token=token, routes=lambda: app.routes, access=ROUTE_ACCESS, refusals=refusals
        ),
        Middleware(BodyLimit, limit=lambda: max_message_bytes, refusals=refusals),
    ]
    app = FastAPI(
        title=f"envharness: {env_name}",
        routes=list(ROUTES),
        middleware=middleware,
        lifespan=lifespan,
        exception_handlers={ProtocolError: protocol_error},
        **docs,
    )
    app.state.sessions = manager
    app.state.before_shutdown = manager.close_sessions
    app.state.max_message_bytes = max_message_bytes
    app.state.env_name = env_name
    app.state.mcp = None
    app.state.mcp_fixed = tuple(split_names(mcp_fixed))
    app.state.running = []  # what a mount runs while the app does (MCP's session manager)
    for mount in resolve_mounts(mcp=mcp, web=web, extra=mounts):
        running = mount(app, manager, env_name)
        if running is not None:
            app.state.running.append(running)
    mount_task_api(app, manager.task_listing, env_name)  # last: its /{env}/... routes match broadly
    return app


@contextlib.asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    manager: SessionManager = app.state.sessions
    manager.start()
    try:
        async with contextlib.AsyncExitStack() as running:
            for context in app.state.running:
                await running.enter_async_context(context())
            yield
    finally:
        await manager.shutdown()


async def protocol_error(request: Request, exc: ProtocolError) -> JSONResponse:
    return error_response(exc)


# -- HTTP endpoints: stateless, each on a fresh environment (OpenEnv's HTTP) ------------------
async def read_body(request: Request, model: type[BaseModel]) -> Any:
    raw = await request.body()  # at most max_message_bytes: BodyLimit cut off anything larger
    try:
        payload = wire_json.loads(raw) if raw.strip() else {}
    except JSONLimitError as exc:
        raise ProtocolError(ErrorCode.INVALID_JSON, f"Refused JSON: {exc}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ProtocolError(ErrorCode.INVALID_JSON, f"Invalid JSON: {exc}") from None
    try:
        return model.model_validate(payload)
    except ValidationError as exc:
        raise validation_error(f"Invalid {model.__name__}", exc) from None


async def http_reset(request: Request) -> dict[str, Any]:
    body = await read_body(request, ResetRequest)
    async with request.app.state.sessions.temporary() as session, environment_errors():
        observation = await run_reset(session, body.model_dump(exclude_unset=True))
    return serialize_observation(observation)


async def http_step(request: Request) -> dict[str, Any]:
    body = await read_body(request, StepRequest)
    async with request.app.state.sessions.temporary() as session, environment_errors():
        await run_reset(session, {})
        observation = await run_step(session, body.action)
    return serialize_observation(observation)


async def http_state(request: Request) -> dict[str, Any]:
    async with request.app.state.sessions.temporary() as session, environment_errors():
        state = await run_state(session)
    return state.model_dump(mode="json")


async def health(request: Request) -> dict[str, Any]:
    """Open to probes: without the token it says only `status`."""
    manager: SessionManager = request.app.state.sessions
    status = "shutting_down" if manager.shutting_down else "healthy"
    if not request.scope.get("state", {}).get("authorized", True):
        return {"status": status}
    return HealthResponse(
        status=status,
        env=request.app.state.env_name,
        active_sessions=len(manager.sessions),
        max_sessions=manager.capacity,
        live_environments=manager.live_environments,
        sessions_opened=manager.sessions_opened,
        sessions_closed=manager.sessions_closed,
    ).model_dump()


async def ready(request: Request) -> JSONResponse:
    """A readiness probe: 503 while the server stops or every session is taken."""
    manager: SessionManager = request.app.state.sessions
    full = len(manager.sessions) >= manager.capacity
    status = "shutting_down" if manager.shutting_down else "full" if full else "ready"
    return JSONResponse({"status": status}, status_code=200 if status == "ready" else 503)


async def metadata(request: Request) -> dict[str, Any]:
    return (await request.app.state.sessions.describe()).metadata.model_dump(mode="json")


async def schema(request: Request) -> SchemaResponse:
    d = await request.app.state.sessions.describe()
    return SchemaResponse(
        action=d.action_type.model_json_schema(),
        observation=d.observation_type.model_json_schema(),
        state=d.state_type.model_json_schema(),
    )


#: The app's own routes; `/mcp`, `/web` and the Task API are mounted after them.
ROUTES = (
    APIRoute("/reset", http_reset, methods=["POST"]),
    APIRoute("/step", http_step, methods=["POST"]),
    APIRoute("/state", http_state, methods=["GET"]),
    APIRoute("/health", health, methods=["GET"]),
    APIRoute("/ready", ready, methods=["GET"]),
    APIRoute("/metadata", metadata, methods=["GET"]),
    APIRoute("/schema", schema, methods=["GET"]),
    APIWebSocketRoute("/ws", websocket_session),
)


#: Who may call which route when the server has a token (`core/guards.py`); any other route
#: and any unknown path need `Authorization: Bearer`.
ROUTE_ACCESS = {
    "/health": Access.OPEN,  # probes; without the token it says only "healthy" or "shutting_down"
    "/ready": Access.OPEN,
    "/ws": Access.TOKEN_OR_QUERY,
    "/web": Access.TOKEN_OR_QUERY,
    "/web/info": Access.TOKEN_OR_QUERY,
}


def refusal_error(refusal: Refusal) -> ProtocolError:
    """A guard's refusal as the wire's error."""
    if refusal.kind == "too_large":
        return ProtocolError(ErrorCode.MESSAGE_TOO_LARGE, refusal.message, max_message_bytes=refusal.limit)
    code = ErrorCode.UNAUTHORIZED if refusal.kind == "unauthorized" else ErrorCode.FORBIDDEN
    return ProtocolError(code, refusal.message)


@contextlib.asynccontextmanager
async def environment_errors() -> AsyncIterator[None]:
    """HTTP routes: an exception of the environment becomes the same error the WebSocket
    sends (JSON with the reason), not a bare 500."""
    try:
        yield
    except ProtocolError:
        raise
    except Exception as exc:
        log.warning("environment error in an HTTP request", exc_info=True)
        raise execution_error(exc) from None


def error_response(error: ProtocolError) -> JSONResponse:
    return JSONResponse(status_code=HTTP_STATUS[error.code], content={"detail": error.to_data()})


def uvicorn_server(
    app: FastAPI, *, ping_interval_s: float = 20.0, ping_timeout_s: float = 20.0, log_level: str = "warning"
) -> uvicorn.Server:
    """A uvicorn server for `app`: keepalive pings find half-open connections; frames over
    the app's message limit are cut at the socket, the rest get MESSAGE_TOO_LARGE; a request's
    headers must arrive in time (`core/connections.py`)."""
    limit = getattr(app.state, "max_message_bytes", DEFAULT_MAX_MESSAGE_BYTES)
    config = uvicorn.Config(
        app,
        log_level=log_level,
        http=HeaderTimeout,
        ws_max_size=ws_max_size(limit),
        ws_max_queue=WS_MAX_QUEUE,
        ws_ping_interval=ping_interval_s,
        ws_ping_timeout=ping_timeout_s,
        timeout_graceful_shutdown=10,
        lifespan="on",
    )
    return StopFirstServer(config, getattr(app.state, "before_shutdown", None))


class StopFirstServer(uvicorn.Server):
    """uvicorn waits up to `timeout_graceful_shutdown` (10 s) for every connection's handler to
    finish before the app hears of the shutdown, so one session with a step in flight (a hung
    page), or one long generation, held every stop for 10 s and then ended in tracebacks. Here
    the app's `state.before_shutdown` runs first (the environment server closes its sessions,
    each client told SHUTTING_DOWN; the policy endpoint stops its generations), and uvicorn's
    own shutdown then finds nothing left to wait for."""

    def __init__(self, config: uvicorn.Config, before_shutdown: Callable[[], Any] | None) -> None:
        super().__init__(config)
        self.before_shutdown = before_shutdown

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        if self.before_shutdown is not None:
            done = self.before_shutdown()
            if inspect.isawaitable(done):
                await done
        await super().shutdown(sockets)


def serve_until_stopped(server: uvicorn.Server, sock: socket.socket) -> None:
    """Run `server` on `sock` until Ctrl-C or SIGTERM, then close the socket.

    uvicorn shuts down gracefully on SIGTERM, then re-raises it to the handler that was there
    before; a no-op one lets the command report the clean stop and exit 0."""
    signal.signal(signal.SIGTERM, lambda *_: None)
    try:
        asyncio.run(server.serve(sockets=[sock]))
    except KeyboardInterrupt:
        pass
    finally:
        sock.close()


def bind_socket(host: str = "127.0.0.1", port: int = 0) -> socket.socket:
    """A listening socket (port 0: a free one), handed to uvicorn so no port race exists.

    Created with proto IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on connections whose
    socket says TCP, and accepted sockets inherit the listener's proto. Without it a response
    written in two parts (headers, body) waits for the client's delayed ACK: 40 ms on every
    request after the first of a keep-alive connection."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    return sock


def split_names(value: Sequence[str] | str) -> list[str]:
    """`"seat, seed"` or `["seat", "seed"]` -> `["seat", "seed"]`."""
    items = value.split(",") if isinstance(value, str) else list(value)
    return [item.strip() for item in items if item.strip()]
