"""JSON beyond the declared limits (`core/wire_json.py`: nesting, digits of an integer) and a
seed beyond what BrowserGym draws from, sent to real servers on loopback: each surface answers
in words (HTTP 4xx, a WebSocket error frame, the policy endpoint's 400) and goes on serving."""

from __future__ import annotations

import json

import httpx
import pytest
from websockets.sync.client import connect

from envharness.core.launchers import LocalServer
from envharness.core.server import create_app
from envharness.core.wire_json import MAX_DEPTH, MAX_INT_DIGITS
from envharness.envs.browsergym.models import MAX_SEED
from envharness.envs.echo.environment import EchoEnvironment
from envharness.models import load_backend
from envharness.policy import PolicyServer

pytestmark = pytest.mark.timeout(600)


def _nested(depth: int, inner: str = "1") -> str:
    return "[" * depth + inner + "]" * depth


#: (what, a JSON object's text, the words its refusal says)
HOSTILE = [
    ("nested far over Python's limit", '{"seed": ' + _nested(100_000) + "}", f"deeper than {MAX_DEPTH}"),
    ("nested over the limit, under Python's", '{"seed": ' + _nested(MAX_DEPTH + 50) + "}", f"deeper than {MAX_DEPTH}"),
    ("an integer of 5000 digits", '{"seed": ' + "7" * 5000 + "}", f"more than {MAX_INT_DIGITS} digits"),
    ("an integer just over the limit", '{"x": -' + "7" * (MAX_INT_DIGITS + 1) + "}", f"more than {MAX_INT_DIGITS} digits"),
]  # fmt: skip


@pytest.fixture(scope="module")
def echo():
    with LocalServer(create_app(EchoEnvironment, name="echo")) as server:
        yield server


def test_http_reset_refuses_hostile_json_in_words(echo):
    for what, body, words in HOSTILE:
        reply = httpx.post(
            f"{echo.base_url}/reset", content=body, headers={"Content-Type": "application/json"}
        )
        assert reply.status_code == 400, (what, reply.status_code, reply.text[:300])
        detail = reply.json()["detail"]
        assert detail["code"] == "INVALID_JSON" and words in detail["message"], (what, detail)
        assert "Traceback" not in reply.text
    # at the limits the JSON is read: what is refused then is the environment's own words
    at_limits = {
        '{"extra": ' + _nested(MAX_DEPTH - 1) + "}": "echo takes no reset options",
        '{"seed": ' + "9" * MAX_INT_DIGITS + "}": "seed",
    }
    for body, words in at_limits.items():
        reply = httpx.post(
            f"{echo.base_url}/reset", content=body, headers={"Content-Type": "application/json"}
        )
        assert reply.status_code == 422 and words in reply.json()["detail"]["message"], reply.text[:300]
    assert httpx.post(f"{echo.base_url}/reset", json={"seed": 3}).status_code == 200


def test_a_websocket_frame_of_hostile_json_gets_an_error_frame_and_the_session_goes_on(echo):
    with connect(echo.base_url.replace("http://", "ws://") + "/ws", open_timeout=60) as ws:
        for what, body, words in HOSTILE:
            frame = '{"type": "reset", "data": ' + body + "}"
            ws.send(frame)
            reply = json.loads(ws.recv(timeout=120))
            assert reply["type"] == "error", (what, reply)
            assert reply["data"]["code"] == "INVALID_JSON" and words in reply["data"]["message"], (
                what,
                reply,
            )
        ws.send(json.dumps({"type": "reset", "data": {"seed": 1}}))
        assert json.loads(ws.recv(timeout=120))["type"] == "observation"
        ws.send(json.dumps({"type": "step", "data": {"message": "still here"}}))
        reply = json.loads(ws.recv(timeout=120))
        assert reply["data"]["observation"]["echoed_message"] == "still here", reply


def test_mcp_refuses_hostile_json_in_words_with_or_without_a_session():
    init = {"protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    with LocalServer(create_app(EchoEnvironment, name="echo", mcp=True)) as server:
        url = f"{server.base_url}/mcp"
        opened = httpx.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init},
                            headers=headers, timeout=120)  # fmt: skip
        assert opened.status_code == 200, opened.text
        session = {**headers, "Mcp-Session-Id": opened.headers["mcp-session-id"]}
        note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        assert httpx.post(url, json=note, headers=session, timeout=120).status_code == 202
        for method, sent_with in (("tools/list", headers), ("initialize", headers), ("tools/call", session)):
            for what, body, words in HOSTILE:
                request = f'{{"jsonrpc": "2.0", "id": 2, "method": "{method}", "params": {body}}}'
                reply = httpx.post(url, content=request, headers=sent_with, timeout=120)
                assert reply.status_code == 400, (method, what, reply.status_code, reply.text[:300])
                error = reply.json()["error"]
                assert error["code"] == -32700 and words in error["message"], (method, what, error)
        listed = httpx.post(
            url, json={"jsonrpc": "2.0", "id": 3, "method": "tools/list"}, headers=session, timeout=120
        )
        assert listed.status_code == 200 and "reset" in listed.text, listed.text[:300]


def test_the_policy_endpoint_refuses_hostile_json_with_a_400():
    with PolicyServer(load_backend("tiny")) as server:
        rollout = httpx.post(f"{server.base_url}/rollouts", json={}, timeout=60).json()
        url = f"{rollout['base_url']}/chat/completions"
        for what, body, words in HOSTILE:
            # the same shapes inside a chat request, in a field the endpoint would otherwise ignore
            chat = '{"model": "m", "messages": [{"role": "user", "content": "hi"}], "extra": ' + body + "}"
            reply = httpx.post(url, content=chat, headers={"Content-Type": "application/json"}, timeout=120)
            assert reply.status_code == 400, (what, reply.status_code, reply.text[:300])
            error = reply.json()["error"]
            assert error["code"] == "invalid_json" and words in error["message"], (what, error)
        ok = httpx.post(
            url,
            json={"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
            timeout=300,
        )
        assert ok.status_code == 200, ok.text


def test_a_browsergym_seed_is_checked_against_the_32_bits_it_is_drawn_from():
    with LocalServer("browsergym") as server:
        for seed in (MAX_SEED + 1, 2**40, 2**63 - 1):
            reply = httpx.post(
                f"{server.base_url}/reset", json={"task": "click-test", "seed": seed}, timeout=300
            )
            assert reply.status_code == 422, (seed, reply.status_code, reply.text[:300])
            detail = reply.json()["detail"]
            assert (
                detail["code"] == "VALIDATION_ERROR" and f"between 0 and {MAX_SEED}" in detail["message"]
            ), detail
        with connect(server.base_url.replace("http://", "ws://") + "/ws", open_timeout=60) as ws:
            ws.send(json.dumps({"type": "reset", "data": {"task": "click-test", "seed": 2**40}}))
            reply = json.loads(ws.recv(timeout=300))
            assert reply["type"] == "error" and reply["data"]["code"] == "VALIDATION_ERROR", reply
            ws.send(json.dumps({"type": "reset", "data": {"task": "click-test", "seed": MAX_SEED}}))
            reply = json.loads(ws.recv(timeout=300))
            assert reply["type"] == "observation", reply  # the largest seed is served
