"""The server's handle on one worker process (`worker.py`): start, ask with a deadline, stop.

A worker that hangs past its deadline or dies is stopped with its whole process tree (the
Playwright driver and BrowserGym's two Chromiums), and the session hears why in words; the
other sessions' workers are separate processes and go on.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

from envharness.core.child_python import child_environ, python_command

#: The largest answer read from a worker (an observation with a full-page screenshot fits).
MAX_ANSWER_BYTES = 256 * 1024 * 1024


class WorkerLost(RuntimeError):
    """The worker died or was stopped; a new one starts at the next reset."""


class WorkerError(RuntimeError):
    """BrowserGym raised in the worker (the worker is still alive); the message is its error."""


def worker_environ() -> dict[str, str]:
    """The server's environment, plus the Playwright browser shim of this virtualenv (set-up
    puts one there, since Playwright's own Chromium cannot be downloaded) when none is named."""
    environ = child_environ()
    shim = Path(sys.prefix) / "ms-playwright"
    if "PLAYWRIGHT_BROWSERS_PATH" not in environ and shim.is_dir():
        environ["PLAYWRIGHT_BROWSERS_PATH"] = str(shim)
    return environ


class WorkerProcess:
    """One running worker. `request()` sends a command and returns its answer."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self._lock = asyncio.Lock()

    @classmethod
    async def start(cls) -> WorkerProcess:
        proc = await asyncio.create_subprocess_exec(
            *python_command("-m", "envharness.envs.browsergym.gym_engine.worker"),  # -P: not from the cwd
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            env=worker_environ(),
            start_new_session=True,
            limit=MAX_ANSWER_BYTES,
        )
        return cls(proc)

    @property
    def alive(self) -> bool:
        return self.proc.returncode is None

    async def request(self, command: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        async with self._lock:
            if not self.alive:
                raise WorkerLost(f"the BrowserGym worker exited (code {self.proc.returncode})")
            try:
                self.proc.stdin.write((json.dumps(command) + "\n").encode())
                await self.proc.stdin.drain()
                line = await asyncio.wait_for(self.proc.stdout.readline(), timeout_s)
            except TimeoutError:
                await self.kill()
                raise WorkerLost(
                    f"BrowserGym's {command['cmd']} took more than {timeout_s:g} s; its browser "
                    "was stopped: call reset() to start a new episode"
                ) from None
            except (BrokenPipeError, ConnectionResetError) as exc:
                await self.kill()
                raise WorkerLost(f"the BrowserGym worker is gone ({type(exc).__name__})") from None
        if not line:
            await self.kill()
            raise WorkerLost(
                f"the BrowserGym worker died (code {self.proc.returncode}); call reset() to start again"
            )
        answer = json.loads(line)
        if not answer.get("ok"):
            raise WorkerError(answer.get("error") or "the BrowserGym worker failed")
        return answer

    async def close(self, timeout_s: float = 15.0) -> None:
        """Close BrowserGym's environment (its browsers), then the process; kill on a deadline."""
        if self.alive:
            try:
                await self.request({"cmd": "close"}, timeout_s)
                await asyncio.wait_for(self.proc.wait(), 5.0)
            except Exception:
                pass
        await self.kill()

    async def kill(self) -> None:
        """Stop the worker and everything it started (Playwright launches browsers in process
        groups of their own, so the tree is walked, not only the worker's group)."""
        from envharness.core.lifecycle import descendants

        pid = self.proc.pid
        for child in descendants(pid) + [pid]:
            try:
                os.kill(child, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            await asyncio.wait_for(self.proc.wait(), 5.0)
        except TimeoutError:
            pass
