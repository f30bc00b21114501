"""What a server on the user's machine exposes beyond its routes, probed on loopback: who may
frame its pages, what `--allowed-origins` / `--allowed-hosts` open (refused or said at start),
how much a client can make it buffer or hold open, and what its open routes say."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from envharness.core.connections import HEADER_TIMEOUT_S
from envharness.core.launchers import LocalServer
from envharness.core.server import create_app
from envharness.envs.echo.environment import EchoEnvironment
from envharness.models import load_backend
from envharness.policy import PolicyServer
from envharness.policy.limits import PolicyLimits

pytestmark = pytest.mark.timeout(300)


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "ENVHARNESS_TOKEN"}
    return subprocess.run([sys.executable, "-m", "envharness.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)  # fmt: skip


def started(*args: str) -> tuple[str, str]:
    """`envharness ARGS` up to its first line on stdout (it is listening), then stopped: what it
    said on stderr until then, and that line."""
    env = {k: v for k, v in os.environ.items() if k != "ENVHARNESS_TOKEN"}
    process = subprocess.Popen([sys.executable, "-m", "envharness.cli", *args], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)  # fmt: skip
    try:
        line = process.stdout.readline()
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    return stderr, line


# -- framing, origins, hosts -------------------------------------------------------------------


def test_no_other_site_may_frame_the_page_or_any_answer():
    with LocalServer(create_app(EchoEnvironment, name="echo", web=True)) as server:
        for path in ("/web", "/web/info", "/health", "/schema"):
            reply = httpx.get(server.base_url + path, timeout=60)
            assert reply.status_code == 200, (path, reply.text)
            assert reply.headers["content-security-policy"] == "frame-ancestors 'self'", path
            assert reply.headers["x-frame-options"] == "SAMEORIGIN", path


@pytest.mark.parametrize("command", ["serve", "policy"])
def test_the_null_origin_is_refused_in_words_unless_forced(command):
    args = (
        ["serve", "echo", "--port", "0"]
        if command == "serve"
        else ["policy", "--model", "tiny", "--port", "0"]
    )
    refused = cli(*args, "--allowed-origins", "https://ui.example, null")
    assert refused.returncode == 2, refused.stderr
    assert "--allowed-origins null would let every sandboxed frame and file:// page" in refused.stderr
    assert "--allow-null-origin" in refused.stderr and "Traceback" not in refused.stderr
    with pytest.raises(ValueError, match="allowed-origins null"):
        create_app(EchoEnvironment, allowed_origins=["NULL"])
    if command == "serve":  # forced: it starts, and says what it opened
        stderr, line = started(*args, "--allowed-origins", "null", "--allow-null-origin")
        assert "listening on http://127.0.0.1:" in line, stderr
        assert "warning: --allowed-origins null: every sandboxed frame and file:// page may call" in stderr


def test_any_host_or_origin_without_a_token_is_said_at_start():
    stderr, line = started("serve", "echo", "--port", "0", "--allowed-hosts", "*", "--allowed-origins", "*")
    assert "listening on http://127.0.0.1:" in line, stderr
    assert (
        "warning: --allowed-hosts '*' without a token: any web page you visit can reach this server" in stderr
    )
    assert "warning: --allowed-origins '*' without a token: any web page you visit can drive" in stderr
    stderr, line = started("serve", "echo", "--port", "0", "--allowed-hosts", "*", "--token", "t0ken")
    assert "listening on" in line and "warning" not in stderr, stderr


# -- what one client can make a server hold ----------------------------------------------------


def peak_rss_mb(pid: int) -> float:
    """The process's peak resident memory so far (Linux's VmHWM), in MiB."""
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    status = dict(line.split(":", 1) for line in lines if ":" in line)
    return int(status["VmHWM"].split()[0]) / 1024


class serving:
    """`envharness serve echo` in its own process (so its memory is its own), on loopback."""

    def __init__(self, *args: str) -> None:
        self.args = args

    def __enter__(self) -> serving:
        env = {k: v for k, v in os.environ.items() if k != "ENVHARNESS_TOKEN"}
        self.process = subprocess.Popen([sys.executable, "-m", "envharness.cli", "serve", "echo", "--port", "0",
                                         *self.args], stdout=subprocess.PIPE, text=True, env=env,
                                        start_new_session=True)  # fmt: skip
        self.url = self.process.stdout.readline().split("listening on ")[1].split()[0]
        return self

    def __exit__(self, *exc: object) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=60)
        finally:
            if self.process.poll() is None:
                os.killpg(self.process.pid, signal.SIGKILL)


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads the peak memory from /proc")
def test_twenty_huge_frames_at_once_cost_the_server_at_most_the_message_limit_each():
    """Twenty connections each send a 16 MiB message (compressed, as clients do by default).
    The server reads (decompresses) a message only up to its limit (4 MiB) plus the envelope's
    room, then closes 1009 in words: it used to read each whole (4x the limit; peak 409 MB)."""
    connections, limit = 20, 4 * 1024 * 1024
    frame = json.dumps({"type": "step", "data": {"message": "x" * (16 << 20)}})
    closes: list[object] = []

    def send_one(url: str) -> None:
        try:
            with connect(url, max_size=None, open_timeout=120) as ws:
                ws.send(frame)
                closes.append(json.loads(ws.recv(timeout=120))["data"]["code"])
        except ConnectionClosed as exc:
            closes.append(exc.rcvd.code if exc.rcvd else None)

    with serving() as server:
        before = peak_rss_mb(server.process.pid)
        url = server.url.replace("http://", "ws://") + "/ws"
        threads = [threading.Thread(target=send_one, args=(url,)) for _ in range(connections)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=240)
        grown = peak_rss_mb(server.process.pid) - before
        assert grown < 2 * connections * limit / 2**20, f"peak grew {grown:.0f} MiB"
        assert closes == [1009] * connections, closes  # message too big, said in the close frame
        with connect(url, open_timeout=60) as ws:  # and the server goes on
            ws.send(json.dumps({"type": "reset"}))
            assert json.loads(ws.recv(timeout=60))["type"] == "observation"


def test_half_sent_requests_are_closed_and_the_server_goes_on():
    """A client that opens connections and never finishes a request's headers (slowloris) is cut
    off once `HEADER_TIMEOUT_S` passes; uvicorn alone held them forever."""
    with serving() as server:
        port = int(server.url.rsplit(":", 1)[1])
        half_sent = []
        for _ in range(100):
            sock = socket.create_connection(("127.0.0.1", port), timeout=30)
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
            half_sent.append(sock)
        assert httpx.get(f"{server.url}/health", timeout=60).status_code == 200  # others are served meanwhile
        deadline = time.monotonic() + HEADER_TIMEOUT_S + 120  # generous: a shared CPU
        for sock in half_sent:
            sock.settimeout(max(1.0, deadline - time.monotonic()))
            try:
                assert sock.recv(1024) == b""  # closed by the server, nothing answered
            except ConnectionResetError:
                pass
            finally:
                sock.close()
        # a request whose headers came in is never cut, however long its route takes; nor a
        # kept-alive connection that sends its next request in time
        with httpx.Client(base_url=server.url, timeout=60) as client:
            assert client.get("/health").status_code == 200
            assert client.get("/health").status_code == 200


# -- what open routes say ----------------------------------------------------------------------


def test_the_policy_endpoints_open_health_says_only_its_status_without_the_token():
    """`/health` is open to probes: without the token it names no model (a spec may be a local
    path), no context length, nothing about generations in flight."""
    with PolicyServer(load_backend("tiny"), limits=PolicyLimits(token="t0ken")) as server:
        anonymous = httpx.get(f"{server.base_url}/health", timeout=60)
        assert anonymous.status_code == 200 and anonymous.json() == {"status": "ok"}
        owner = httpx.get(f"{server.base_url}/health", headers={"Authorization": "Bearer t0ken"}, timeout=60)
        assert owner.json()["model"] and owner.json()["generating"] == 0


def test_the_header_timeout_does_not_cut_a_websocket(monkeypatch):
    """The timer is armed for every connection; one upgraded to a WebSocket is left alone when
    it fires (the transport then belongs to the WebSocket: closing it dropped the session)."""
    from envharness.core.connections import HeaderTimeout

    monkeypatch.setattr(HeaderTimeout, "header_timeout_s", 0.5)
    with LocalServer(create_app(EchoEnvironment, name="echo")) as server:
        port = int(server.base_url.rsplit(":", 1)[1])
        with connect(server.base_url.replace("http://", "ws://") + "/ws", open_timeout=60) as ws:
            late = socket.create_connection(("127.0.0.1", port), timeout=120)
            late.sendall(b"GET /health HTTP/1.1\r\n")
            assert late.recv(1024) == b""  # its timer fired, so the WebSocket's (armed earlier) did
            late.close()
            ws.send(json.dumps({"type": "reset"}))
            assert json.loads(ws.recv(timeout=60))["type"] == "observation"


def test_the_header_timeout_does_not_cut_a_request_in_progress(monkeypatch):
    """A route that runs past the timeout (a long generation) still answers: only a request
    whose headers have not come in is cut."""
    from fastapi import FastAPI

    from envharness.core.connections import HeaderTimeout

    monkeypatch.setattr(HeaderTimeout, "header_timeout_s", 0.5)
    entered, release = threading.Event(), threading.Event()
    app = FastAPI()

    @app.get("/slow")
    def slow() -> dict:  # a worker thread: waits until the test saw the timer fire
        entered.set()
        assert release.wait(timeout=120)
        return {"done": True}

    with LocalServer(app) as server:
        port = int(server.base_url.rsplit(":", 1)[1])
        with httpx.Client(base_url=server.base_url, timeout=120) as client:
            answer: list[httpx.Response] = []
            asking = threading.Thread(target=lambda: answer.append(client.get("/slow")))
            asking.start()
            assert entered.wait(timeout=120)  # its headers are in, its timer armed before the next
            late = socket.create_connection(("127.0.0.1", port), timeout=120)
            late.sendall(b"GET /slow HTTP/1.1\r\n")
            assert late.recv(1024) == b""  # its timer fired, so the slow request's did
            late.close()
            release.set()
            asking.join(timeout=120)
            assert answer and answer[0].json() == {"done": True}
            assert client.get("/openapi.json").status_code == 200  # the same connection, kept alive
