"""Playwright's per-call stack capture, made cheap (`playwright_stacks`): calls still carry the API
name and the caller's location, errors still name the failing API, and `inspect`/`traceback`
themselves stay untouched for everyone else."""

import inspect
import traceback

import pytest

from envharness.envs.browsergym import miniwob
from envharness.envs.browsergym.engine import BrowserEngine, HostGuard


def record_zones(monkeypatch) -> list:
    """(method, API zone) of every message Playwright sends from now on: the zone carries the
    API name and the caller's frames that the stack capture produced."""
    from playwright._impl import _connection

    zones = []
    send = _connection.Connection._send_message_to_server

    def spy(self, obj, method, params, no_reply=False):
        zones.append((method, self._api_zone.get()))
        return send(self, obj, method, params, no_reply)

    monkeypatch.setattr(_connection.Connection, "_send_message_to_server", spy)
    return zones


async def test_calls_keep_api_name_location_and_error_text(monkeypatch):
    from playwright._impl import _connection

    engine = BrowserEngine()
    try:
        context = await engine.new_context(viewport=miniwob.MINIWOB_VIEWPORT, guard=HostGuard())
        assert _connection.inspect.stack is not inspect.stack  # the shim is in place
        assert inspect.stack.__module__ == "inspect" and traceback.extract_stack.__module__ == "traceback"
        page = await context.new_page()

        zones = record_zones(monkeypatch)
        line = inspect.currentframe().f_lineno + 1
        assert await page.evaluate("1 + 1") == 2
        method, zone = next((m, z) for m, z in zones if m == "evaluateExpression")
        assert zone["apiName"] == "Page.evaluate"
        assert zone["frames"][0]["file"] == __file__ and zone["frames"][0]["line"] == line

        with pytest.raises(Exception) as failed:
            await page.evaluate("(() => { throw new Error('boom') })()")
        assert str(failed.value).startswith("Page.evaluate: ") and "boom" in str(failed.value)
    finally:
        await engine.aclose()


async def test_route_handlers_keep_api_name_and_location(monkeypatch):
    """A route's `fulfill` takes its stack in `_network` (every MiniWoB file a page loads)."""
    from playwright._impl import _connection, _network

    engine = BrowserEngine()
    try:
        context = await engine.new_context(viewport=miniwob.MINIWOB_VIEWPORT, guard=HostGuard())
        assert _network.inspect.stack is _connection.inspect.stack is not inspect.stack
        page = await context.new_page()
        lines = []

        async def handler(route):
            lines.append(inspect.currentframe().f_lineno + 1)
            await route.fulfill(status=200, body="<p>hi</p>", content_type="text/html")

        await page.route("http://miniwob.local/**", handler)
        zones = record_zones(monkeypatch)
        await page.goto("http://miniwob.local/x.html")
        assert await page.inner_text("p") == "hi"
        zone = next(z for m, z in zones if m == "fulfill")
        assert zone["apiName"] == "Route.fulfill"
        assert zone["frames"][0]["file"] == __file__ and zone["frames"][0]["line"] == lines[0]
    finally:
        await engine.aclose()
