"""`SessionManager`: who holds which environment, for how long, and how many at once.

Every environment instance the server creates goes through here, WebSocket sessions and
the short-lived ones behind HTTP /reset, /step and /state alike, so the capacity limit
and the counters in /health cover everything. A background reaper closes sessions that
stay silent past the idle timeout; `shutdown()` closes all of them and the factory.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from envharness.core.environment import Environment, InvalidOptions
from envharness.core.errors import contained, is_invalid_action
from envharness.core.option_bounds import check_reset_options
from envharness.core.protocol import ErrorCode, ProtocolError, validation_error
from envharness.core.task_api import listing_of, resolve_task_reference
from envharness.core.types import Action, EnvironmentMetadata, Observation, State

log = logging.getLogger(__name__)

#: Anything that makes one environment per call: a class, a function, an object with
#: `__call__` (and optionally `async aclose()`, awaited at shutdown).
EnvFactory = Callable[[], "Environment | Awaitable[Environment]"]


@dataclass(eq=False)
class Session:
    """One environment and its bookkeeping. The WebSocket handler sets `on_expire` and
    `connection` (its own task, which tells the client why when the session expires)."""

    id: str
    env: Environment
    last_active: float = field(default_factory=time.monotonic)
    step_count: int = 0
    has_reset: bool = False
    busy: bool = False
    closed: bool = False
    expire_reason: ErrorCode | None = None
    on_expire: Callable[[], Any] | None = None
    connection: asyncio.Task | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    #: The server's task listing (`task_api`), for ``reset(split=..., index=...)``.
    task_listing: Callable[[], Any] | None = None


#: How long a shutdown waits for the closed sessions' connections to tell their clients why.
_FAREWELL_S = 5.0


@dataclass
class EnvDescription:
    """What /schema and /metadata report; taken from the first environment created."""

    action_type: type[Action]
    observation_type: type[Observation]
    state_type: type[State]
    metadata: EnvironmentMetadata


class SessionManager:
    """Creates, tracks, expires and closes environment sessions."""

    def __init__(
        self, env_factory: EnvFactory, *, max_sessions: int = 64, idle_timeout_s: float | None = 600.0
    ) -> None:
        if max_sessions < 1:
            raise ValueError("max_sessions must be at least 1")
        if idle_timeout_s is not None and idle_timeout_s <= 0:
            raise ValueError("idle_timeout_s must be positive (or None to disable)")
        self.env_factory = env_factory
        #: The factory's task listing (`task_api.listing_of`), None when it lists none.
        self.task_listing = listing_of(env_factory)
        self.max_sessions = max_sessions
        self.idle_timeout_s = idle_timeout_s
        self.sessions: dict[str, Session] = {}
        self.live_environments = 0
        self.sessions_opened = 0
        self.sessions_closed = 0
        self.shutting_down = False
        self._pending = 0  # slots reserved while an environment is being created
        self._concurrent: bool | None = getattr(env_factory, "supports_concurrent_sessions", None)
        self._description: EnvDescription | None = None
        self._reaper: asyncio.Task | None = None

    @property
    def capacity(self) -> int:
        """`max_sessions`, or 1 for environments that cannot run concurrently."""
        return self.max_sessions if self._concurrent is not False else 1

    # -- lifecycle ----------------------------------------------------------------------
    async def open(self) -> Session:
        """A new session with a fresh environment; CAPACITY_REACHED when full."""
        if self.shutting_down:
            raise ProtocolError(ErrorCode.SHUTTING_DOWN, "The server is shutting down")
        if len(self.sessions) + self._pending >= self.capacity:
            raise ProtocolError(
                ErrorCode.CAPACITY_REACHED,
                f"Server at capacity: {self.capacity} concurrent session(s) allowed; close one or raise --max-sessions",
                active_sessions=len(self.sessions),
                max_sessions=self.capacity,
            )
        self._pending += 1
        try:
            env = await self._create_env()
        finally:
            self._pending -= 1
        if not type(env).supports_concurrent_sessions and self._concurrent is None:
            self._concurrent = False
            if self.sessions:  # learned too late for this one: another session holds the env
                await self._close_env(env)
                raise ProtocolError(
                    ErrorCode.CAPACITY_REACHED,
                    f"{type(env).__name__} allows one session at a time",
                    active_sessions=len(self.sessions),
                    max_sessions=1,
                )
        self._concurrent = self._concurrent if self._concurrent is not None else True
        session = Session(id=uuid.uuid4().hex, env=env, task_listing=self.task_listing)
        self.sessions[session.id] = session
        self.sessions_opened += 1
        return session

    async def close(self, session: Session) -> None:
        """Close the session's environment. Safe to call twice."""
        if session.closed:
            return
        session.closed = True
        self.sessions.pop(session.id, None)
        self.sessions_closed += 1
        await self._close_env(session.env)

    @contextlib.asynccontextmanager
    async def temporary(self) -> AsyncIterator[Session]:
        """A session for one HTTP request, closed afterwards (OpenEnv's HTTP semantics)."""
        session = await self.open()
        session.busy = True  # the request is the activity: never reaped mid-request
        try:
            yield session
        finally:
            await self.close(session)

    @contextlib.asynccontextmanager
    async def activity(self, session: Session) -> AsyncIterator[None]:
        """Serialize calls into one session and keep it from expiring while busy."""
        async with session.lock:
            if session.closed:
                raise ProtocolError(ErrorCode.SESSION_ERROR, "The session is closed")
            session.busy = True
            try:
                yield
            finally:
                session.busy = False
                session.last_active = time.monotonic()

    async def expire(self, session: Session, reason: ErrorCode) -> None:
        """Tell the session's connection to go (if any) and free its environment."""
        session.expire_reason = reason
        if session.on_expire is not None:
            session.on_expire()
        await self.close(session)

    # -- idle reaper and shutdown -------------------------------------------------------
    def start(self) -> None:
        if self.idle_timeout_s is not None and self._reaper is None:
            self._reaper = asyncio.create_task(self._reap_idle(), name="envharness-idle-reaper")

    async def _reap_idle(self) -> None:
        interval = min(self.idle_timeout_s / 4, 5.0)
        while True:
            await asyncio.sleep(interval)
            deadline = time.monotonic() - self.idle_timeout_s
            for session in [s for s in self.sessions.values() if not s.busy and s.last_active < deadline]:
                log.info("session %s idle for more than %.1fs: closing it", session.id, self.idle_timeout_s)
                try:
                    await self.expire(session, ErrorCode.IDLE_TIMEOUT)
                except Exception:  # one bad close must not stop the reaper
                    log.exception("closing idle session %s failed", session.id)

    async def close_sessions(self) -> None:
        """Refuse new sessions and close every open one, a step in flight included: each client
        hears SHUTTING_DOWN. The first half of `shutdown`, which the server runs first."""
        self.shutting_down = True
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
            self._reaper = None
        open_sessions = list(self.sessions.values())
        await asyncio.gather(
            *(self.expire(s, ErrorCode.SHUTTING_DOWN) for s in open_sessions), return_exceptions=True
        )
        # their connections say why (an error frame, then close) before the server cuts them
        connections = {
            s.connection
            for s in open_sessions
            if s.connection is not None and s.connection is not asyncio.current_task()
        }
        if connections:
            await asyncio.wait(connections, timeout=_FAREWELL_S)

    async def shutdown(self) -> None:
        """Close every session, then the factory (`aclose()`), e.g. a shared browser."""
        await self.close_sessions()
        aclose = getattr(self.env_factory, "aclose", None)
        if aclose is not None and inspect.iscoroutinefunction(aclose):
            await aclose()

    # -- description --------------------------------------------------------------------
    async def describe(self) -> EnvDescription:
        """Types and metadata of the environment (creates and closes one if none seen yet)."""
        if self._description is None:
            env = await self._create_env()
            await self._close_env(env)
        assert self._description is not None
        return self._description

    # -- internals ----------------------------------------------------------------------
    async def _create_env(self) -> Environment:
        try:
            with contained():  # its SystemExit too is a failed factory, not the server's stop
                env = self.env_factory()
                if inspect.isawaitable(env):
                    env = await env
        except Exception as exc:
            log.exception("environment factory failed")
            raise ProtocolError(
                ErrorCode.FACTORY_ERROR, f"Could not create the environment: {type(exc).__name__}: {exc}"
            ) from exc
        if not isinstance(env, Environment):
            raise ProtocolError(
                ErrorCode.FACTORY_ERROR, f"The factory returned {type(env).__name__}, not an Environment"
            )
        self.live_environments += 1
        if self._description is None:
            cls = type(env)
            self._description = EnvDescription(
                cls.action_type, cls.observation_type, cls.state_type, env.metadata()
            )
        return env

    async def _close_env(self, env: Environment) -> None:
        try:
            with contained():
                await env.close_async()
        except Exception:
            log.exception("closing %s failed", type(env).__name__)
        finally:
            self.live_environments -= 1


# -- one call on one session, shared by /ws, HTTP and /mcp ---------------------------------
async def run_reset(session: Session, options: dict[str, Any]) -> Observation:
    try:
        options = resolve_task_reference(options, session.task_listing)  # OpenEnv's split/index -> task
        check_reset_options(session.env, options)  # out of the declared bounds: never reaches reset
    except ValueError as exc:
        raise ProtocolError(ErrorCode.VALIDATION_ERROR, f"Invalid reset options: {exc}") from None
    try:
        with contained():  # SystemExit, KeyboardInterrupt: the environment's bug, as any exception
            observation = await session.env.reset_async(**options)
    except InvalidOptions as exc:  # the client's mistake: said in words, not logged as a failure
        raise ProtocolError(ErrorCode.VALIDATION_ERROR, f"Invalid reset options: {exc}") from None
    session.has_reset, session.step_count = True, 0
    return checked(observation, Observation, "reset")


async def run_step(session: Session, action_data: dict[str, Any]) -> Observation:
    if not session.has_reset:
        raise ProtocolError(ErrorCode.NOT_RESET, "Call reset before step: this session has no episode yet")
    action_type = type(session.env).action_type
    try:
        action = action_type.model_validate(action_data)
    except ValidationError as exc:
        raise validation_error(f"Invalid action for {action_type.__name__}", exc) from None
    try:
        with contained():
            observation = await session.env.step_async(action)
    except Exception as exc:
        if not is_invalid_action(exc):
            raise  # the environment's bug: an EXECUTION_ERROR that ends the episode
        session.step_count += 1  # the agent's mistake: it counts, and the session goes on
        raise ProtocolError(ErrorCode.EXECUTION_ERROR, str(exc), invalid_action=True) from None
    session.step_count += 1
    return checked(observation, Observation, "step")


async def run_state(session: Session) -> State:
    with contained():
        state = await session.env.state_async()
    return checked(state, State, "state")


def checked(value: Any, expected: type, what: str) -> Any:
    if not isinstance(value, expected):
        raise ProtocolError(
            ErrorCode.EXECUTION_ERROR,
            f"The environment's {what} returned {type(value).__name__}, not {expected.__name__}",
        )
    return value
