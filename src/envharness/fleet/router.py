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
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Coroutine, Sequence, TypeVar

import httpx

from envharness.core.client import AsyncEnvClient, _LoopThread
from envharness.core.launchers import auth_headers
from envharness.harness.failures import InfrastructureError, is_infrastructure_error

T = TypeVar("T")


class ServerLostError(InfrastructureError):
    """The server of a running episode went away; the episode cannot go on."""


class NoServerAvailableError(InfrastructureError):
    """No healthy server with room answered within the acquire timeout."""


@dataclass(frozen=True)
class Endpoint:
    """Where one server listens, and (for a Ray fleet) which node and which restart it is."""

    url: str
    node_id: str = ""
    generation: int = 0


@dataclass(frozen=True)
class ServerStatus:
    """One server as the router sees it (for logs, tests and benchmarks)."""

    url: str
    healthy: bool
    active_sessions: int
    max_sessions: int
    leased: int
    idle: int
    node_id: str
    generation: int
    last_error: str


def http_base(url: str) -> str:
    """ws(s)://host[:port][/ws] or http(s)://... -> http(s)://host[:port]."""
    url = url.rstrip("/")
    url = url[:-3] if url.endswith("/ws") else url
    for old, new in (("ws://", "http://"), ("wss://", "https://")):
        if url.startswith(old):
            return new + url[len(old):]
    return url if url.startswith(("http://", "https://")) else "http://" + url


@dataclass(eq=False)
class _Server:
    endpoint: Endpoint
    healthy: bool = False
    removed: bool = False
    reported_active: int = 0
    max_sessions: int = 1
    own_at_poll: int = 0  # our open sessions when the last poll was sent
    leased: int = 0
    idle: list[Any] = field(default_factory=list)  # reusable clients on the router's loop
    missed_polls: int = 0
    last_error: str = ""

    @property
    def url(self) -> str:
        return self.endpoint.url

    def others(self) -> int:
        """Sessions on this server that are not ours (other clients, other routers)."""
        return max(0, self.reported_active - self.own_at_poll)

    def load(self) -> float:
        return (self.others() + self.leased) / max(1, self.max_sessions)

    def has_room(self) -> bool:
        return bool(self.idle) or self.others() + self.leased + len(self.idle) < self.max_sessions


def _lost(exc: BaseException) -> bool:
    """A failure of the server or the connection (a hung server's reply timeout included)."""
    return is_infrastructure_error(exc) or isinstance(exc, TimeoutError)


class FleetRouter:
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
        self._servers: dict[str, _Server] = {}
        self._set_endpoints([Endpoint(http_base(u)) for u in urls])
        self._closed = False
        self._loop = _LoopThread()
        self._wake: asyncio.Event | None = None
        self._poller = asyncio.run_coroutine_threadsafe(self._poll_forever(), self._loop.loop)

    # -- the pool's face ----------------------------------------------------------------
    def __call__(self) -> "FleetLease":
        """One episode's lease (sync names: reset, step, state, close), as `ClientPool()`."""
        return FleetLease(self)

    def async_client(self) -> "AsyncFleetLease":
        """An async lease for code running on its own event loop (its session ends on close)."""
        return AsyncFleetLease(self, reuse=False)

    @property
    def capacity(self) -> int:
        """Sessions the healthy servers take in all (their `max_sessions`)."""
        with self._lock:
            return sum(s.max_sessions for s in self._servers.values() if s.healthy)

    def servers(self) -> list[ServerStatus]:
        with self._lock:
            return [
                ServerStatus(s.url, s.healthy, s.reported_active, s.max_sessions, s.leased, len(s.idle),
                             s.endpoint.node_id, s.endpoint.generation, s.last_error)
                for s in self._servers.values()
            ]

    def healthy_urls(self) -> list[str]:
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
                raise TimeoutError(f"{len(healthy)} of {want} servers healthy after {timeout_s:.0f}s: "
                                   + "; ".join(f"{s.url}: {s.last_error or 'no answer yet'}" for s in statuses if not s.healthy))
            self.poll_now()
            time.sleep(0.05)

    def poll_now(self) -> None:
        """Ask every server for its health now instead of at the next interval."""
        if self._wake is not None:
            self._loop.loop.call_soon_threadsafe(self._wake.set)

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
            self._run(_close_all(idle))
        self._loop.stop()

    def __enter__(self) -> "FleetRouter":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self._loop.run(coro)

    # -- choosing and releasing servers -------------------------------------------------
    async def _acquire(self, exclude: set[str], reuse: bool) -> tuple[_Server, Any, bool]:
        """(server, client, reused) for a new session, waiting for one with room."""
        deadline = time.monotonic() + self.acquire_timeout_s
        while True:
            if self._closed:
                raise NoServerAvailableError("the fleet router is closed")
            with self._lock:
                server = self._pick(exclude)
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

    def _pick(self, exclude: set[str]) -> _Server | None:
        candidates = [s for s in self._servers.values() if s.healthy and s.url not in exclude and s.has_room()]
        if not candidates:
            return None
        return min(candidates, key=lambda s: (s.load(), not s.idle, s.url))

    def _why_none(self, exclude: set[str]) -> str:
        statuses = self.servers()
        parts = [f"{s.url}: " + ("tried" if s.url in exclude else "full" if s.healthy else (s.last_error or "not healthy yet"))
                 for s in statuses]
        return f"no healthy environment server with room within {self.acquire_timeout_s:.0f}s ({'; '.join(parts) or 'no servers'})"

    async def _release(self, server: _Server, client: Any, reuse: bool) -> None:
        """A finished session: back to the pool when its server is still in, else ended."""
        with self._lock:
            server.leased = max(0, server.leased - 1)
            keep = reuse and server.healthy and not server.removed and not self._closed
            if keep:
                server.idle.append(client)
        if not keep:
            await _close_quietly(client)

    async def _lost_server(self, server: _Server, client: Any, exc: BaseException) -> None:
        """A lease's connection failed: take the server out until its /health answers again."""
        with self._lock:
            server.leased = max(0, server.leased - 1)
            server.healthy = False
            server.last_error = f"{type(exc).__name__}: {exc}"
            idle, server.idle = server.idle, []
        self._drop_idle(idle)
        await _close_quietly(client)
        self.poll_now()

    def _drop_idle(self, idle: list[Any]) -> None:
        if idle and not self._closed:
            asyncio.run_coroutine_threadsafe(_close_all(idle), self._loop.loop)

    # -- health polling (a task on the router's loop) ------------------------------------
    def _set_endpoints(self, endpoints: Sequence[Endpoint]) -> list[Any]:
        """Replace the server list; returns idle clients of servers that left."""
        dropped: list[Any] = []
        wanted = {e.url: e for e in endpoints}
        with self._lock:
            for url, server in list(self._servers.items()):
                if url not in wanted:
                    server.removed, server.healthy = True, False
                    dropped += server.idle
                    server.idle = []
                    del self._servers[url]
            for url, endpoint in wanted.items():
                if url in self._servers:
                    self._servers[url].endpoint = endpoint
                else:
                    self._servers[url] = _Server(endpoint)
        return dropped

    async def _refresh_endpoints(self) -> None:
        if self._source is None:
            return
        try:
            found = await asyncio.to_thread(self._source)
        except Exception:  # the source (e.g. Ray) hiccuped: keep the servers we know
            return
        endpoints = [e if isinstance(e, Endpoint) else Endpoint(str(e)) for e in found]
        self._drop_idle(self._set_endpoints([Endpoint(http_base(e.url), e.node_id, e.generation) for e in endpoints]))

    async def _refresh_forever(self) -> None:
        """Re-read the server list apart from the health polls (a Ray call may wait on a restart)."""
        while not self._closed:
            await self._refresh_endpoints()
            await asyncio.sleep(self.poll_interval_s)

    async def _poll_forever(self) -> None:
        self._wake = asyncio.Event()
        refresher = asyncio.create_task(self._refresh_forever()) if self._source is not None else None
        try:
            await self._poll_loop()
        finally:
            if refresher is not None:
                refresher.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await refresher

    async def _poll_loop(self) -> None:
        assert self._wake is not None
        async with httpx.AsyncClient(timeout=self.health_timeout_s, headers=auth_headers(self._token), trust_env=False) as http:
            while not self._closed:
                with self._lock:
                    servers = list(self._servers.values())
                await asyncio.gather(*(self._poll(http, s) for s in servers))
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), self.poll_interval_s)
                self._wake.clear()

    async def _poll(self, http: httpx.AsyncClient, server: _Server) -> None:
        with self._lock:
            own = server.leased + len(server.idle)
        try:
            reply = await http.get(f"{server.url}/health")
            data = reply.json() if reply.status_code == 200 else {}
            ok = data.get("status") == "healthy"
            error = "" if ok else f"/health: HTTP {reply.status_code} {str(data.get('status', ''))}".strip()
        except Exception as exc:  # refused, timed out, not JSON: the server does not answer
            ok, error, data = False, f"/health: {type(exc).__name__}: {exc}", {}
        idle: list[Any] = []
        with self._lock:
            if ok:
                server.healthy, server.missed_polls, server.last_error = True, 0, ""
                server.reported_active = int(data.get("active_sessions", 0))
                server.max_sessions = max(1, int(data.get("max_sessions", 1)))
                # a session we opened while the request was out may or may not be in the
                # count: take the larger of our counts, so it never shows up as someone else's
                server.own_at_poll = max(own, server.leased + len(server.idle))
            else:
                server.missed_polls += 1
                server.last_error = error
                if server.missed_polls >= self.missed_polls_to_eject or data.get("status") == "shutting_down":
                    server.healthy = False
                    idle, server.idle = server.idle, []
        self._drop_idle(idle)


class AsyncFleetLease:
    """One episode's session on a fleet server (async names of `AsyncEnvClient`)."""

    def __init__(self, router: FleetRouter, *, reuse: bool = False) -> None:
        self._router = router
        self._reuse = reuse
        self._server: _Server | None = None
        self._client: Any = None

    @property
    def url(self) -> str | None:
        """The server this lease's session is on (None before reset)."""
        return None if self._server is None else self._server.url

    async def reset(self, **kwargs: Any) -> Any:
        """Start an episode; on a dead server, retry on another one (`reset_attempts`)."""
        router, tried, last = self._router, set(), None
        if self._client is not None:  # a second episode on this lease: keep its server if it is still there
            try:
                return await self._client.reset(**kwargs)
            except Exception as exc:
                if not _lost(exc):
                    raise
                server, self._server, client, self._client = self._server, None, self._client, None
                assert server is not None
                tried.add(server.url)
                last = exc
                await router._lost_server(server, client, exc)
        attempts = 0
        while attempts < router.reset_attempts:
            attempts += 1
            server, client, reused = await router._acquire(tried, self._reuse)
            try:
                result = await client.reset(**kwargs)
            except Exception as exc:
                if not _lost(exc):
                    self._server, self._client = server, client  # the session is fine; the request was not
                    raise
                last = exc
                if reused:  # a stale pooled connection (the server restarted): one fresh try, same server
                    attempts -= 1
                    await router._release(server, client, reuse=False)
                    continue
                if str(getattr(exc, "code", "")) == "CAPACITY_REACHED":
                    tried.add(server.url)
                    await router._release(server, client, reuse=False)
                    continue
                tried.add(server.url)
                await router._lost_server(server, client, exc)
                continue
            self._server, self._client = server, client
            return result
        raise ServerLostError(f"reset failed on {len(tried)} server(s) ({', '.join(sorted(tried))}); "
                              f"last error: {type(last).__name__}: {last}") from last

    async def step(self, action: Any) -> Any:
        return await self._call("step", action)

    async def state(self) -> Any:
        return await self._call("state")

    async def close(self) -> None:
        """Give the session back (pooled leases) or end it."""
        server, client, self._server, self._client = self._server, self._client, None, None
        if server is not None:
            await self._router._release(server, client, self._reuse)

    async def __aenter__(self) -> "AsyncFleetLease":
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
            if not _lost(exc):
                raise
            self._server = self._client = None
            await self._router._lost_server(server, client, exc)
            raise ServerLostError(f"the environment server {server.url} was lost mid-episode "
                                  f"({type(exc).__name__}: {exc}); this episode cannot go on") from exc


class FleetLease:
    """The sync lease `router()` returns: `AsyncFleetLease` run on the router's loop,
    its session pooled for the next episode (as `ClientPool` does)."""

    def __init__(self, router: FleetRouter) -> None:
        self._router = router
        self._lease = AsyncFleetLease(router, reuse=True)

    @property
    def url(self) -> str | None:
        return self._lease.url

    def reset(self, **kwargs: Any) -> Any:
        return self._router._run(self._lease.reset(**kwargs))

    def step(self, action: Any) -> Any:
        return self._router._run(self._lease.step(action))

    def state(self) -> Any:
        return self._router._run(self._lease.state())

    def close(self) -> None:
        if not self._router._closed:
            self._router._run(self._lease.close())

    def __enter__(self) -> "FleetLease":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


async def _close_quietly(client: Any) -> None:
    with contextlib.suppress(Exception):
        await asyncio.wait_for(client.close(), 10.0)


async def _close_all(clients: list[Any]) -> None:
    await asyncio.gather(*(_close_quietly(c) for c in clients))


def default_client_class(env: str) -> type[AsyncEnvClient]:
    """The async client that parses `env`'s observations (its `EnvSpec.client`)."""
    from envharness.core.registry import get_spec

    try:
        return get_spec(env).load("client")
    except KeyError:
        return AsyncEnvClient