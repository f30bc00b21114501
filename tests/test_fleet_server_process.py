"""`WatchedServer` (what a fleet actor runs), no Ray: a SIGKILLed browser server is noticed and
its detached Chromium reaped; a server whose parent is SIGKILLed dies with it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import uuid
from pathlib import Path

from conftest import wait_until

from envharness.envs.browsergym.client import BrowserGymEnv
from envharness.fleet.server_process import WatchedServer, kill_tagged, tagged_pids


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def test_a_killed_browser_server_is_noticed_and_its_chromium_reaped():
    tag = f"ws-test-{uuid.uuid4().hex[:8]}"
    died = threading.Event()
    server = WatchedServer("browsergym", tag=tag, poll_interval_s=0.5, on_death=lambda reason: died.set())
    try:
        with BrowserGymEnv(base_url=server.base_url) as env:
            env.reset(task="click-test")  # the server launches its Chromium
            browsers = [p for p in tagged_pids(tag) if "chrom" in cmdline(p)]
            assert browsers, "Chromium carries the server's tag"
            os.kill(server.process.pid, signal.SIGKILL)
            assert died.wait(30), "the watchdog noticed the dead server"
            wait_until(lambda: not tagged_pids(tag), timeout_s=30)  # Chromium (detached) included
    finally:
        kill_tagged(tag, 0.0)


def test_a_server_dies_with_the_process_that_started_it():
    tag = f"ws-test-{uuid.uuid4().hex[:8]}"
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
        import time
        from envharness.fleet.server_process import WatchedServer
        server = WatchedServer("echo", tag={tag!r})
        print(server.process.pid, flush=True)
        time.sleep(600)
    """),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        server_pid = int(parent.stdout.readline())
        assert server_pid in tagged_pids(tag)
        parent.kill()  # SIGKILL: no clean-up code runs in the parent
        parent.wait(10)
        wait_until(lambda: not tagged_pids(tag), timeout_s=30)
    finally:
        parent.kill()
        kill_tagged(tag, 0.0)
