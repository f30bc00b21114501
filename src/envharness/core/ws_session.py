"""One WebSocket connection, one environment: OpenEnv's `/ws` session.

The endpoint opens a session (or joins the one an MCP client holds, `?session_id=`), then
answers the client's messages in order. The next message is awaited while a call runs, so a
client that goes away mid-step (its own timeout, a crash) ends the step and frees the session
at once, rather than when a hung step finally returns.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Any

from fastapi import WebSocket
from pydantic import ValidationError

from envharness.core.environment import Environment
from envharness.core.protocol import (
    CloseMessage,
    ErrorCode,
    ProtocolError,
    ResetMessage,
    ResetRequest,
    StepMessage,
    error_message,
    observation_message,
    parse_client_message,
    state_message,
    validation_error,
)
from envharness.core.sessions import Session, SessionManager, run_reset, run_state, run_step

log = logging.getLogger(__name__)

WS_POLICY_VIOLATION = 1008
WS_TRY_AGAIN_LATER = 1013


async def websocket_session(websocket: WebSocket) -> None:
    """The `/ws` endpoint: a session for as long as the connection lives."""
    await websocket.accept()
    state = websocket.app.state
    # OpenEnv's MCPToolClient joins its MCP session's environment with `?session_id=`
    shared = state.mcp.shared_handle(websocket.query_params.get("session_id")) if state.mcp else None
    manager: SessionManager = state.sessions
    try:
        session = await (shared.open() if shared else manager.open())
    except ProtocolError as exc:
        await refuse(websocket, exc, WS_TRY_AGAIN_LATER)
        return
    connection = Connection(websocket, session, manager, state.max_message_bytes)
    serving = asyncio.create_task(connection.serve())
    session.on_expire = serving.cancel
    session.connection = asyncio.current_task()
    try:
        await serving
    except asyncio.CancelledError:
        if not serving.cancelled() or asyncio.current_task().cancelling():
            raise  # the server itself is cancelling this handler
        reason = session.expire_reason or ErrorCode.SESSION_ERROR
        await refuse(websocket, ProtocolError(reason, f"Session closed by the server: {reason.value}"), 1000)
    except Exception:  # the client vanished mid-send, or a bug: the session ends, the server goes on
        log.debug("websocket session %s ended", session.id, exc_info=True)
    finally:
        if shared is None:  # a shared session is closed by its MCP client (openenv/session/close)
            await manager.close(session)
        with contextlib.suppress(Exception):
            await websocket.close()


class Connection:
    """The messages of one session's connection, answered one at a time."""

    def __init__(self, websocket: WebSocket, session: Session, manager: SessionManager, limit: int) -> None:
        self.websocket = websocket
        self.session = session
        self.manager = manager
        self.limit = limit

    async def serve(self) -> None:
        next_message = asyncio.ensure_future(self.websocket.receive())
        try:
            while True:
                message = await next_message
                if message["type"] == "websocket.disconnect":
                    return
                next_message = asyncio.ensure_future(self.websocket.receive())
                reply = await self.answer(message, next_message)
                if reply is None:
                    return
                await self.websocket.send_text(json.dumps(reply))
        finally:
            next_message.cancel()

    async def answer(self, message: dict[str, Any], next_message: asyncio.Future) -> dict[str, Any] | None:
        """The reply to one client message; None: the client closed the session or went away."""
        raw = message.get("text") if message.get("text") is not None else message.get("bytes") or b""
        try:
            size = len(raw.encode()) if isinstance(raw, str) else len(raw)  # bytes, as the socket counts
            if size > self.limit:
                raise too_large(size, self.limit)
            request = parse_client_message(raw)
            if isinstance(request, CloseMessage):
                return None
            async with self.manager.activity(self.session):
                return await self.call(request, next_message)
        except ProtocolError as exc:
            return error_message(exc)
        except Exception as exc:  # the environment raised: report it, keep the session
            log.warning("environment error in session %s", self.session.id, exc_info=True)
            return error_message(execution_error(exc))

    async def call(self, request: Any, next_message: asyncio.Future) -> dict[str, Any] | None:
        """Run one request, watching for the client to leave while it runs."""
        call = asyncio.ensure_future(self.handle(request))
        call.add_done_callback(lambda task: task.cancelled() or task.exception())  # (retrieved)
        try:
            await asyncio.wait({call, next_message}, return_when=asyncio.FIRST_COMPLETED)
            if not call.done() and client_gone(next_message):
                if interruptible(self.session.env, request):
                    call.cancel()
                await asyncio.wait({call})  # it ends before its environment closes
                return None
            return await call  # a message sent before this reply waits its turn
        finally:
            call.cancel()  # (a no-op once it is done; this handler itself was cancelled otherwise)

    async def handle(self, request: Any) -> dict[str, Any]:
        session = self.session
        if isinstance(request, ResetMessage):
            try:
                options = ResetRequest.model_validate(request.data).model_dump(exclude_unset=True)
            except ValidationError as exc:
                raise validation_error("Invalid reset options", exc) from None
            return observation_message(await run_reset(session, options))
        if isinstance(request, StepMessage):
            return observation_message(await run_step(session, request.data))
        return state_message(await run_state(session))


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


async def refuse(websocket: WebSocket, error: ProtocolError, close_code: int) -> None:
    """Send one error frame and close; the client may already be gone."""
    with contextlib.suppress(Exception):
        await asyncio.wait_for(websocket.send_text(json.dumps(error_message(error))), timeout=2.0)
        await asyncio.wait_for(websocket.close(code=close_code), timeout=2.0)
