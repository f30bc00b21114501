"""What every envharness server checks before a route runs: Host and Origin, the bearer token
by route, and the size of a body while it is read.

Plain ASGI middlewares, shared by the environment server (`core/server.py`) and the policy
endpoint (`policy/app.py`); each app says how a refusal looks on its wire (`Refusals`).

- `HostOriginGuard`: a page in the user's browser (or a DNS-rebinding page) can send requests
  to a server on loopback; the browser names the page's site in `Host` (rebinding) or
  `Origin` (cross-site), so only loopback names and the address the connection came in on are
  served, and an `Origin` must be the server's own, as Jupyter Server and the MCP SDK do.
  `allowed_hosts` / `allowed_origins` widen it (`*`: any).
- `TokenGuard`: the token is checked by the route a request matches (the app's route table),
  never by a piece of the path: `/rollouts/v1/sample` is the rollout `v1`'s sample.
- `BodyLimit`: a declared length over the limit is refused before a byte is read; a chunked
  body is cut off at the limit (413), so no body is held whole first.
"""

from __future__ import annotations

import enum
import hmac
import ipaddress
import json
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit

from starlette.requests import HTTPConnection
from starlette.responses import Response
from starlette.routing import Match

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})
WS_POLICY_VIOLATION = 1008


class Access(enum.Enum):
    """Who may call a route."""

    OPEN = "open"  #: anyone (a readiness probe's /health)
    TOKEN = "token"  #: `Authorization: Bearer TOKEN`
    TOKEN_OR_QUERY = (
        "token_or_query"  #: also `?token=`: WebSockets and pages, which browsers open without headers
    )
    ENDPOINT = "endpoint"  #: the route checks the key itself (the policy's per-rollout keys)


@dataclass(frozen=True)
class Refusal:
    status: int
    #: "unauthorized", "forbidden" (Host or Origin) or "too_large".
    kind: str
    message: str
    limit: int | None = None


@dataclass(frozen=True)
class Refusals:
    """How one app answers a refusal: an HTTP response, and for WebSockets one JSON frame
    before the close (None: the handshake is refused with 403)."""

    response: Callable[[Refusal], Response]
    frame: Callable[[Refusal], dict[str, Any]] | None = None


def bearer(authorization: str | None) -> str:
    """The key in `Authorization: Bearer KEY`, or ''."""
    header = authorization or ""
    return header[7:].strip() if header.lower().startswith("bearer ") else ""


def same_secret(given: str, expected: str) -> bool:
    return hmac.compare_digest(given.encode(), expected.encode())


async def _refuse(scope: Scope, receive: Receive, send: Send, refusals: Refusals, refusal: Refusal) -> None:
    if scope["type"] == "http":
        await refusals.response(refusal)(scope, receive, send)
        return
    if refusals.frame is None or refusal.kind == "forbidden":  # a cross-site page gets no session at all
        await send({"type": "websocket.close", "code": WS_POLICY_VIOLATION})
        return
    if (await receive())["type"] != "websocket.connect":
        return
    await send({"type": "websocket.accept"})
    await send({"type": "websocket.send", "text": json.dumps(refusals.frame(refusal))})
    await send({"type": "websocket.close", "code": WS_POLICY_VIOLATION})


# -- Host and Origin ---------------------------------------------------------------------------


def split_host(header: str) -> str:
    """The host name of a `Host` header, lower case, without its port or brackets."""
    host = header.strip().lower()
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host
    name, _, port = host.rpartition(":")
    return (name if name and port.isdigit() else host).rstrip(".")


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


#: Every answer may be shown only in a frame of the server's own pages: another site cannot
#: frame `/web` and have the user click in it (clickjacking). CSP for today's browsers,
#: X-Frame-Options for older ones.
NO_FOREIGN_FRAMES = (
    (b"content-security-policy", b"frame-ancestors 'self'"),
    (b"x-frame-options", b"SAMEORIGIN"),
)
NULL_ORIGIN = "null"


def checked_origins(allowed_origins: Iterable[str], *, allow_null: bool = False) -> list[str]:
    """`allowed_origins` as given; `null` refused in words unless `allow_null`: it is the
    Origin of every sandboxed frame and `file://` page, whatever site put it there."""
    origins = [o.strip() for o in allowed_origins]
    if not allow_null and any(o.lower() == NULL_ORIGIN for o in origins):
        raise ValueError(
            "--allowed-origins null would let every sandboxed frame and file:// page of any site call "
            "this server (their Origin is 'null'); give real origins (https://site), or add "
            "--allow-null-origin if you mean it"
        )
    return origins


def exposure_warnings(
    allowed_hosts: Iterable[str], allowed_origins: Iterable[str], token: str | None
) -> list[str]:
    """What the operator opened to the web pages the user visits, said at start."""
    hosts, origins = set(allowed_hosts), {o.lower() for o in allowed_origins}
    warnings = []
    if "*" in hosts and token is None:
        warnings.append(
            "--allowed-hosts '*' without a token: any web page you visit can reach this server through a "
            "name of its own that resolves to it (DNS rebinding); give --token, or name the hosts"
        )
    if "*" in origins and token is None:
        warnings.append(
            "--allowed-origins '*' without a token: any web page you visit can drive this server; give "
            "--token, or name the origins"
        )
    if NULL_ORIGIN in origins:
        warnings.append("--allowed-origins null: every sandboxed frame and file:// page may call this server")
    return warnings


class HostOriginGuard:
    """Serve only requests whose `Host` is loopback or the address the connection came in on
    (or in `allowed_hosts`), and whose `Origin`, when sent, is this server (or in `allowed_origins`);
    and let no other site frame what it answers (`NO_FOREIGN_FRAMES`)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        refusals: Refusals,
        allowed_hosts: Iterable[str] = (),
        allowed_origins: Iterable[str] = (),
    ) -> None:
        self.app = app
        self.refusals = refusals
        self.allowed_hosts = frozenset(split_host(h) if h != "*" else h for h in allowed_hosts)
        self.allowed_origins = frozenset(o.strip().lower().rstrip("/") for o in allowed_origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            reason = self.refused(scope)
            if reason is not None:
                await _refuse(scope, receive, send, self.refusals, Refusal(403, "forbidden", reason))
                return
        if scope["type"] == "http":
            await self.app(scope, receive, _framed_by_own_pages_only(send))
            return
        await self.app(scope, receive, send)

    def refused(self, scope: Scope) -> str | None:
        """Why this request is refused, or None."""
        headers = HTTPConnection(scope).headers
        hosts = headers.getlist("host")
        if len(hosts) > 1:  # RFC 9112: a request with more than one Host is refused
            return "more than one Host header"
        host_header = hosts[0] if hosts else ""
        host = split_host(host_header)
        local = (scope.get("server") or ("", 0))[0] or ""
        if "*" not in self.allowed_hosts and not (
            is_loopback(host) or host == split_host(local) or host in self.allowed_hosts
        ):
            return (
                f"Host {host_header!r} is not served here: only loopback names and this server's own "
                "address are (start it with --allowed-hosts to add names)"
            )
        origin = headers.get("origin")
        if origin is None or "*" in self.allowed_origins:
            return None
        normalized = origin.strip().lower().rstrip("/")
        parts = urlsplit(normalized)
        own = parts.scheme in ("http", "https") and parts.netloc == host_header.strip().lower()
        if own or normalized in self.allowed_origins:
            return None
        return (
            f"Origin {origin!r} may not call this server: a page of another site cannot drive it "
            "(start it with --allowed-origins to allow one)"
        )


def _framed_by_own_pages_only(send: Send) -> Send:
    async def framed(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            names = {name.lower() for name, _ in message.get("headers", [])}
            extra = [(name, value) for name, value in NO_FOREIGN_FRAMES if name not in names]
            message = {**message, "headers": [*message.get("headers", []), *extra]}
        await send(message)

    return framed


# -- the token, by route -----------------------------------------------------------------------


class TokenGuard:
    """`Authorization: Bearer TOKEN` on every route the app's table does not name otherwise.

    `access` maps route paths as declared (`/rollouts/{rollout_id}/sample`, `/ws`, a mount's
    prefix) to who may call them; a route not named, and a path no route matches, need the token."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        token: str | None,
        routes: Callable[[], list[Any]],
        access: Mapping[str, Access],
        refusals: Refusals,
    ) -> None:
        self.app = app
        self.token = token
        self.routes = routes
        self.access = dict(access)
        self.refusals = refusals

    def route_access(self, scope: Scope) -> Access:
        partial = None
        for route in self.routes():
            match, _ = route.matches(scope)
            if match == Match.FULL:
                return self.access.get(getattr(route, "path", ""), Access.TOKEN)
            if match == Match.PARTIAL and partial is None:  # the path, another method (405 follows)
                partial = route
        return self.access.get(getattr(partial, "path", ""), Access.TOKEN) if partial else Access.TOKEN

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.token is None or scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        access = self.route_access(scope)
        if access is Access.OPEN:  # the route may say less to a caller without the token
            scope.setdefault("state", {})["authorized"] = self.authorized(scope, Access.TOKEN)
        if access in (Access.OPEN, Access.ENDPOINT) or self.authorized(scope, access):
            await self.app(scope, receive, send)
            return
        refusal = Refusal(401, "unauthorized", "Missing or wrong bearer token")
        await _refuse(scope, receive, send, self.refusals, refusal)

    def authorized(self, scope: Scope, access: Access) -> bool:
        assert self.token is not None
        given = bearer(HTTPConnection(scope).headers.get("authorization"))
        if not given and access is Access.TOKEN_OR_QUERY:
            query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
            given = (query.get("token") or [""])[0]
        return same_secret(given, self.token)


# -- body size ---------------------------------------------------------------------------------


class BodyTooLarge(Exception):
    """Raised out of `receive` once a body passes the limit; `BodyLimit` answers 413."""


#: A declared body this little over the limit is read and thrown away before the 413, so the
#: client reads the answer: a server that closes with unread bytes resets the connection, and
#: the client then sees a broken socket instead of the refusal. Nothing read is kept.
DRAIN_AT_MOST = 1 << 20


async def _discard_body(receive: Receive) -> None:
    while True:
        message = await receive()
        if message["type"] != "http.request" or not message.get("more_body", False):
            return


class BodyLimit:
    """Bodies of at most `limit` bytes: a larger declared length is refused unread, a chunked
    body at the first chunk past the limit; nothing larger is ever held."""

    def __init__(self, app: ASGIApp, *, limit: Callable[[], int], refusals: Refusals) -> None:
        self.app = app
        self.limit = limit
        self.refusals = refusals

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limit()
        declared = HTTPConnection(scope).headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            if int(declared) <= limit + DRAIN_AT_MOST:
                await _discard_body(receive)  # a clean 413 instead of a reset the client may not read
            await self._too_large(scope, receive, send, int(declared), limit)
            return
        seen, started = 0, False

        async def counted() -> dict[str, Any]:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise BodyTooLarge(seen)
            return message

        async def watched(message: dict[str, Any]) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted, watched)
        except BodyTooLarge:
            if started:
                raise
            await self._too_large(scope, receive, send, seen, limit, more=True)

    async def _too_large(
        self, scope: Scope, receive: Receive, send: Send, size: int, limit: int, more: bool = False
    ) -> None:
        what = f"passed {limit} bytes (cut off at {size})" if more else f"has {size} bytes"
        message = f"the body {what}; this server takes at most {limit}"
        response = self.refusals.response(Refusal(413, "too_large", message, limit))
        response.headers["connection"] = "close"  # the rest of the body is never read
        await response(scope, receive, send)
