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
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from envharness.envs.browsergym.engine import ENGINE_MARKER, BrowserEngine

#: The line `envharness browser` prints once its browser listens.
_LISTENING = re.compile(r"listening on (cdp://\S+)")


async def serve_browser_node(port: int, host: str, *, allowed_hosts: Iterable[str] = (),
                             ready: Callable[[str], None] = print, stop: asyncio.Event | None = None) -> int:
    """Run a node until `stop` is set or its Chromium exits; `ready(address)` once it listens.
    Returns 0 when stopped, 1 when Chromium died."""
    port = port or _free_port(host)
    profile = tempfile.mkdtemp(prefix="envharness-browser-")
    command = [*await engine_command(allowed_hosts), f"--user-data-dir={profile}",
               f"--remote-debugging-port={port}", f"--remote-debugging-address={host}"]
    chromium = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                preexec_fn=_die_with_parent)
    try:
        await asyncio.to_thread(_wait_port, host, port, 30.0, chromium)
        ready(f"cdp://{f'[{host}]' if ':' in host else host}:{port}")
        stop = stop or asyncio.Event()
        while not stop.is_set():
            if chromium.poll() is not None:
                return 1
            try:
                await asyncio.wait_for(stop.wait(), 0.5)
            except asyncio.TimeoutError:
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


def _die_with_parent() -> None:  # runs in the child between fork and exec
    import ctypes

    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: the node's Chromium dies with it


@dataclass
class BrowserNode:
    """A node running as a child process (`envharness browser`), for tests and benchmarks."""

    process: subprocess.Popen
    address: str  # cdp://HOST:PORT

    def kill(self) -> None:
        """The node's host dies: the node, its Playwright driver and its Chromium, at once."""
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except OSError:
            pass
        self.process.wait()

    def stop(self, timeout_s: float = 20.0) -> int | None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                pass
        self.kill()  # whatever is left of its process group
        return self.process.returncode


def start_browser_node(port: int = 0, host: str = "127.0.0.1", *, allowed_hosts: Iterable[str] = (),
                       start_timeout_s: float = 60.0) -> BrowserNode:
    """`envharness browser` in a child process (its own process group); returns once it listens."""
    command = [sys.executable, "-c", "import sys; from envharness.cli import main; sys.exit(main())", "browser",
               "--port", str(port), "--host", host, "--allowed-hosts", ",".join(allowed_hosts)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    found: list[str] = []
    done = threading.Event()

    def read() -> None:
        for line in process.stdout:  # drained to the end, so the node never blocks on a full pipe
            match = _LISTENING.search(line)
            if match and not found:
                found.append(match.group(1))
                done.set()
        done.set()

    threading.Thread(target=read, name="browser-node-stdout", daemon=True).start()
    done.wait(start_timeout_s)
    if not found:
        node = BrowserNode(process, "")
        node.kill()
        raise RuntimeError(f"the browser node did not start within {start_timeout_s:.0f} s: {process.stderr.read()[-1000:]}")
    return BrowserNode(process, found[0])


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def _wait_port(host: str, port: int, timeout_s: float, process: subprocess.Popen | None = None) -> None:
    import time

    deadline = time.monotonic() + timeout_s
    while True:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"Chromium exited ({process.returncode}) before opening its DevTools port {port}")
        try:
            with socket.create_connection((host, port), timeout=1.0):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"Chromium did not open its DevTools port {port} within {timeout_s:.0f} s") from None
            time.sleep(0.05)
