"""A client's mistakes are the client's: 4xx with OpenEnv's VALIDATION_ERROR, in words, and no
traceback in the server's log; every reset option is checked against its type and range; a
task is named once; `?token=` opens only the routes the docs name. Real browser server (real
Chromium and MiniWoB) on loopback, over HTTP and the WebSocket."""

from __future__ import annotations

import json
import logging

import httpx
import pytest
from websockets.sync.client import connect

from envharness.core.launchers import LocalServer

pytestmark = pytest.mark.timeout(600)
TOKEN = "s3cret-token"

MISTAKES = [
    {"task": "no-such-task"},
    {"task": "click-test", "colour": "blue"},  # an unknown option
    {"task": "click-test", "seed": 2**64},
    {"task": "click-test", "seed": True},
    {"task": "click-test", "seed": -1},
    {"task": "click-test", "screenshot": "no"},
    {"task": "click-test", "axtree": {"a": 1}},
    {"task": "click-test", "time_limit_s": float("nan")},
    {"task": "click-test", "time_limit_s": float("inf")},
    {"task": "click-test", "time_limit_s": -1},
    {"task": "click-test", "max_steps": 0},
    {"task": "click-test", "screenshot_format": "gif"},
    {"task": ""},
    {"task": "   "},
    {"task": 5},
    {"task": "click-test", "task_name": "click-button"},
    {"task_name": ""},
]


@pytest.fixture(scope="module")
def browser():
    with LocalServer("browsergym", token=TOKEN, web=True) as server:
        yield server


def post_reset(server: LocalServer, body: dict) -> httpx.Response:
    return httpx.post(
        f"{server.base_url}/reset",
        content=json.dumps(body),  # NaN and Infinity as JSON's lax spelling, which Python reads
        headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
        timeout=120,
    )


def test_reset_mistakes_are_4xx_in_words_without_tracebacks(browser, caplog):
    caplog.set_level(logging.INFO)
    for body in MISTAKES:
        reply = post_reset(browser, body)
        assert reply.status_code == 422, (body, reply.status_code, reply.text)
        assert reply.json()["detail"]["code"] == "VALIDATION_ERROR", (body, reply.text)
    url = browser.base_url.replace("http://", "ws://") + "/ws"
    with connect(url, additional_headers={"Authorization": f"Bearer {TOKEN}"}, open_timeout=60) as ws:
        ws.send(json.dumps({"type": "reset", "data": {"task": "click-test"}}))
        assert json.loads(ws.recv(timeout=120))["type"] == "observation"
        for body in MISTAKES:
            ws.send(json.dumps({"type": "reset", "data": body}))
            frame = json.loads(ws.recv(timeout=120))
            assert frame["type"] == "error" and frame["data"]["code"] == "VALIDATION_ERROR", (body, frame)
        ws.send(json.dumps({"type": "step", "data": {"action_str": "noop()"}}))  # the episode goes on
        assert json.loads(ws.recv(timeout=120))["type"] == "observation"
    tracebacks = [r for r in caplog.records if r.exc_info and r.name.startswith("envharness")]
    assert not tracebacks, [r.getMessage() for r in tracebacks]
    good = post_reset(
        browser, {"task": "click-test", "task_name": "click-test", "seed": 3, "time_limit_s": 30}
    )
    assert good.status_code == 200, good.text


def test_query_tokens_open_only_the_websocket_and_the_page(browser):
    url = browser.base_url
    for path in ("/schema", "/metadata", "/state", "/health?full=1", "/mcp/rollouts/x"):
        reply = httpx.get(f"{url}{path}{'&' if '?' in path else '?'}token={TOKEN}")
        assert reply.status_code == 401 or reply.json() == {"status": "healthy"}, (path, reply.text)
    assert httpx.post(f"{url}/reset?token={TOKEN}", json={}).status_code == 401
    assert httpx.get(f"{url}/web?token={TOKEN}").status_code == 200
    assert httpx.get(f"{url}/web/info?token={TOKEN}").status_code == 200
    with connect(url.replace("http://", "ws://") + f"/ws?token={TOKEN}", open_timeout=60) as ws:
        ws.send(json.dumps({"type": "state"}))
        assert json.loads(ws.recv(timeout=60))["type"] in ("state", "error")
