"""Which servers are in: the server list (fixed, or re-read from `endpoints()` for a Ray
fleet whose restarted servers come back on new ports) and the `/health` polls that take a
server out (missed polls, `shutting_down`) and bring it back when it answers again.

A mixin of `FleetRouter`, apart from placement and leases: it runs as tasks on the router's
event loop and only writes the `TrackedServer` fields placement reads.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Sequence
from typing import Any

import httpx

from envharness.core.client import _LoopThread
from envharness.core.launchers import auth_headers
from envharness.fleet.leases import close_all
from envharness.fleet.placement import Endpoint, TrackedServer, http_base


class HealthPolling:
    """The polling half of `FleetRouter` (the router sets these attributes)."""

    poll_interval_s: float
    health_timeout_s: float
    missed_polls_to_eject: int
    _token: str | None
    _source: Callable[[], Sequence[Endpoint | str]] | None
    _lock: threading.Lock
    _servers: dict[str, TrackedServer]
    _closed: bool
    _loop: _LoopThread
    _wake: asyncio.Event | None

    def poll_now(self) -> None:
        """Ask every server for its health now instead of at the next interval."""
        if self._wake is not None:
            self._loop.loop.call_soon_threadsafe(self._wake.set)

    def _drop_idle(self, idle: list[Any]) -> None:
        """End pooled sessions of a server that is out (on the router's loop)."""
        if idle and not self._closed:
            asyncio.run_coroutine_threadsafe(close_all(idle), self._loop.loop)

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
                    self._servers[url] = TrackedServer(endpoint)
        return dropped

    async def _refresh_endpoints(self) -> None:
        if self._source is None:
            return
        try:
            found = await asyncio.to_thread(self._source)
        except Exception:  # the source (e.g. Ray) hiccuped: keep the servers we know
            return
        endpoints = [e if isinstance(e, Endpoint) else Endpoint(str(e)) for e in found]
        self._drop_idle(
            self._set_endpoints([Endpoint(http_base(e.url), e.node_id, e.generation) for e in endpoints])
        )

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
        async with httpx.AsyncClient(
            timeout=self.health_timeout_s, headers=auth_headers(self._token), trust_env=False
        ) as http:
            while not self._closed:
                with self._lock:
                    servers = list(self._servers.values())
                await asyncio.gather(*(self._poll(http, s) for s in servers))
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), self.poll_interval_s)
                self._wake.clear()

    async def _poll(self, http: httpx.AsyncClient, server: TrackedServer) -> None:
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
