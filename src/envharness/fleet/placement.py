"""Where a new session goes: the router's view of each server (its load as `/health` last
reported it, plus the sessions handed out since) and the least-loaded choice.

Kept apart from polling and leases so the placement rule reads on its own: a server takes a
session while it is healthy and has room, and ties go to one with a pooled session to reuse.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any


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
            return new + url[len(old) :]
    return url if url.startswith(("http://", "https://")) else "http://" + url


@dataclass(eq=False)
class TrackedServer:
    """One server's state in the router (guarded by the router's lock)."""

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

    def status(self) -> ServerStatus:
        return ServerStatus(
            self.url,
            self.healthy,
            self.reported_active,
            self.max_sessions,
            self.leased,
            len(self.idle),
            self.endpoint.node_id,
            self.endpoint.generation,
            self.last_error,
        )


def pick_server(servers: Iterable[TrackedServer], exclude: set[str]) -> TrackedServer | None:
    """The healthy server with room and the lowest load (not in `exclude`), or None."""
    candidates = [s for s in servers if s.healthy and s.url not in exclude and s.has_room()]
    if not candidates:
        return None
    return min(candidates, key=lambda s: (s.load(), not s.idle, s.url))
