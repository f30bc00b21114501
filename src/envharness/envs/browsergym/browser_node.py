"""A browser node: one Chromium, with the command line the engine launches its own with, open to CDP.

What a remote host runs for `serve browsergym --option browser=cdp://HOST:PORT`
(`envharness browser --port N`). The command line is read from a browser the engine launches
(the project's flags and Playwright's own: no network but loopback and the allowed hosts, no
spare renderer, Playwright's hover and throttling settings), so a page behaves the same on a
node as on the server's own Chromium; only the DevTools port replaces Playwright's pipe, since
a second Playwright on the same browser would share it with the servers. The server still
guards every request of its contexts itself.
"""

from __future__ import annotations

import asyncio
import functools
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

from envharness.core.launchers import ServerProcess
from envharness.core.lifecycle import set_parent_death_signal, spawn
from envharness.envs.browsergym.engine import ENGINE_MARKER, BrowserEngine


async def serve_browser_node(
    port: int,
    host: str,
    *,
    allowed_hosts: Iterable[str] = (),
    ready: Callable[[str], None] = print,
    stop: asyncio.Event | None = None,
) -> int:
    """Run a node until `stop` is set or its Chromium exits; `ready(address)` once it listens.
    Returns 0 when stopped, 1 when Chromium died."""
    profile = tempfile.mkdtemp(prefix="envharness-browser-")
    command = [
        *await engine_command(allowed_hosts),
        f"--user-data-dir={profile}",
        f"--remote-debugging-port={port}",
        f"--remote-debugging-address={host}",
    ]
    chromium = spawn(
        command,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=functools.partial(set_parent_death_signal, signal.SIGKILL),
    )  # it dies with the node
    try:
        port = port or await asyncio.to_thread(_chosen_port, Path(profile), 30.0, chromium)
        await asyncio.to_thread(_wait_port, host, port, 30.0, chromium)
        ready(f"cdp://{f'[{host}]' if ':' in host else host}:{port}")
        stop = stop or asyncio.Event()
        while not stop.is_set():
            if chromium.poll() is not None:
                return 1
            try:
                await asyncio.wait_for(stop.wait(), 0.5)
            except TimeoutError:
                pass
        return 0
    finally:
        if chromium.poll() is None:
            chromium.terminate()
            try:
                await asyncio.to_thread(chromium.wait, 10)
            except subprocess.TimeoutExpired:
                chromium.kill()
        shutil.rmtree(profile, ignore_errors=True)


async def engine_command(allowed_hosts: Iterable[str] = ()) -> list[str]:
    """The command line the engine launches Chromium with (its flags and Playwright's), read from
    a browser it launches for the purpose; without Playwright's pipe and profile, and marked as a
    node rather than an engine's browser."""
    engine = BrowserEngine(allowed_hosts=allowed_hosts)
    await engine.start()
    try:
        (pid,) = engine.browser_pids()
        argv = [a.decode() for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if a]
    finally:
        await engine.aclose()
    dropped = ("--remote-debugging-pipe", "--user-data-dir=", ENGINE_MARKER)
    return [a for a in argv if not a.startswith(dropped)] + ["--envharness-node"]


class BrowserNode(ServerProcess):
    """`envharness browser` as a child process (tests, benchmarks): started, read and stopped
    as `ServerProcess` starts servers; its own process group, so `kill()` takes its host down."""

    listening = re.compile(r"listening on (cdp://\S+)")

    def __init__(
        self,
        port: int = 0,
        host: str = "127.0.0.1",
        *,
        allowed_hosts: Iterable[str] = (),
        startup_timeout_s: float = 60.0,
    ) -> None:
        args = [
            "browser",
            "--port",
            str(port),
            "--host",
            host,
            "--allowed-hosts",
            ",".join(allowed_hosts),
            *self._parent_death_args(),
        ]
        #: the node's Chromium profile is made in this folder: a node killed outright (its host
        #: gone) cannot remove it, so `kill()` and `stop()` do
        self.scratch = tempfile.mkdtemp(prefix="envharness-node-")
        env = {**os.environ, "TMPDIR": self.scratch}
        try:
            self._launch(args, env, "envharness browser", startup_timeout_s, threading.Event())
        except BaseException:
            shutil.rmtree(self.scratch, ignore_errors=True)
            raise

    @property
    def address(self) -> str:
        """cdp://HOST:PORT"""
        return self.base_url

    def _popen_options(self) -> dict:
        return {"start_new_session": True}

    def _wait_ready(self, timeout_s: float, cancel: threading.Event) -> None:
        """Nothing to wait for: the node prints its address once Chromium's port accepts connections."""

    def kill(self) -> None:
        """The node's host dies: the node and its Chromium, at once."""
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except OSError:
            pass
        self.process.wait()
        shutil.rmtree(self.scratch, ignore_errors=True)

    def stop(self, timeout_s: float = 20.0) -> None:
        try:
            super().stop(timeout_s)
        finally:
            shutil.rmtree(self.scratch, ignore_errors=True)
        self.kill()  # whatever is left of its process group


def start_browser_node(
    port: int = 0, host: str = "127.0.0.1", *, allowed_hosts: Iterable[str] = ()
) -> BrowserNode:
    """A browser node in a child process; returns once it listens."""
    return BrowserNode(port, host, allowed_hosts=allowed_hosts)


def _chosen_port(profile: Path, timeout_s: float, process: subprocess.Popen) -> int:
    """The port Chromium chose for `--remote-debugging-port=0` (written to its profile). Chromium
    binds it itself: a port found free here and handed over could be taken in between."""
    import time

    deadline, written = time.monotonic() + timeout_s, profile / "DevToolsActivePort"
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"Chromium exited ({process.returncode}) before opening its DevTools port")
        try:
            first = written.read_text().splitlines()[0]
            return int(first)
        except (OSError, IndexError, ValueError):  # not written yet, or written halfway
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"Chromium did not open a DevTools port within {timeout_s:.0f} s"
                ) from None
            time.sleep(0.05)


def _wait_port(host: str, port: int, timeout_s: float, process: subprocess.Popen | None = None) -> None:
    import time

    deadline = time.monotonic() + timeout_s
    while True:
        if process is not None and process.poll() is not None:
            raise RuntimeError(
                f"Chromium exited ({process.returncode}) before opening its DevTools port {port}"
            )
        try:
            with socket.create_connection((host, port), timeout=1.0):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"Chromium did not open its DevTools port {port} within {timeout_s:.0f} s"
                ) from None
            time.sleep(0.05)
