"""`FleetRouter`: one `ClientPool` over many environment servers, with failover.

Sessions go straight from client to server over their WebSocket; the router only chooses
the server. It polls each server's `/health` (its own `active_sessions`/`max_sessions`)
every `poll_interval_s` and gives a new session to the healthy server with the lowest
load, counting the sessions it handed out since the last poll. A session stays on its
server. A server that stops answering (two missed polls, or one lease's lost connection)
is taken out at once and comes back when its `/health` answers again.

Failures, as training and eval need them:
- a lost connection mid-episode raises `ServerLostError` (an `InfrastructureError`): the
  episode fails and is counted apart from a real reward of 0, never silently re-run;
- a reset that fails for the infrastructure retries on another server (`reset_attempts`);
- no healthy server for `acquire_timeout_s` raises `NoServerAvailableError`.

The server list is fixed (`FleetRouter(urls)`: servers started by hand, a Kubernetes
StatefulSet) or re-read from `endpoints()` on every poll (a Ray fleet, whose restarted
servers come back on new ports). `router()` returns a sync lease with `ClientPool`'s names
(pass the router as a session factory's `client_factory`); `router.async_client()` an async
one. Both run the one async implementation, `AsyncFleetLease`.

This module is the pool's face and its bookkeeping (acquire, release, a lost server); the
parts live beside it: `placement` (which server), `health` (which servers are in),
`leases` (an episode's session), `errors`; the package (`envharness.fleet`) offers their names.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, TypeVar

from envharness._deprecated import deprecated_names
from envharness.core.client import AsyncEnvClient, _LoopThread
from envharness.fleet.errors import NoServerAvailableError
from envharness.fleet.health import HealthPolling
from envharness.fleet.leases import AsyncFleetLease, FleetLease, close_all, close_quietly
from envharness.fleet.placement import Endpoint, ServerStatus, TrackedServer, http_base, pick_server

__all__ = ["FleetRouter", "default_client_class"]
# A name this module listed from `errors.py` without using it, kept for old callers with a warning.
__getattr__ = deprecated_names(__name__)

T = TypeVar("T")


class FleetRouter(HealthPolling):
    """A drop-in `ClientPool` over many servers: `router()` is one episode's lease."""

    def __init__(
        self,
        urls: Sequence[str] = (),
        *,
        endpoints: Callable[[], Sequence[Endpoint | str]] | None = None,
        client_class: type[AsyncEnvClient] = AsyncEnvClient,
        client_options: dict[str, Any] | None = None,
        token: str | None = None,
        poll_interval_s: float = 1.0,
        health_timeout_s: float = 2.0,
        missed_polls_to_eject: int = 2,
        acquire_timeout_s: float = 30.0,
        reset_attempts: int = 2,
    ) -> None:
        if not urls and endpoints is None:
            raise ValueError("FleetRouter needs server urls or an endpoints() source")
        if reset_attempts < 1 or poll_interval_s <= 0 or missed_polls_to_eject < 1:
            raise ValueError("reset_attempts and missed_polls_to_eject must be >= 1, poll_interval_s > 0")
        self.client_class = client_class
        self.client_options = {**(client_options or {}), **({"token": token} if token else {})}
        self.poll_interval_s = poll_interval_s
        self.health_timeout_s = health_timeout_s
        self.missed_polls_to_eject = missed_polls_to_eject
        self.acquire_timeout_s = acquire_timeout_s
        self.reset_attempts = reset_attempts
        self._token = token
        self._source = endpoints
        self._lock = threading.Lock()
        self._servers: dict[str, TrackedServer] = {}
        self._set_endpoints([Endpoint(http_base(u)) for u in urls])
        self._closed = False
        self._loop = _LoopThread()
        self._wake: asyncio.Event | None = None
        self._poller = asyncio.run_coroutine_threadsafe(self._poll_forever(), self._loop.loop)

    # -- the pool's face ----------------------------------------------------------------
    def __call__(self) -> FleetLease:
        """One episode's lease (sync names: reset, step, state, close), as `ClientPool()`."""
        return FleetLease(self)

    def async_client(self) -> AsyncFleetLease:
        """An async lease for code running on its own event loop (its session ends on close)."""
        return AsyncFleetLease(self, reuse=False)

    @property
    def capacity(self) -> int:
        """Sessions the healthy servers take in all (their `max_sessions`)."""
        with self._lock:
            return sum(s.max_sessions for s in self._servers.values() if s.healthy)

    def servers(self) -> list[ServerStatus]:
        """Every known server as the router sees it now."""
        with self._lock:
            return [s.status() for s in self._servers.values()]

    def healthy_urls(self) -> list[str]:
        """The urls of the servers that take sessions now."""
        return [s.url for s in self.servers() if s.healthy]

    def wait_ready(self, min_servers: int | None = None, timeout_s: float = 60.0) -> list[str]:
        """Block until `min_servers` (default: all known) servers are healthy; their urls."""
        deadline = time.monotonic() + timeout_s
        while True:
            statuses = self.servers()
            want = len(statuses) if min_servers is None else min_servers
            healthy = [s.url for s in statuses if s.healthy]
            if statuses and len(healthy) >= want:
                return healthy
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{len(healthy)} of {want} servers healthy after {timeout_s:.0f}s: "
                    + "; ".join(
                        f"{s.url}: {s.last_error or 'no answer yet'}" for s in statuses if not s.healthy
                    )
                )
            self.poll_now()
            time.sleep(0.05)

    def close(self) -> None:
        """Stop polling and end every pooled session."""
        if self._closed:
            return
        self._closed = True
        with self._lock:
            idle = [c for s in self._servers.values() for c in s.idle]
            for s in self._servers.values():
                s.idle.clear()
        with contextlib.suppress(Exception):
            self.poll_now()
            self._poller.result(timeout=self.health_timeout_s + 5)
        with contextlib.suppress(Exception):
            self.run(close_all(idle))
        self._loop.stop()

    def __enter__(self) -> FleetRouter:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        return self._closed

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self._loop.run(coro)

    # -- choosing and releasing servers -------------------------------------------------
    async def acquire(self, exclude: set[str], reuse: bool) -> tuple[TrackedServer, Any, bool]:
        """(server, client, reused) for a new session, waiting for one with room."""
        deadline = time.monotonic() + self.acquire_timeout_s
        while True:
            if self._closed:
                raise NoServerAvailableError("the fleet router is closed")
            with self._lock:
                server = pick_server(self._servers.values(), exclude)
                if server is not None:
                    server.leased += 1
                    if reuse and server.idle:
                        return server, server.idle.pop(), True
            if server is not None:
                return server, self.client_class(server.url, **self.client_options), False
            if time.monotonic() > deadline:
                raise NoServerAvailableError(self._why_none(exclude))
            self.poll_now()
            await asyncio.sleep(0.05)

    def _why_none(self, exclude: set[str]) -> str:
        statuses = self.servers()
        parts = [
            f"{s.url}: "
            + ("tried" if s.url in exclude else "full" if s.healthy else (s.last_error or "not healthy yet"))
            for s in statuses
        ]
        return f"no healthy environment server with room within {self.acquire_timeout_s:.0f}s ({'; '.join(parts) or 'no servers'})"

    async def release(self, server: TrackedServer, client: Any, reuse: bool) -> None:
        """A finished session: back to the pool when its server is still in, else ended."""
        with self._lock:
            server.leased = max(0, server.leased - 1)
            keep = reuse and server.healthy and not server.removed and not self._closed
            if keep:
                server.idle.append(client)
        if not keep:
            await close_quietly(client)

    async def lost_server(self, server: TrackedServer, client: Any, exc: BaseException) -> None:
        """A lease's connection failed: take the server out until its /health answers again."""
        with self._lock:
            server.leased = max(0, server.leased - 1)
            server.healthy = False
            server.last_error = f"{type(exc).__name__}: {exc}"
            idle, server.idle = server.idle, []
        self._drop_idle(idle)
        await close_quietly(client)
        self.poll_now()


def default_client_class(env: str) -> type[AsyncEnvClient]:
    """The async client that parses `env`'s observations (its `EnvSpec.client`)."""
    from envharness.core.registry import get_spec

    try:
        return get_spec(env).load("client")
    except KeyError:
        return AsyncEnvClient
