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
from fastapi import FastAPI, Request, WebSocket
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ValidationError
from starlette.middleware import Middleware

from envharness.core.environment import Environment
from envharness.core.guards import Access, BodyLimit, HostOriginGuard, Refusal, Refusals, TokenGuard
from envharness.core.mounts import AppMount, resolve_mounts
from envharness.core.protocol import (
    HTTP_STATUS,
    CloseMessage,
    ErrorCode,
    HealthResponse,
    ProtocolError,
    ResetMessage,
    ResetRequest,
    SchemaResponse,
    StepMessage,
    StepRequest,
    error_message,
    observation_message,
    parse_client_message,
    serialize_observation,
    state_message,
    validation_error,
)
from envharness.core.sessions import EnvFactory, Session, SessionManager, checked, run_reset, run_step
from envharness.core.task_api import mount_task_api
from envharness.core.types import State

log = logging.getLogger(__name__)

DEFAULT_MAX_MESSAGE_BYTES = 4 * 1024 * 1024
WS_POLICY_VIOLATION = 1008
WS_TRY_AGAIN_LATER = 1013


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
) -> FastAPI:
    """A FastAPI app serving `env_factory()` environments over OpenEnv's wire.

    `token`: when set, every route but /health needs `Authorization: Bearer <token>` (the
    WebSocket and the /web page may pass `?token=` instead: browsers cannot send headers there).
    Only loopback names and the server's own address are served, and only pages of its own
    origin; `allowed_hosts` / `allowed_origins` widen that (`core/guards.py`,
    docs/security.md). `idle_timeout_s=None` disables the
    idle timeout. Messages over `max_message_bytes` get MESSAGE_TOO_LARGE. `mcp`: serve the
    environment's tools at `/mcp` (when the `mcp` SDK is installed); `web`: the page at `/web`.
    `mounts`: more features to add (`core/mounts.py`); the core knows none of them by import.
    """
    manager = SessionManager(env_factory, max_sessions=max_sessions, idle_timeout_s=idle_timeout_s)
    env_name = name or getattr(env_factory, "__name__", type(env_factory).__name__)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        manager.start()
        try:
            async with contextlib.AsyncExitStack() as running:
                for context in contexts:  # what a mount runs while the app does (MCP's session manager)
                    await running.enter_async_context(context())
                yield
        finally:
            await manager.shutdown()

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
    app = FastAPI(title=f"envharness: {env_name}", lifespan=lifespan, middleware=middleware, **docs)
    app.state.sessions = manager
    app.state.before_shutdown = manager.close_sessions
    app.state.max_message_bytes = max_message_bytes
    app.state.env_name = env_name
    app.state.mcp = None
    contexts = []
    for mount in resolve_mounts(mcp=mcp, web=web, extra=mounts):
        running = mount(app, manager, env_name)
        if running is not None:
            contexts.append(running)

    @app.exception_handler(ProtocolError)
    async def protocol_error(request: Request, exc: ProtocolError) -> JSONResponse:
        return error_response(exc)

    async def read_body(request: Request, model: type[BaseModel]) -> Any:
        raw = await request.body()  # at most max_message_bytes: BodyLimit cut off anything larger
        try:
            payload = json.loads(raw) if raw.strip() else {}
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ProtocolError(ErrorCode.INVALID_JSON, f"Invalid JSON: {exc}") from None
        try:
            return model.model_validate(payload)
        except ValidationError as exc:
            raise validation_error(f"Invalid {model.__name__}", exc) from None

    @app.post("/reset")
    async def http_reset(request: Request) -> dict[str, Any]:
        body = await read_body(request, ResetRequest)
        async with manager.temporary() as session, environment_errors():
            observation = await run_reset(session, body.model_dump(exclude_unset=True))
        return serialize_observation(observation)

    @app.post("/step")
    async def http_step(request: Request) -> dict[str, Any]:
        body = await read_body(request, StepRequest)
        async with manager.temporary() as session, environment_errors():
            await run_reset(session, {})
            observation = await run_step(session, body.action)
        return serialize_observation(observation)

    @app.get("/state")
    async def http_state() -> dict[str, Any]:
        async with manager.temporary() as session:
            state = await session.env.state_async()
        return checked(state, State, "state").model_dump(mode="json")

    @app.get("/health")
    async def health(request: Request) -> dict[str, Any]:
        """Open to probes: without the token it says only `status`."""
        status = "shutting_down" if manager.shutting_down else "healthy"
        if not request.scope.get("state", {}).get("authorized", True):
            return {"status": status}
        return HealthResponse(
            status=status,
            env=env_name,
            active_sessions=len(manager.sessions),
            max_sessions=manager.capacity,
            live_environments=manager.live_environments,
            sessions_opened=manager.sessions_opened,
            sessions_closed=manager.sessions_closed,
        ).model_dump()

    @app.get("/ready")
    async def ready() -> JSONResponse:
        """A readiness probe: 503 while the server stops or every session is taken."""
        full = len(manager.sessions) >= manager.capacity
        status = "shutting_down" if manager.shutting_down else "full" if full else "ready"
        return JSONResponse({"status": status}, status_code=200 if status == "ready" else 503)

    @app.get("/metadata")
    async def metadata() -> dict[str, Any]:
        return (await manager.describe()).metadata.model_dump(mode="json")

    @app.get("/schema")
    async def schema() -> SchemaResponse:
        d = await manager.describe()
        return SchemaResponse(
            action=d.action_type.model_json_schema(),
            observation=d.observation_type.model_json_schema(),
            state=d.state_type.model_json_schema(),
        )

    @app.websocket("/ws")
    async def websocket_session(websocket: WebSocket) -> None:
        await websocket.accept()
        # OpenEnv's MCPToolClient joins its MCP session's environment with `?session_id=`
        shared = (
            app.state.mcp.shared_handle(websocket.query_params.get("session_id")) if app.state.mcp else None
        )
        try:
            session = await (shared.open() if shared else manager.open())
        except ProtocolError as exc:
            await refuse(websocket, exc, WS_TRY_AGAIN_LATER)
            return
        serving = asyncio.create_task(serve_messages(websocket, session))
        session.on_expire = serving.cancel
        session.connection = asyncio.current_task()
        try:
            await serving
        except asyncio.CancelledError:
            if not serving.cancelled() or asyncio.current_task().cancelling():
                raise  # the server itself is cancelling this handler
            reason = session.expire_reason or ErrorCode.SESSION_ERROR
            await refuse(
                websocket, ProtocolError(reason, f"Session closed by the server: {reason.value}"), 1000
            )
        except Exception:  # the client vanished mid-send, or a bug: the session ends, the server goes on
            log.debug("websocket session %s ended", session.id, exc_info=True)
        finally:
            if shared is None:  # a shared session is closed by its MCP client (openenv/session/close)
                await manager.close(session)
            with contextlib.suppress(Exception):
                await websocket.close()

    async def serve_messages(websocket: WebSocket, session: Session) -> None:
        # The next message is awaited while a call runs, so that a client that goes away
        # mid-step (its own timeout, a crash) ends the step and frees the session at once,
        # rather than when a hung step finally returns.
        next_message = asyncio.ensure_future(websocket.receive())
        try:
            while True:
                message = await next_message
                if message["type"] == "websocket.disconnect":
                    return
                next_message = asyncio.ensure_future(websocket.receive())
                reply = await answer(session, message, next_message)
                if reply is None:
                    return
                await websocket.send_text(json.dumps(reply))
        finally:
            next_message.cancel()

    async def answer(
        session: Session, message: dict[str, Any], next_message: asyncio.Future
    ) -> dict[str, Any] | None:
        """The reply to one client message; None: the client closed the session or went away."""
        raw = message.get("text") if message.get("text") is not None else message.get("bytes") or b""
        try:
            if len(raw) > max_message_bytes:
                raise too_large(len(raw), max_message_bytes)
            request = parse_client_message(raw)
            if isinstance(request, CloseMessage):
                return None
            async with manager.activity(session):
                call = asyncio.ensure_future(handle(session, request))
                call.add_done_callback(lambda task: task.cancelled() or task.exception())  # (retrieved)
                try:
                    await asyncio.wait({call, next_message}, return_when=asyncio.FIRST_COMPLETED)
                    if not call.done() and client_gone(next_message):
                        if interruptible(session.env, request):
                            call.cancel()
                        await asyncio.wait({call})  # it ends before its environment closes
                        return None
                    return await call  # a message sent before this reply waits its turn
                finally:
                    call.cancel()  # (a no-op once it is done; this handler itself was cancelled otherwise)
        except ProtocolError as exc:
            return error_message(exc)
        except Exception as exc:  # the environment raised: report it, keep the session
            log.warning("environment error in session %s", session.id, exc_info=True)
            return error_message(execution_error(exc))

    async def handle(session: Session, request: Any) -> dict[str, Any]:
        if isinstance(request, ResetMessage):
            try:
                options = ResetRequest.model_validate(request.data).model_dump(exclude_unset=True)
            except ValidationError as exc:
                raise validation_error("Invalid reset options", exc) from None
            return observation_message(await run_reset(session, options))
        if isinstance(request, StepMessage):
            return observation_message(await run_step(session, request.data))
        return state_message(checked(await session.env.state_async(), State, "state"))

    mount_task_api(app, manager.task_listing, env_name)  # last: its /{env}/... routes match broadly
    return app


def interruptible(env: Any, request: Any) -> bool:
    """Whether a call can be cancelled when its client goes away: an environment's own async
    `reset_async`/`step_async` can (the browser's); the base class runs `reset`/`step` in a
    thread, which cannot, so that session closes once the call returns."""
    name = (
        "reset_async"
        if isinstance(request, ResetMessage)
        else "step_async"
        if isinstance(request, StepMessage)
        else None
    )
    return name is not None and getattr(type(env), name, None) is not getattr(Environment, name)


def client_gone(next_message: asyncio.Future) -> bool:
    """Whether the client's next message (if it came) says the connection is gone."""
    if not next_message.done():
        return False
    return (
        next_message.cancelled()
        or next_message.exception() is not None
        or next_message.result()["type"] == "websocket.disconnect"
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


def too_large(size: int, limit: int) -> ProtocolError:
    return ProtocolError(
        ErrorCode.MESSAGE_TOO_LARGE,
        f"Message of {size} bytes exceeds the limit of {limit} bytes",
        max_message_bytes=limit,
    )


def execution_error(exc: Exception) -> ProtocolError:
    """What the client hears when the environment raised (a bad task, a lost browser). An
    exception marked `infrastructure = True` (the environment's machinery failed, not the
    episode: a browser that died) says so in the frame, so trainers never score it as a reward."""
    extra = {"infrastructure": True} if getattr(exc, "infrastructure", False) else {}
    return ProtocolError(ErrorCode.EXECUTION_ERROR, f"{type(exc).__name__}: {exc}", **extra)


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


async def refuse(websocket: WebSocket, error: ProtocolError, close_code: int) -> None:
    """Send one error frame and close; the client may already be gone."""
    with contextlib.suppress(Exception):
        await asyncio.wait_for(websocket.send_text(json.dumps(error_message(error))), timeout=2.0)
        await asyncio.wait_for(websocket.close(code=close_code), timeout=2.0)


def uvicorn_server(
    app: FastAPI, *, ping_interval_s: float = 20.0, ping_timeout_s: float = 20.0, log_level: str = "warning"
) -> uvicorn.Server:
    """A uvicorn server for `app`: keepalive pings find half-open connections; frames far
    over the app's message limit are cut at the socket, the rest get MESSAGE_TOO_LARGE."""
    limit = getattr(app.state, "max_message_bytes", DEFAULT_MAX_MESSAGE_BYTES)
    config = uvicorn.Config(
        app,
        log_level=log_level,
        ws_max_size=4 * limit + 65536,
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
