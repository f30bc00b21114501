"""One `envharness serve` process group, watched: what a fleet actor runs on its node.

The server starts in a session of its own, dies with the process that started it
(PR_SET_PDEATHSIG), and it and every process it starts carry `ENVHARNESS_FLEET_TAG=<tag>`
in their environment. Playwright starts Chromium detached (its own session), so a process
group does not hold the browser: the tag does, and `kill()` ends every process carrying it
(a restarted actor reaps its predecessor's leftovers the same way). A watchdog thread
polls `/health`; when the server exits or misses `missed_polls` in a row it kills the
group and calls `on_death` (the actor exits there, and Ray restarts it).
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

import httpx

from envharness.core.launchers import TOKEN_ENV_VAR, LaunchError, wait_for_health

TAG_ENV_VAR = "ENVHARNESS_FLEET_TAG"
_LISTENING = re.compile(r"listening on (http://\S+)")
_PR_SET_PDEATHSIG = 1


try:  # loaded here, not in the forked child (where loading a library can deadlock)
    _LIBC: Any = ctypes.CDLL("libc.so.6", use_errno=True)
except OSError:
    _LIBC = None


def _die_with_parent() -> None:  # runs in the child between fork and exec: no allocation, no imports
    if _LIBC is not None:
        _LIBC.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL))


def tagged_pids(tag: str) -> list[int]:
    """Pids whose `ENVHARNESS_FLEET_TAG` starts with `tag` (a server's processes, its detached
    Chromium included: Playwright starts the browser in a session of its own)."""
    prefix = f"{TAG_ENV_VAR}={tag}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if any(var.startswith(prefix) for var in environ.split(b"\0")):
            found.append(int(entry.name))
    return found


def kill_tagged(tag: str, grace_s: float = 5.0, first: int | None = None) -> None:
    """SIGTERM `first` (the server: it closes its browser), then SIGKILL whatever carrying
    `tag` is left after `grace_s`."""
    if first is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(first, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and first in tagged_pids(tag):
            time.sleep(0.1)
    for pid in tagged_pids(tag):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


class WatchedServer:
    """`envharness serve NAME` in its own process group, health-checked by a thread."""

    def __init__(self, name: str, *, host: str = "127.0.0.1", server_args: list[str] | None = None,
                 tag: str = "", token: str | None = None, startup_timeout_s: float = 120.0,
                 poll_interval_s: float = 2.0, missed_polls: int = 3, on_death: Callable[[str], Any] | None = None) -> None:
        command = [sys.executable, "-c", "import sys; from envharness.cli import main; sys.exit(main())",
                   "serve", name, "--host", host, "--port", "0", *(server_args or [])]
        env = dict(os.environ, **{TAG_ENV_VAR: tag})
        env.pop(TOKEN_ENV_VAR, None)
        if token:
            env[TOKEN_ENV_VAR] = token
        self.token = token
        self.output: collections.deque[str] = collections.deque(maxlen=40)
        self.base_url = ""
        self._seen = threading.Event()
        self._stopping = False
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                        text=True, env=env, start_new_session=True, preexec_fn=_die_with_parent)
        self.tag = tag
        threading.Thread(target=self._read_output, daemon=True, name="envharness-fleet-output").start()
        try:
            if not self._seen.wait(startup_timeout_s) or not self.base_url:
                raise LaunchError(f"`envharness serve {name}` did not start: {self._tail()}")
            wait_for_health(self.base_url, token=token, timeout_s=startup_timeout_s, alive=lambda: self.process.poll() is None)
        except BaseException:
            self.kill()
            raise
        self._on_death = on_death
        self._watch_args = (poll_interval_s, missed_polls)
        threading.Thread(target=self._watch, daemon=True, name="envharness-fleet-watchdog").start()

    def _read_output(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.output.append(line.rstrip())
            match = _LISTENING.search(line)
            if match and not self.base_url:
                self.base_url = match.group(1)
                self._seen.set()
        self._seen.set()

    def _tail(self) -> str:
        code = self.process.poll()
        return ("still running" if code is None else f"exit code {code}") + "; last output:\n" + "\n".join(self.output)

    def _watch(self) -> None:
        interval, allowed = self._watch_args
        missed = 0
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        with httpx.Client(timeout=max(2.0, interval), headers=headers, trust_env=False) as http:
            while not self._stopping:
                time.sleep(interval)
                if self._stopping:
                    return
                if self.process.poll() is not None:
                    reason = f"the server exited ({self._tail()})"
                else:
                    try:
                        missed = 0 if http.get(f"{self.base_url}/health").status_code == 200 else missed + 1
                    except httpx.HTTPError:
                        missed += 1
                    if missed < allowed:
                        continue
                    reason = f"the server missed {missed} health checks"
                self.kill()
                if self._on_death is not None:
                    self._on_death(reason)
                return

    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self, grace_s: float = 5.0) -> None:
        """End the server and every process carrying its tag (its browser too)."""
        self._stopping = True
        if self.process.poll() is not None:
            grace_s = 0.0
        kill_tagged(self.tag, grace_s, first=self.process.pid)
        with contextlib.suppress(Exception):
            self.process.wait(timeout=10)
