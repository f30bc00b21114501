"""One `envharness serve` process group, watched: what a fleet actor runs on its node.

A `WatchedServer` is the core launcher's `ServerProcess` (the one way of starting `envharness
serve` and reading its output) with a fleet's lifecycle: the server starts in a session of
its own and is killed with the process that started it (PR_SET_PDEATHSIG SIGKILL: no
graceful stop to wait for, a restarted actor reaps the rest by tag). It and every process
it starts carry `ENVHARNESS_FLEET_TAG=<tag>` in their environment. Playwright starts
Chromium detached (its own session), so a process group does not hold the browser: the tag
does, and `kill()` ends every process carrying it (a restarted actor reaps its
predecessor's leftovers the same way). A watchdog thread polls `/health`; when the server
exits or misses `missed_polls` in a row it kills the group and calls `on_death` (the actor
exits there, and Ray restarts it).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from envharness.core.launchers import ServerProcess, auth_headers

TAG_ENV_VAR = "ENVHARNESS_FLEET_TAG"
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


class WatchedServer(ServerProcess):
    """`envharness serve NAME` in its own session, tagged, health-checked by a thread."""

    def __init__(
        self,
        name: str,
        *,
        host: str = "127.0.0.1",
        server_args: list[str] | None = None,
        tag: str = "",
        token: str | None = None,
        startup_timeout_s: float = 120.0,
        poll_interval_s: float = 2.0,
        missed_polls: int = 3,
        on_death: Callable[[str], Any] | None = None,
        env_vars: dict[str, str] | None = None,
    ) -> None:
        self.tag = tag
        self.token = token
        self._stopping = False
        self._on_death = on_death
        super().__init__(
            name,
            host=host,
            token=token,
            server_args=server_args,
            startup_timeout_s=startup_timeout_s,
            env_vars={**(env_vars or {}), TAG_ENV_VAR: tag},
        )
        threading.Thread(
            target=self._watch,
            args=(poll_interval_s, missed_polls),
            daemon=True,
            name="envharness-fleet-watchdog",
        ).start()

    def _parent_death_args(self) -> list[str]:
        return []  # the kernel kills it with its parent (`_popen_options`): nothing to wait for

    def _popen_options(self) -> dict[str, Any]:
        return {"start_new_session": True, "preexec_fn": _die_with_parent}

    def _watch(self, interval: float, allowed: int) -> None:
        missed = 0
        with httpx.Client(
            timeout=max(2.0, interval), headers=auth_headers(self.token), trust_env=False
        ) as http:
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
        self.stop(grace_s)

    def stop(self, timeout_s: float = 5.0) -> None:
        """As `kill`: what a failed start and interpreter exit call."""
        super().stop(timeout_s)

    def _terminate(self, timeout_s: float) -> None:
        self._stopping = True
        kill_tagged(self.tag, 0.0 if self.process.poll() is not None else timeout_s, first=self.process.pid)
        with contextlib.suppress(Exception):
            self.process.wait(timeout=10)
