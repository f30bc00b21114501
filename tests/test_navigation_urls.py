"""Navigation checks read URLs as Chromium does (`envs/browsergym/urls.py`, WHATWG URL rules):
for the spellings where Python's `urllib` and the standard differ, the parser and real
Chromium's own `new URL()` agree; a navigation to a blocked host spelled any of those ways is
the blocked-navigation error, the page stays where it was and the episode goes on, and so is
a redirect that the browser's per-request check stops."""

from __future__ import annotations

import http.server
import threading

import pytest

from envharness.envs.browsergym.engine import CHROMIUM_ARGS, DEFAULT_CHROMIUM
from envharness.envs.browsergym.factory import make_environment_factory
from envharness.envs.browsergym.models import BrowserGymAction
from envharness.envs.browsergym.urls import InvalidURL, parse_url, resolve_url

pytestmark = pytest.mark.asyncio(loop_scope="module")
TASK_URL = "http://miniwob.local/miniwob/click-test.html"

#: URL -> the host Chromium navigates to (None: not a valid URL), where `urlsplit` says otherwise.
SPELLINGS = {
    "http://127.0.0.1:1\\@miniwob.local/": "127.0.0.1",  # a backslash ends an http URL's authority
    "http://miniwob.local\\@127.0.0.1/": "miniwob.local",
    "http:\\\\127.0.0.1\\x": "127.0.0.1",
    "http:/127.0.0.1/": "127.0.0.1",  # any number of slashes
    "ht\ttp://127.0.0.1/": "127.0.0.1",  # tabs and newlines are removed anywhere
    "http://127.0.\n0.1/": "127.0.0.1",
    " \x01http://127.0.0.1/ ": "127.0.0.1",  # leading C0 controls and spaces are stripped
    "http://a@b@127.0.0.1/": "127.0.0.1",  # the host follows the last @
    "http://miniwob.local@127.0.0.1/": "127.0.0.1",
    "http://user:pass@miniwob.local/": "miniwob.local",
    "http://%6c%6fcalhost/": "localhost",  # percent-encoded hosts are decoded
    "http://%31%32%37.0.0.1/": "127.0.0.1",
    "http://LOCALHOST/": "localhost",
    "http://ｌｏｃａｌｈｏｓｔ/": "localhost",  # full-width letters map (IDNA)
    "http://0x7f.1/": "127.0.0.1",  # IPv4 in hex, octal and short forms
    "http://0x7f000001/": "127.0.0.1",
    "http://0177.0.0.1/": "127.0.0.1",
    "http://2130706433/": "127.0.0.1",
    "http://127.1/": "127.0.0.1",
    "http://127.0.0.1./": "127.0.0.1",
    "http://[::1]/": "[::1]",
    "http://[0:0::1]/": "[::1]",
    "http://[::ffff:127.0.0.1]/": "[::ffff:7f00:1]",
    "http://[::1%25eth0]/": None,  # IPv6 zone ids are not valid in URLs
    "http://[::1%eth0]/": None,
    "http://256.0.0.1/": None,
    "http://0x100000000/": None,
    "http://foo.09/": None,
    "http://miniwob.local:80@127.0.0.1/": "127.0.0.1",
    "http://miniwob.local%2f@127.0.0.1/": "127.0.0.1",
    "http://miniwob.local#@127.0.0.1/": "miniwob.local",
    "http://miniwob.local?@127.0.0.1/": "miniwob.local",
    "http://miniwob.local%00/": None,
    "http://0x/": "0.0.0.0",
}

#: A redirect's Location (or a link) against an http page -> the host Chromium goes to, where
#: `urljoin` keeps the page's host for the first six.
BASE = "http://127.0.0.1:8000/dir/page?q"
RELATIVE = {
    "/\\localhost:1/": "localhost",  # any two of / and \ start a new authority
    "\\\\localhost:1/": "localhost",
    "\\/localhost:1/": "localhost",
    "http:\\\\localhost:1/": "localhost",  # the base's scheme: relative to it, then the same
    "/\t/localhost:1/": "localhost",  # tabs and newlines removed first
    "https:localhost:1/x": "localhost",  # another special scheme: its host, any slashes
    "http:path": "127.0.0.1",
    "/\\": None,  # an empty host
    "\\path": "127.0.0.1",  # one is a path
    "path\\x?a\\b": "127.0.0.1",
    "//miniwob.local/x": "miniwob.local",
    " /x ": "127.0.0.1",
    "?z": "127.0.0.1",
}


def resolved_host(reference: str) -> str | None:
    try:
        return parse_url(resolve_url(BASE, reference)).host.split(":")[0]
    except InvalidURL:
        return None


def parsed_host(url: str) -> str | None:
    try:
        return parse_url(url).host
    except InvalidURL:
        return None


async def test_the_parser_reads_each_spelling_as_the_standard_says():
    for url, host in SPELLINGS.items():
        assert parsed_host(url) == host, url
    assert parsed_host("http://exa mple.com/") is None  # Chromium keeps it as exa%20mple.com: stricter here
    assert parse_url("javascript:alert(1)").scheme == "javascript"
    assert parse_url("FILE:///etc/passwd").scheme == "file"


async def test_the_parser_and_chromium_agree():
    from playwright.async_api import async_playwright

    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=DEFAULT_CHROMIUM, args=list(CHROMIUM_ARGS))
        page = await browser.new_page()
        read = "u => { try { return new URL(u).host.replace(/:\\d+$/, '') } catch (e) { return null } }"
        for url, host in SPELLINGS.items():
            assert await page.evaluate(read, url) == host, url  # the table is Chromium's reading
        resolve = "([u, b]) => { try { return new URL(u, b).hostname } catch (e) { return null } }"
        for reference, host in RELATIVE.items():
            assert await page.evaluate(resolve, [reference, BASE]) == host, reference
        await browser.close()


async def test_references_resolve_as_the_standard_says():
    for reference, host in RELATIVE.items():
        assert resolved_host(reference) == host, reference
    assert resolve_url(BASE, "path\\x?a\\b") == "http://127.0.0.1:8000/dir/path/x?a\\b"


def A(text: str) -> BrowserGymAction:
    return BrowserGymAction(action_str=text)


#: Where the allowed host's page redirects: a blocked host, spelled as Chromium reads it.
REDIRECTS = ["http://localhost:1/", "/\\localhost:1/", "\\\\localhost:1/", "http:\\\\localhost:1/",
             "/\t/localhost:1/", "https:localhost:1/"]  # fmt: skip


class _Redirect(http.server.BaseHTTPRequestHandler):
    """An allowed host whose page `/redirect/N` redirects to `REDIRECTS[N]` (a blocked host)."""

    def do_GET(self):  # noqa: N802
        self.send_response(302)
        self.send_header("Location", REDIRECTS[int(self.path.rsplit("/", 1)[-1] or 0)])
        self.end_headers()

    def log_message(self, *args):
        pass


async def blocked_steps_keep_the_page(env, urls: list[str]) -> None:
    await env.reset_async(task="click-test", seed=0)
    for url in urls:
        obs = await env.step_async(A(f"goto({url!r})"))
        assert "is blocked" in obs.last_action_error, (url, obs.last_action_error)
        assert obs.url == TASK_URL and not obs.done, (url, obs.url)
    obs = await env.step_async(A("noop()"))  # the page still answers, the episode goes on
    assert obs.last_action_error == "" and obs.url == TASK_URL and "Click Me!" in obs.text


async def test_a_blocked_navigation_keeps_the_page_and_the_episode():
    factory = make_environment_factory()
    env = factory()
    try:
        loopback = ("127.0.0.1", "localhost", "[::1]", "[::ffff:7f00:1]")
        await blocked_steps_keep_the_page(env, [u for u, h in SPELLINGS.items() if h in loopback])
    finally:
        await env.close_async()
        await factory.aclose()


async def test_a_redirect_to_a_blocked_host_keeps_the_page_and_the_episode():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Redirect)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    factory = make_environment_factory(allowed_hosts="127.0.0.1")
    env = factory()
    try:
        port = server.server_port
        redirects = [f"http://127.0.0.1:{port}/redirect/{n}" for n in range(len(REDIRECTS))]
        await blocked_steps_keep_the_page(env, [*redirects, f"http://localhost:{port}\\@127.0.0.1/"])
    finally:
        await env.close_async()
        await factory.aclose()
        server.shutdown()
