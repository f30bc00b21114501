"""What a server on the user's machine exposes beyond its routes, probed on loopback: who may
frame its pages, what `--allowed-origins` / `--allowed-hosts` open (refused or said at start),
how much a client can make it buffer or hold open, and what its open routes say."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import httpx
import pytest

from envharness.core.launchers import LocalServer
from envharness.core.server import create_app
from envharness.envs.echo.environment import EchoEnvironment

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
