"""What both servers check before a route runs (`core/guards.py`), probed over real HTTP on
loopback as an attacker would: the token by route (a rollout named after a path segment is
still a rollout), Host and Origin (a page in the user's browser, DNS rebinding), and body
size while reading (a chunked body is cut off at the limit)."""

from __future__ import annotations

import json
import select
import socket
from urllib.parse import urlsplit

import httpx
import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from envharness.core.launchers import LocalServer
from envharness.core.server import create_app
from envharness.envs.echo.environment import EchoEnvironment
from envharness.models import load_backend
from envharness.policy import PolicyServer
from envharness.policy.limits import PolicyLimits

pytestmark = pytest.mark.timeout(300)
TOKEN = "s3cret-token"
HELLO = {"model": "any", "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 2}
MCP_INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-03-26",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
}


@pytest.fixture(scope="module")
def tiny():
    return load_backend("tiny")


@pytest.fixture(scope="module")
def guarded(tiny):
    with PolicyServer(tiny, limits=PolicyLimits(token=TOKEN, max_request_bytes=64_000)) as server:
        yield server


def test_a_rollout_named_like_a_route_segment_still_needs_the_token(guarded):
    """Every route, with a rollout id equal to each path segment the app uses."""
    routes = [
        (method, route.path)
        for route in guarded._server.app.routes
        if route.path not in ("/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc")
        for method in route.methods - {"HEAD"}
    ]
    segments = sorted({part for _, path in routes for part in path.split("/") if part and "{" not in part})
    assert {"v1", "chat", "completions", "models", "rollouts", "end", "sample"} <= set(segments)
    owner = httpx.Client(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60)
    anonymous = httpx.Client(timeout=60)
    for segment in segments:
        opened = owner.post(
            f"{guarded.base_url}/rollouts", json={"rollout_id": segment, "metadata": {"s": "x"}}
        )
        assert opened.status_code == 200, opened.text
        for method, path in routes:
            if path == "/health":
                continue
            url = guarded.base_url + path.replace("{rollout_id}", segment)
            reply = anonymous.request(method, url, json=HELLO if method == "POST" else None)
            assert reply.status_code == 401, (segment, path, reply.status_code, reply.text)
            assert reply.json()["error"]["code"] == "invalid_api_key"
            assert "x" not in json.dumps(reply.json().get("metadata", ""))
        assert not guarded.store.get(segment).ended  # the refused /end ended nothing
        assert owner.post(f"{guarded.base_url}/rollouts/{segment}/end").status_code == 200
    for path in ("/openapi.json", "/docs", "/nothing/here", "/rollouts/v1/v1/"):
        assert anonymous.get(guarded.base_url + path).status_code == 401, path
    assert anonymous.get(f"{guarded.base_url}/health").status_code == 200


# -- Host and Origin ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def open_echo():
    """`envharness serve echo` as it starts by default: no token."""
    with LocalServer(create_app(EchoEnvironment, name="echo")) as server:
        yield server


def ws_url(server: LocalServer) -> str:
    return server.base_url.replace("http://", "ws://") + "/ws"


def ws_reset(url: str, **headers: str) -> dict:
    with connect(url, additional_headers=headers, open_timeout=30) as ws:
        ws.send(json.dumps({"type": "reset"}))
        return json.loads(ws.recv(timeout=60))


def test_a_page_of_another_site_cannot_drive_a_server_without_a_token(open_echo):
    url, port = open_echo.base_url, urlsplit(open_echo.base_url).port
    for headers in ({"Origin": "http://evil.example"}, {"Host": "evil.example"}, {"Origin": "null"}):
        with pytest.raises(InvalidStatus) as refused:
            ws_reset(ws_url(open_echo), **headers)
        assert refused.value.response.status_code == 403, headers
        mcp = httpx.post(
            f"{url}/mcp", json=MCP_INIT, headers={**headers, "Accept": "application/json, text/event-stream"}
        )
        assert mcp.status_code == 403 and mcp.json()["detail"]["code"] == "FORBIDDEN", mcp.text
        plain = httpx.post(
            f"{url}/mcp", content=json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
            headers={**headers, "Content-Type": "text/plain"},
        )  # fmt: skip
        assert plain.status_code == 403
        assert httpx.post(f"{url}/reset", json={}, headers=headers).status_code == 403
    # its own pages, loopback names and the address it is bound to are served
    assert ws_reset(ws_url(open_echo), Origin=url)["type"] == "observation"
    assert ws_reset(f"ws://localhost:{port}/ws", Origin=f"http://localhost:{port}")["type"] == "observation"
    for host in (f"localhost:{port}", f"127.0.0.1:{port}", "127.0.0.1", f"app.localhost:{port}"):
        assert httpx.post(f"{url}/reset", json={}, headers={"Host": host}).status_code == 200, host


def test_allowed_hosts_and_origins_widen_it_and_a_token_keeps_the_checks():
    app = create_app(EchoEnvironment, allowed_hosts=["envs.internal"], allowed_origins=["https://ui.example"])
    with LocalServer(app) as server:
        url = server.base_url
        assert httpx.post(f"{url}/reset", json={}, headers={"Host": "envs.internal:8000"}).status_code == 200
        assert httpx.post(f"{url}/reset", json={}, headers={"Host": "other.internal"}).status_code == 403
        assert ws_reset(ws_url(server), Origin="https://ui.example")["type"] == "observation"
        with pytest.raises(InvalidStatus):
            ws_reset(ws_url(server), Origin="https://ui.example.evil")
    with LocalServer(create_app(EchoEnvironment, token=TOKEN)) as server:
        auth = {"Authorization": f"Bearer {TOKEN}"}
        assert httpx.post(f"{server.base_url}/reset", json={}, headers=auth).status_code == 200
        assert (
            httpx.post(
                f"{server.base_url}/reset", json={}, headers={**auth, "Host": "evil.example"}
            ).status_code
            == 403
        )
    with LocalServer(create_app(EchoEnvironment, allowed_hosts=["*"], allowed_origins=["*"])) as server:
        assert ws_reset(ws_url(server), Origin="http://evil.example")["type"] == "observation"
        assert (
            httpx.post(f"{server.base_url}/reset", json={}, headers={"Host": "evil.example"}).status_code
            == 200
        )


def test_the_policy_endpoint_checks_host_and_origin_too(tiny):
    with PolicyServer(tiny) as server:
        opened = httpx.post(f"{server.base_url}/rollouts", json={})
        assert opened.status_code == 200
        for headers in ({"Origin": "http://evil.example"}, {"Host": "evil.example"}):
            reply = httpx.post(f"{opened.json()['base_url']}/chat/completions", json=HELLO, headers=headers)
            assert reply.status_code == 403 and reply.json()["error"]["code"] == "forbidden", reply.text
        assert not server.store.get(opened.json()["rollout_id"]).turns


# -- body size while reading -------------------------------------------------------------------


def chunked_upload(
    url: str, total: int, chunk: int = 256 * 1024, headers: dict[str, str] | None = None
) -> tuple[int, int]:
    """POST `total` bytes as a chunked body over a raw socket, stopping as soon as the server
    answers; returns (status, bytes sent before the answer came)."""
    parts = urlsplit(url)
    sock = socket.create_connection((parts.hostname, parts.port), timeout=60)
    extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
    head = f"POST {parts.path} HTTP/1.1\r\nHost: {parts.netloc}\r\nContent-Type: application/json\r\n{extra}Transfer-Encoding: chunked\r\n\r\n"
    sock.sendall(head.encode())
    sent, block = 0, b"[" + b" " * (chunk - 1)
    try:
        while sent < total and not select.select([sock], [], [], 0)[0]:
            sock.sendall(f"{len(block):x}\r\n".encode() + block + b"\r\n")
            sent += len(block)
        if sent >= total:
            sock.sendall(b"0\r\n\r\n")
    except OSError:  # the server closed the connection mid-body: its answer is waiting
        pass
    reply = b""
    while b"\r\n" not in reply:
        data = sock.recv(65536)
        if not data:
            break
        reply += data
    sock.close()
    return int(reply.split(b" ", 2)[1]), sent


def test_a_chunked_body_is_cut_off_at_the_limit_on_both_servers(guarded):
    total = 40 * 1024 * 1024
    status, sent = chunked_upload(
        f"{guarded.base_url}/v1/chat/completions", total, headers={"Authorization": f"Bearer {TOKEN}"}
    )
    assert status == 413 and sent < total // 2, (status, sent)
    with LocalServer(create_app(EchoEnvironment, max_message_bytes=64_000)) as server:
        status, sent = chunked_upload(f"{server.base_url}/step", total)
        assert status == 413 and sent < total // 2, (status, sent)
        assert httpx.post(f"{server.base_url}/step", json={"action": {"message": "hi"}}).status_code == 200
    assert (
        httpx.post(f"{guarded.base_url}/rollouts", headers={"Authorization": f"Bearer {TOKEN}"}).status_code
        == 200
    )
