"""An episode's hold on one fleet server: `AsyncFleetLease` (the one implementation) and
`FleetLease` (its sync face, what `router()` returns, as `ClientPool()` does).

The lease is where failures turn into what training and eval need: a reset that fails for
the infrastructure retries on another server (`reset_attempts`); a connection lost
mid-episode raises `ServerLostError` and is never silently re-run. Kept apart from the
router so a lease's rules read without the polling and bookkeeping around them.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from typing import Any, Protocol, TypeVar

from envharness.fleet.errors import ServerLostError, connection_lost
from envharness.fleet.placement import TrackedServer

T = TypeVar("T")


class ServerPool(Protocol):
    """What a lease needs of the router that lends it servers (`FleetRouter`)."""

    reset_attempts: int

    @property
    def closed(self) -> bool: ...

    async def acquire(self, exclude: set[str], reuse: bool) -> tuple[TrackedServer, Any, bool]:
        """(server, client, reused) for a new session, none of `exclude`."""

    async def release(self, server: TrackedServer, client: Any, reuse: bool) -> None:
        """A finished session, back to the pool (`reuse`) or ended."""

    async def lost_server(self, server: TrackedServer, client: Any, exc: BaseException) -> None:
        """A session whose connection failed: its server is out until it answers again."""

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run `coro` on the pool's event loop (the sync lease's calls)."""


class AsyncFleetLease:
    """One episode's session on a fleet server (async names of `AsyncEnvClient`)."""

    def __init__(self, router: ServerPool, *, reuse: bool = False) -> None:
        self._router = router
        self._reuse = reuse
        self._server: TrackedServer | None = None
        self._client: Any = None

    @property
    def url(self) -> str | None:
        """The server this lease's session is on (None before reset)."""
        return None if self._server is None else self._server.url

    async def reset(self, **kwargs: Any) -> Any:
        """Start an episode; on a dead server, retry on another one (`reset_attempts`)."""
        return await self._reset("reset", kwargs)

    async def reset_and_state(self, **kwargs: Any) -> Any:
        """`reset`, then `state`, in one round trip (`AsyncEnvClient.reset_and_state`)."""
        return await self._reset("reset_and_state", kwargs)

    async def _reset(self, method: str, kwargs: dict[str, Any]) -> Any:
        router, tried, last = self._router, set(), None
        if self._client is not None:  # a second episode on this lease: keep its server if it is still there
            try:
                return await getattr(self._client, method)(**kwargs)
            except Exception as exc:
                if not connection_lost(exc):
                    raise
                server, self._server, client, self._client = self._server, None, self._client, None
                assert server is not None
                tried.add(server.url)
                last = exc
                await router.lost_server(server, client, exc)
        attempts = 0
        while attempts < router.reset_attempts:
            attempts += 1
            server, client, reused = await router.acquire(tried, self._reuse)
            try:
                result = await getattr(client, method)(**kwargs)
            except Exception as exc:
                if not connection_lost(exc):
                    self._server, self._client = server, client  # the session is fine; the request was not
                    raise
                last = exc
                if reused:  # a stale pooled connection (the server restarted): one fresh try, same server
                    attempts -= 1
                    await router.release(server, client, reuse=False)
                    continue
                if str(getattr(exc, "code", "")) == "CAPACITY_REACHED":
                    tried.add(server.url)
                    await router.release(server, client, reuse=False)
                    continue
                tried.add(server.url)
                await router.lost_server(server, client, exc)
                continue
            self._server, self._client = server, client
            return result
        raise ServerLostError(
            f"reset failed on {len(tried)} server(s) ({', '.join(sorted(tried))}); "
            f"last error: {type(last).__name__}: {last}"
        ) from last

    async def step(self, action: Any) -> Any:
        return await self._call("step", action)

    async def step_and_state(self, action: Any) -> Any:
        return await self._call("step_and_state", action)

    async def state(self) -> Any:
        return await self._call("state")

    async def close(self) -> None:
        """Give the session back (pooled leases) or end it."""
        server, client, self._server, self._client = self._server, self._client, None, None
        if server is not None:
            await self._router.release(server, client, self._reuse)

    async def __aenter__(self) -> AsyncFleetLease:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def _call(self, method: str, *args: Any) -> Any:
        if self._client is None or self._server is None:
            raise RuntimeError("reset() first: this fleet lease holds no session")
        server, client = self._server, self._client
        try:
            return await getattr(client, method)(*args)
        except Exception as exc:
            if not connection_lost(exc):
                raise
            self._server = self._client = None
            await self._router.lost_server(server, client, exc)
            raise ServerLostError(
                f"the environment server {server.url} was lost mid-episode "
                f"({type(exc).__name__}: {exc}); this episode cannot go on"
            ) from exc


class FleetLease:
    """The sync lease `router()` returns: `AsyncFleetLease` run on the router's loop,
    its session pooled for the next episode (as `ClientPool` does)."""

    def __init__(self, router: ServerPool) -> None:
        self._router = router
        self._lease = AsyncFleetLease(router, reuse=True)

    @property
    def url(self) -> str | None:
        return self._lease.url

    def reset(self, **kwargs: Any) -> Any:
        return self._router.run(self._lease.reset(**kwargs))

    def step(self, action: Any) -> Any:
        return self._router.run(self._lease.step(action))

    def reset_and_state(self, **kwargs: Any) -> Any:
        return self._router.run(self._lease.reset_and_state(**kwargs))

    def step_and_state(self, action: Any) -> Any:
        return self._router.run(self._lease.step_and_state(action))

    def state(self) -> Any:
        return self._router.run(self._lease.state())

    def close(self) -> None:
        if not self._router.closed:
            self._router.run(self._lease.close())

    def __enter__(self) -> FleetLease:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


async def close_quietly(client: Any) -> None:
    """End a client's session, whatever its server's state (at most 10 s)."""
    with contextlib.suppress(Exception):
        await asyncio.wait_for(client.close(), 10.0)


async def close_all(clients: list[Any]) -> None:
    """`close_quietly` for many clients at once."""
    await asyncio.gather(*(close_quietly(c) for c in clients))
