"""Chromiums that run elsewhere, reached over CDP: the engine for `--option browser=cdp://HOST:PORT`.

On a GPU node the browsers cost host memory and CPU next to the trainer; this engine keeps the
environment server there and the browsers on other machines (`envharness browser --port N` on
each, or any Chromium started with `--remote-debugging-port`). It has the `BrowserEngine`
interface, so sessions, the warm pool and the server do not know the difference:

- **Spread by load.** A new session's context goes to the connected browser with the fewest
  contexts; a browser not yet connected is connected on first use.
- **A browser that disappears** ends only its sessions (`BrowserSessionLost`: an infrastructure
  error over the wire, never a reward), and is tried again with exponential backoff (0.5 s up to
  30 s); the next reset of those sessions lands on another browser.
- **The list can change.** `browser=@/path/list.txt` (one address per line) is read again at most
  once a second, and `dns://NAME:PORT` stands for every address NAME resolves to (a Kubernetes
  headless Service: one per browser pod), looked up as often: a browser that joins is used by
  the next new context, one that leaves gets no new ones (its open sessions go on while it lives).
- **The same isolation.** One context per session, and every request of a context goes through
  the session's `HostGuard` route (task files served, allowed hosts passed, the rest aborted),
  whatever flags the remote Chromium runs with.

Chromium's DevTools server refuses a Host header that is not an IP address or `localhost`, so
host names (a Kubernetes Service) are resolved here and connected to by address.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from envharness.envs.browsergym.engine import (
    BID_ATTRIBUTE,
    CLOSE_TIMEOUT_S,
    BrowserUnavailable,
    HostGuard,
    _stop_quietly,
)

logger = logging.getLogger(__name__)

#: Backoff of a browser that could not be reached or went away: first retry, cap.
RETRY_FIRST_S, RETRY_MAX_S = 0.5, 30.0
#: How long connecting to one browser may take before the next one is tried.
CONNECT_TIMEOUT_S = 10.0
#: A browser list file is read again at most this often.
LIST_REREAD_S = 1.0


class RemoteBrowserUnavailable(BrowserUnavailable):
    """No remote browser answers (the message lists them and why)."""


def parse_addresses(spec: str | Iterable[str]) -> list[str]:
    """`cdp://h:p,dns://name:p` (or a list of them) -> ['cdp://h:p', 'dns://name:p'], each checked."""
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    out = []
    for item in (i.strip() for i in items):
        if not item or item.startswith("#"):
            continue
        parts = urlsplit(item)
        if parts.scheme not in ("cdp", "dns", "http", "ws") or not parts.hostname or not parts.port:
            raise ValueError(
                f"browser address {item!r}: use cdp://HOST:PORT (a Chromium's remote debugging port) "
                "or dns://NAME:PORT (every address NAME resolves to)"
            )
        out.append(f"{'dns' if parts.scheme == 'dns' else 'cdp'}://{parts.hostname}:{parts.port}")
    return out


def expand(addresses: list[str]) -> list[str]:
    """cdp:// addresses as they are; each dns://NAME:PORT as cdp://IP:PORT for every address of NAME
    (none when NAME does not resolve now: a Service with no ready pod)."""
    out: list[str] = []
    for address in addresses:
        parts = urlsplit(address)
        if parts.scheme != "dns":
            out.append(address)
            continue
        try:
            infos = socket.getaddrinfo(parts.hostname, parts.port, type=socket.SOCK_STREAM)
        except OSError as exc:
            logger.warning("browser service %s does not resolve: %s", address, exc)
            continue
        for info in infos:
            ip = info[4][0]
            out.append(f"cdp://{f'[{ip}]' if ':' in ip else ip}:{parts.port}")
    return list(dict.fromkeys(out))


@dataclass
class _Remote:
    """One remote browser: its connection (None until connected) and its retry schedule."""

    address: str
    browser: Any = None
    failures: int = 0
    retry_at: float = 0.0
    last_error: str = ""
    contexts: set = field(default_factory=set)
    pending: int = 0  # contexts being created (picked, not yet made): counted as load

    @property
    def load(self) -> int:
        return len(self.contexts) + self.pending

    @property
    def connected(self) -> bool:
        return self.browser is not None and self.browser.is_connected()

    def failed(self, error: BaseException | str) -> None:
        self.browser = None
        self.failures += 1
        self.retry_at = time.monotonic() + min(RETRY_MAX_S, RETRY_FIRST_S * 2 ** (self.failures - 1))
        self.last_error = _first_line(error)


class RemoteBrowsers:
    """Remote Chromiums behind the `BrowserEngine` interface. Use `await start()` / `await aclose()`."""

    def __init__(self, spec: str | Iterable[str]) -> None:
        self._list_file = Path(spec[1:]) if isinstance(spec, str) and spec.startswith("@") else None
        self._static = [] if self._list_file else parse_addresses(spec)
        self._remotes: dict[str, _Remote] = {}
        self._listed: list[str] = []  # the addresses new contexts may go to (the list as last read)
        self._read_at = 0.0
        self._playwright: Any = None
        self._lock = asyncio.Lock()
        self.generation = 1  # sessions ask `holds()`: a remote context lives as long as its browser
        if self._list_file is None and not self._static:
            raise ValueError(f"no browser address in {spec!r}")

    # -- the list ------------------------------------------------------------------------------
    def _refresh(self) -> None:
        """Read the list file and resolve dns:// names again (at most once a second)."""
        if self._listed and time.monotonic() - self._read_at < LIST_REREAD_S:
            return
        self._read_at = time.monotonic()
        if self._list_file is None:
            sources = self._static
        else:
            try:
                sources = parse_addresses(self._list_file.read_text().splitlines())
            except OSError as exc:
                raise RemoteBrowserUnavailable(f"browser list {self._list_file}: {exc}") from None
        self._listed = expand(sources)
        for address in self._listed:
            self._remotes.setdefault(address, _Remote(address))

    @property
    def addresses(self) -> list[str]:
        """The browsers new contexts may go to, as last listed."""
        return list(self._listed)

    # -- the BrowserEngine interface -----------------------------------------------------------
    async def start(self) -> None:
        (await self._pick()).pending -= 1

    async def new_context(
        self,
        *,
        viewport: dict[str, int],
        guard: HostGuard,
        timeout_ms: int = 5000,
        navigation_timeout_ms: int = 30_000,
        **options: Any,
    ) -> Any:
        """A fresh context on the least loaded browser that answers, guarded as locally."""
        tried: set[str] = set()
        while True:
            remote = await self._pick(exclude=tried)  # its `pending` counts this context already
            tried.add(remote.address)
            try:
                context = await asyncio.wait_for(
                    remote.browser.new_context(viewport=viewport, **options), CONNECT_TIMEOUT_S
                )
            except Exception as exc:  # the browser went away between the pick and the call
                logger.warning(
                    "remote browser %s: new context failed (%s); trying another",
                    remote.address,
                    _first_line(exc),
                )
                remote.failed(exc)
                continue
            finally:
                remote.pending -= 1
            remote.contexts.add(context)
            context.on("close", lambda _ctx, remote=remote, context=context: remote.contexts.discard(context))
            context.set_default_timeout(timeout_ms)
            context.set_default_navigation_timeout(navigation_timeout_ms)
            await context.route("**/*", guard.route)
            return context

    def holds(self, context: Any, generation: int) -> bool:
        """Whether `context` (made by this engine) still has its browser."""
        browser = getattr(context, "browser", None)
        return browser is not None and browser.is_connected()

    @property
    def connected(self) -> bool:
        return any(r.connected for r in self._remotes.values())

    def browser_pids(self) -> list[int]:
        return []  # the processes run elsewhere

    async def aclose(self) -> None:
        """Close this server's contexts and disconnect; the remote browsers keep running."""
        async with self._lock:
            remotes, pw, self._playwright = list(self._remotes.values()), self._playwright, None
        for remote in remotes:
            browser, remote.browser = remote.browser, None
            if browser is not None:
                try:  # over CDP, close() drops the contexts we made and disconnects
                    await asyncio.wait_for(browser.close(), CLOSE_TIMEOUT_S)
                except Exception:  # already gone or not answering: nothing of ours is left there to wait for
                    pass
        await _stop_quietly(pw)

    # -- choosing and connecting ----------------------------------------------------------------
    async def _pick(self, exclude: set[str] = frozenset()) -> _Remote:  # type: ignore[assignment]
        """The connected browser with the fewest contexts, connecting to those due for a try."""
        async with self._lock:
            await asyncio.to_thread(self._refresh)  # a file read, DNS look-ups
            listed = [self._remotes[a] for a in self._listed if a not in exclude]
            now = time.monotonic()
            due = [r for r in listed if not r.connected and r.retry_at <= now]
            if due:
                await asyncio.gather(*(self._connect(r) for r in due))
            live = [r for r in listed if r.connected]
            if not live:
                why = (
                    "; ".join(
                        f"{self._remotes[a].address}: {self._remotes[a].last_error or 'not tried yet'}"
                        for a in self._listed
                    )
                    or "the list is empty"
                )
                raise RemoteBrowserUnavailable(f"no remote browser answers ({why})")
            chosen = min(live, key=lambda r: r.load)
            chosen.pending += 1
            return chosen

    async def _connect(self, remote: _Remote) -> None:
        if self._playwright is None:
            from playwright.async_api import async_playwright

            from envharness.envs.browsergym import playwright_replies, playwright_stacks

            playwright_stacks.install()
            playwright_replies.install()
            self._playwright = await async_playwright().start()
            self._playwright.selectors.set_test_id_attribute(BID_ATTRIBUTE)
        parts = urlsplit(remote.address)
        try:
            host = await asyncio.to_thread(_address_of, parts.hostname)
            remote.browser = await self._playwright.chromium.connect_over_cdp(
                f"http://{host}:{parts.port}", timeout=CONNECT_TIMEOUT_S * 1000
            )
        except Exception as exc:
            if remote.failures == 0:
                logger.warning("remote browser %s unreachable: %s", remote.address, _first_line(exc))
            remote.failed(exc)
            return
        remote.failures, remote.last_error, remote.contexts = 0, "", set()
        logger.info("connected to remote browser %s", remote.address)


def _first_line(error: BaseException | str) -> str:
    text = str(error).strip()
    return text.splitlines()[0][:200] if text else type(error).__name__


def _address_of(host: str) -> str:
    """An IP address for `host` (Chromium's DevTools server answers only IP or localhost Hosts)."""
    if host == "localhost":
        return host
    info = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    address = info[0][4][0]
    return f"[{address}]" if ":" in address else address
