"""Resource sessions: what one episode's harness talks to (tools, initial prompt, verify).

`ResourceSession` and `ResourceSessionFactory` keep OpenEnv's names and sync methods, so
sessions written for OpenEnv work unchanged. A session may also (or instead) implement
`*_async` counterparts; the runtime prefers those, and runs sync methods in a worker
thread so that many episodes can wait on their environments at once.

`call_session`/`create_session` are the one place that dispatch lives; they accept any
object with the right method names (duck typing), including OpenEnv's own sessions.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from envharness.core.concurrency import run_sync
from envharness.harness.types import Message, Tool, ToolResult, VerifyResult


class ResourceSession:
    """One episode's resources, seen by a harness as tools.

    Override the sync methods (as in OpenEnv) or their `*_async` counterparts. The
    async defaults run the sync methods in a worker thread; sync methods never call
    async ones.
    """

    def initial_messages(self) -> list[Message]:
        """The prompt messages the model starts from."""
        raise NotImplementedError(
            f"{type(self).__name__} implements neither initial_messages nor its async form"
        )

    def list_tools(self) -> list[Tool]:
        """The tools in MCP form: `{"name", "description", "inputSchema"}`."""
        raise NotImplementedError(f"{type(self).__name__} implements neither list_tools nor its async form")

    def call_tool(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        """Run one tool. Raise KeyError (unknown tool) or ValueError/TypeError (bad arguments)
        for problems the model should be told about; the adapter turns them into tool errors."""
        raise NotImplementedError(f"{type(self).__name__} implements neither call_tool nor its async form")

    def verify(self, transcript: list[Message], final_state: Any | None = None) -> VerifyResult:
        """Finish the episode: forward the environment's reward (never invent one) and metrics."""
        raise NotImplementedError(f"{type(self).__name__} implements neither verify nor its async form")

    def close(self) -> None:
        """Release the session's resources. Safe to call twice."""

    async def initial_messages_async(self) -> list[Message]:
        return await run_sync(self.initial_messages)

    async def list_tools_async(self) -> list[Tool]:
        return await run_sync(self.list_tools)

    async def call_tool_async(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        return await run_sync(self.call_tool, name, arguments)

    async def verify_async(self, transcript: list[Message], final_state: Any | None = None) -> VerifyResult:
        return await run_sync(self.verify, transcript, final_state)

    async def close_async(self) -> None:
        await run_sync(self.close)


SessionT = TypeVar("SessionT")


class ResourceSessionFactory(Generic[SessionT]):
    """Makes one isolated session per episode. Override `create` or `create_async`."""

    def create(self, task: Any, seed: int | None = None, episode_id: str | None = None) -> SessionT:
        raise NotImplementedError(f"{type(self).__name__} implements neither create nor create_async")

    async def create_async(
        self, task: Any, seed: int | None = None, episode_id: str | None = None
    ) -> SessionT:
        return await run_sync(self.create, task, seed, episode_id)


class ClientSessionFactory(ResourceSessionFactory[SessionT]):
    """A factory whose sessions each open a client from `client_factory` (sync or async, a class
    or a function, possibly returning an awaitable) and wrap it in `session_for`.

    An async client's session is made on the event loop (it resets on first use); a sync
    client's in a thread, since wrapping it may reset the environment over the network."""

    def __init__(self, client_factory: Callable[[], Any]) -> None:
        self._client_factory = client_factory

    def session_for(self, client: Any, task: Any, seed: int | None, episode_id: str | None) -> SessionT:
        raise NotImplementedError

    def create(self, task: Any = None, seed: int | None = None, episode_id: str | None = None) -> SessionT:
        client = self._client_factory()
        try:
            return self.session_for(client, task, seed, episode_id)
        except Exception:  # no session holds the client: close it here (its server session too)
            close = getattr(client, "close", None)
            if callable(close) and not inspect.iscoroutinefunction(close):
                close()
            raise

    async def create_async(
        self, task: Any = None, seed: int | None = None, episode_id: str | None = None
    ) -> SessionT:
        lease = getattr(self._client_factory, "async_lease", None)  # a pool's, for this loop
        client = lease() if callable(lease) else await run_sync(self._client_factory)
        if inspect.isawaitable(client):
            client = await client
        try:
            if inspect.iscoroutinefunction(getattr(client, "reset", None)):
                return self.session_for(client, task, seed, episode_id)
            return await run_sync(self.session_for, client, task, seed, episode_id)
        except Exception:
            close = getattr(client, "close", None)
            if callable(close):
                closing = close() if inspect.iscoroutinefunction(close) else await run_sync(close)
                if inspect.isawaitable(closing):
                    await closing
            raise


async def call_session(session: Any, method: str, *args: Any) -> Any:
    """Call `session.<method>_async(*args)` when it exists, else the sync method in a thread."""
    async_fn = getattr(session, f"{method}_async", None)
    if async_fn is not None:
        return await async_fn(*args)
    return await run_sync(getattr(session, method), *args)


async def create_session(factory: Any, task: Any, seed: int | None, episode_id: str | None) -> Any:
    """Create a session through `factory.create_async` when it exists, else `create` in a thread."""
    async_fn = getattr(factory, "create_async", None)
    if async_fn is not None:
        return await async_fn(task=task, seed=seed, episode_id=episode_id)
    return await run_sync(factory.create, task=task, seed=seed, episode_id=episode_id)
