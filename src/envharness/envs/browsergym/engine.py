"""One Chromium per server process, one browser context per session.

`BrowserEngine` owns the Playwright driver and the browser. Sessions ask it for a
fresh, isolated `BrowserContext` (own cookies, storage, cache, pages). Each context
serves the MiniWoB++ pages itself and refuses requests to any other host unless that
host is allowed; below that, Chromium resolves no host name but loopback and the allowed
hosts, so neither pages nor the browser itself reach the network. If the browser dies,
the next `new_context()` launches a new one; contexts of the dead browser are gone, which
their sessions notice (see `BrowserGymEnvironment`), while sessions that reset get a
working context again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from envharness.envs.browsergym.miniwob import MINIWOB_HOST
from envharness.envs.browsergym.miniwob_pages import serve_miniwob_request
from envharness.envs.browsergym.urls import InvalidURL, parse_host, parse_url, resolve_url

logger = logging.getLogger(__name__)

#: Debian's Chromium; Playwright's own downloads are not available on these machines.
CHROMIUM = "/usr/lib/chromium/chromium"
#: Debian's headless-only build of the same Chromium (package chromium-headless-shell): what
#: Playwright itself runs headless. It launches and renders on less CPU than the full browser's
#: headless mode, so a headless engine takes it when it is installed (bench/README.md, "Chromium
#: flags").
HEADLESS_SHELL = "/usr/lib/chromium/chromium-headless-shell"


def default_chromium(headless: bool = True) -> str:
    """``ENVHARNESS_CHROMIUM`` when set; else the headless shell for a headless browser when
    installed; else Debian's Chromium."""
    if chosen := os.environ.get("ENVHARNESS_CHROMIUM"):
        return chosen
    return HEADLESS_SHELL if headless and Path(HEADLESS_SHELL).exists() else CHROMIUM


DEFAULT_CHROMIUM = default_chromium()
#: Chromium's spare renderer (see CHROMIUM_ARGS), off in the BrowserGym engine's workers too.
NO_SPARE_RENDERER = "SpareRendererForSitePerProcess"
CHROMIUM_ARGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    # As BrowserGym: keep scrollbars visible in screenshots. The WebUI omnibox popups are a
    # renderer each in every browser context, headless or not: off. No spare renderer: after each
    # navigation Chromium starts one in advance for the next cross-site page, which a session (one
    # context, one site) never takes. RenderDocument stays on: without it Chromium's renderer stops
    # answering on in-place restarts (bench/README.md, "Chromium flags", has the measurements).
    f"--disable-features=OverlayScrollbars,ExtendedOverlayScrollbars,WebUIOmniboxPopup,WebUIOmniboxAimPopup,{NO_SPARE_RENDERER}",
    # Not here: --disable-gpu-vsync / --disable-frame-rate-limit (headless frames keep their rate
    # with or without them) and --run-all-compositor-stages-before-draw (it spins the browser with
    # a few pages open: clicks got slower). bench/README.md, "Chromium flags".
    # Nothing leaves the machine: no proxy look-up, and every host name fails to resolve (Chromium's
    # own calls to Google's update, time and account hosts, and the favicon request, which Playwright
    # cannot route); loopback stays reachable. MiniWoB pages never reach DNS: the context serves them.
    "--no-proxy-server",
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
)
#: Prefix of the flag (ignored by Chromium) that marks an engine's browser process.
ENGINE_MARKER = "--envharness-engine="
#: BrowserGym makes Playwright's test-id attribute `bid`, so `get_by_test_id(bid)` finds elements.
BID_ATTRIBUTE = "bid"
#: Hang guards of `aclose()`: a browser that does not close in this time (it stopped answering)
#: is killed, and so is a Playwright driver that does not stop; a healthy browser closes at once.
CLOSE_TIMEOUT_S = 30.0


def host_resolver_rules(allowed_hosts: Iterable[str] = ()) -> str:
    """The ``--host-resolver-rules`` flag: no host name resolves except loopback and `allowed_hosts`."""
    excluded = ["127.0.0.1", *sorted({h.lower() for h in allowed_hosts} - {"127.0.0.1"})]
    return "--host-resolver-rules=MAP * ~NOTFOUND, " + ", ".join(f"EXCLUDE {h}" for h in excluded)


def main_browser_pids(marker: str = ENGINE_MARKER) -> list[int]:
    """Main (not child) Chromium processes whose command line has an argument starting with
    `marker`: one engine's own marker, or by default every envharness engine's. A child forked a
    moment ago still has its parent's command line (no `--type=` until it execs): a process whose
    parent matches too is such a child, not a browser of its own."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            if any(a.startswith(marker.encode()) for a in cmdline) and not any(
                a.startswith(b"--type=") for a in cmdline
            ):
                stat = (entry / "stat").read_text()
                parents[int(entry.name)] = int(stat.rpartition(")")[2].split()[1])
        except (OSError, ValueError, IndexError):
            continue
    return [pid for pid, parent in parents.items() if parent not in parents]


class BrowserUnavailable(RuntimeError):
    """No browser can be had for a new context (none launches here, or no remote one answers)."""

    infrastructure = True


class NavigationBlocked(ValueError):
    """A URL outside the environment's own pages and the allowed hosts."""


#: Where a page keeps the URL of its last navigation the guard blocked (see `HostGuard.route`).
BLOCKED_NAVIGATION = "_envharness_blocked_navigation"


class HostGuard:
    """Which hosts a session may reach: the hosts its task set serves itself (`served`: host ->
    route handler; default MiniWoB's own origin) plus `allowed_hosts`. URLs are read as Chromium
    reads them (`urls.py`, the WHATWG URL Standard), so this check and the browser agree."""

    def __init__(
        self,
        allowed_hosts: Iterable[str] = (),
        served: Mapping[str, Callable[[Any], Awaitable[None]]] | None = None,
    ) -> None:
        self.allowed_hosts = frozenset(_normal_host(h) for h in allowed_hosts)
        self.served = dict(served) if served is not None else {MINIWOB_HOST: serve_miniwob_request}

    def _host(self, url: str) -> str | None:
        """The host of an http(s) URL as the browser reads it; None for any other URL."""
        try:
            parsed = parse_url(url)
        except InvalidURL:
            return None
        return parsed.hostname if parsed.scheme in ("http", "https") else None

    def allows(self, url: str) -> bool:
        host = self._host(url)
        return host is not None and (host in self.served or host in self.allowed_hosts)

    def check(self, url: str) -> None:
        """Raise `NavigationBlocked` with the reason when `url` may not be opened."""
        if url == "about:blank" or self.allows(url):
            return
        host = self._host(url)
        if host is None:
            raise NavigationBlocked(
                f"navigation to {url[:100]!r} is blocked: only http(s) URLs may be opened"
            )
        allowed = ", ".join(sorted({*self.served, *self.allowed_hosts}))
        raise NavigationBlocked(
            f"navigation to host {host!r} is blocked: this environment opens only {allowed} "
            "(set allowed_hosts when starting the server to allow more)"
        )

    async def route(self, route: Any) -> None:
        """Context-wide request handler: serve the task set's files, pass allowed hosts, block the
        rest. A blocked navigation is answered 204 No Content, which leaves the page where it was
        (an aborted one would show Chromium's error page), and noted on the page for the action."""
        url = route.request.url
        handler = self.served.get(self._host(url) or "")
        if handler is not None:
            await handler(route)
        elif self.allows(url):
            await self._pass(route)
        else:
            await self._block(route, url)

    async def _pass(self, route: Any) -> None:
        """An allowed host's answer, its redirects checked here: Chromium follows a redirect
        without asking the route again, so one to a blocked host would otherwise go through."""
        response = await route.fetch(max_redirects=0)
        location = response.headers.get("location")
        if 300 <= response.status < 400 and location:
            try:  # the browser's rules, not urljoin's: `/\host` is another host to Chromium
                target = resolve_url(route.request.url, location)
            except InvalidURL:
                target = location  # a redirect Chromium cannot follow: refused as not http(s)
            if not self.allows(target):
                await self._block(route, target)
                return
        await route.fulfill(response=response)

    async def _block(self, route: Any, url: str) -> None:
        if route.request.is_navigation_request():
            with contextlib.suppress(Exception):  # a page closing: nothing to note
                setattr(route.request.frame.page, BLOCKED_NAVIGATION, url)
            await route.fulfill(status=204, body="")
        else:
            await route.abort("blockedbyclient")

    def take_blocked(self, page: Any) -> None:
        """Raise `NavigationBlocked` for a navigation of `page` this guard blocked since the last call."""
        url = getattr(page, BLOCKED_NAVIGATION, None)
        if url is not None:
            setattr(page, BLOCKED_NAVIGATION, None)
            self.check(url)


def _normal_host(host: str) -> str:
    """An allowed host as `parse_url` reports hosts (lower case, IPv4 canonical, IPv6 bare)."""
    text = host.strip()
    if ":" in text and not text.startswith("["):
        text = f"[{text}]"
    try:
        return parse_host(text).strip("[]")
    except InvalidURL:
        return host.strip().lower()


class BrowserEngine:
    """Shared Chromium for all sessions of a process. Use `await start()` / `await aclose()`."""

    def __init__(
        self,
        *,
        headless: bool = True,
        executable_path: str | None = None,
        extra_args: Iterable[str] = (),
        allowed_hosts: Iterable[str] = (),
    ) -> None:
        self.headless = headless
        self.executable_path = executable_path or default_chromium(headless)
        # A marker flag (ignored by Chromium) that lets us find our own browser process.
        self._marker = f"{ENGINE_MARKER}{uuid.uuid4().hex}"
        args = [a for a in CHROMIUM_ARGS if not a.startswith("--host-resolver-rules=")]
        self.args = [*args, host_resolver_rules(allowed_hosts), *extra_args, self._marker]
        if not headless:
            self.args.remove("--headless")
        self._playwright: Any = None
        self._browser: Any = None
        self._lock = asyncio.Lock()
        #: Incremented on every launch; a context created under an older generation is dead.
        self.generation = 0

    async def start(self) -> None:
        await self._ensure_browser()

    async def _ensure_browser(self) -> Any:
        async with self._lock:
            if self._browser is not None and self._browser.is_connected():
                return self._browser
            if not Path(self.executable_path).exists():
                raise BrowserUnavailable(
                    f"Chromium not found at {self.executable_path}; install it (apt-get install chromium) "
                    "or set ENVHARNESS_CHROMIUM to its path"
                )
            if self.generation:
                logger.warning("the browser died; launching a new one")
            had_driver = self._playwright is not None
            try:
                self._browser = await self._launch()
            except Exception:
                if not had_driver or self._driver_alive():  # a fresh or live driver: the error is real
                    raise
                # Playwright's driver died too (it can, on a browser's sudden death): a new one.
                logger.warning("the Playwright driver died; starting a new one")
                await _stop_quietly(self._playwright)
                self._playwright = None
                self._browser = await self._launch()
            self.generation += 1
            return self._browser

    async def _launch(self) -> Any:
        if self._playwright is None:
            from playwright.async_api import async_playwright

            from envharness.envs.browsergym import playwright_replies, playwright_stacks

            playwright_stacks.install()
            playwright_replies.install()

            self._playwright = await async_playwright().start()
            self._playwright.selectors.set_test_id_attribute(BID_ATTRIBUTE)
        return await self._playwright.chromium.launch(
            executable_path=self.executable_path,
            headless=self.headless,
            args=self.args,
            ignore_default_args=["--hide-scrollbars"],
        )

    def _driver_alive(self) -> bool:
        """Whether Playwright's driver still answers: its process runs and its pipe is open (a
        driver that crashes closes the pipe first; its exit status comes a moment later)."""
        transport = _driver_transport(self._playwright)
        proc = getattr(transport, "_proc", None)
        closed = getattr(transport, "on_error_future", None)
        return proc is not None and proc.returncode is None and not (closed is not None and closed.done())

    async def new_context(
        self,
        *,
        viewport: dict[str, int],
        guard: HostGuard,
        timeout_ms: int = 5000,
        navigation_timeout_ms: int = 30_000,
        **options: Any,
    ) -> Any:
        """A fresh isolated context that serves MiniWoB pages and applies `guard` to every request.

        `timeout_ms` bounds waits inside pages (BrowserGym's MiniWoB value); page loads get
        longer, since many sessions loading at once on a busy machine can take seconds.
        """
        browser = await self._ensure_browser()
        try:
            context = await browser.new_context(viewport=viewport, **options)
        except Exception:
            if self.browser_pids() and self._driver_alive():  # both live: the error is real
                raise
            # The browser (or Playwright's driver) died before we heard of it: launch anew.
            await self._forget(browser)
            context = await (await self._ensure_browser()).new_context(viewport=viewport, **options)
        context.set_default_timeout(timeout_ms)
        context.set_default_navigation_timeout(navigation_timeout_ms)
        await context.route("**/*", guard.route)
        return context

    async def _forget(self, browser: Any) -> None:
        """Drop `browser` (dead) so that the next `_ensure_browser` launches a new one."""
        async with self._lock:
            if self._browser is browser:
                self._browser = None

    def holds(self, context: Any, generation: int) -> bool:
        """Whether `context`, made under `generation`, still has its browser (a relaunch ends them all)."""
        return generation == self.generation and self.connected

    def browser_pids(self) -> list[int]:
        """Process ids of this engine's main browser process (for diagnostics and crash tests)."""
        return main_browser_pids(self._marker)

    @property
    def connected(self) -> bool:
        return self._browser is not None and self._browser.is_connected()

    async def aclose(self) -> None:
        """Close the browser and the Playwright driver; kill what does not close within
        `CLOSE_TIMEOUT_S`, so that shutting down never hangs nor leaves a browser. Safe to call twice."""
        async with self._lock:
            browser, self._browser = self._browser, None
            pw, self._playwright = self._playwright, None
        if browser is not None:
            try:
                await asyncio.wait_for(browser.close(), CLOSE_TIMEOUT_S)
            except TimeoutError:
                logger.warning("the browser did not close within %.0f s; killing it", CLOSE_TIMEOUT_S)
                _kill(self.browser_pids())
            except Exception:  # already dead
                pass
        await _stop_quietly(pw)


def _kill(pids: Iterable[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:  # gone already
            pass


def _driver_transport(playwright: Any) -> Any:
    """The pipe to Playwright's Node driver (None if Playwright's insides differ)."""
    connection = getattr(getattr(playwright, "_impl_obj", None), "_connection", None)
    return getattr(connection, "_transport", None)


def _driver_process(playwright: Any) -> Any:
    """The asyncio process of Playwright's Node driver (None if Playwright's insides differ)."""
    return getattr(_driver_transport(playwright), "_proc", None)


async def _stop_quietly(playwright: Any) -> None:
    """Stop a Playwright driver; one that already died cannot be stopped cleanly (its
    `stop()` then fails inside Playwright), and there is nothing left to stop. One that does
    not stop within `CLOSE_TIMEOUT_S` is killed."""
    if playwright is None:
        return
    try:
        await asyncio.wait_for(playwright.stop(), CLOSE_TIMEOUT_S)
    except TimeoutError:
        logger.warning("the Playwright driver did not stop within %.0f s; killing it", CLOSE_TIMEOUT_S)
        proc = _driver_process(playwright)
        if proc is not None and proc.returncode is None:
            proc.kill()
    except Exception as exc:
        logger.warning("stopping the Playwright driver: %s: %s", type(exc).__name__, exc)
