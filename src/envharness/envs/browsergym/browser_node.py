"""A browser node: one Chromium with the project's flags, listening for CDP connections.

What a remote host runs for `serve browsergym --option browser=cdp://HOST:PORT`
(`envharness browser --port N`). The flags are the engine's own (no network but loopback and
the allowed hosts, no spare renderer, no omnibox popups), so a remote session behaves as a
local one; the server still guards every request of its contexts itself.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
from dataclasses import dataclass
from typing import Iterable

from envharness.envs.browsergym.engine import CHROMIUM_ARGS, DEFAULT_CHROMIUM, ENGINE_MARKER, host_resolver_rules

#: Chromium's line on stderr once its DevTools server listens.
_LISTENING = re.compile(r"DevTools listening on ws://([^/\s]+)/")


@dataclass
class BrowserNode:
    """A running node: its Chromium process and the address servers connect to."""

    process: subprocess.Popen
    address: str  # cdp://HOST:PORT
    profile: str  # Chromium's user data directory, removed at stop

    def stop(self, timeout_s: float = 10.0) -> int:
        """Stop Chromium and every process it started (its own process group), remove its profile."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        try:  # renderers and the zygote outlive a killed browser process for a moment
            os.killpg(self.process.pid, signal.SIGKILL)
        except OSError:
            pass
        shutil.rmtree(self.profile, ignore_errors=True)
        return self.process.returncode


def start_browser_node(port: int = 9222, host: str = "127.0.0.1", *, allowed_hosts: Iterable[str] = (),
                       executable_path: str | None = None, start_timeout_s: float = 30.0) -> BrowserNode:
    """Launch Chromium listening on `host:port` (0: a free port) and wait until it does."""
    args = [a for a in CHROMIUM_ARGS if not a.startswith("--host-resolver-rules=")]
    profile = tempfile.mkdtemp(prefix="envharness-browser-")
    command = [executable_path or DEFAULT_CHROMIUM, *args, host_resolver_rules(allowed_hosts),
               f"--remote-debugging-port={port}", f"--remote-debugging-address={host}", f"--user-data-dir={profile}",
               f"{ENGINE_MARKER}node-{port}", "about:blank"]
    try:
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    except OSError as exc:
        shutil.rmtree(profile, ignore_errors=True)
        raise RuntimeError(f"cannot start Chromium at {command[0]}: {exc} (set ENVHARNESS_CHROMIUM to its path)") from None
    listening = _wait_listening(process, start_timeout_s)
    if listening is None:
        BrowserNode(process, "", profile).stop(timeout_s=1)
        raise RuntimeError(f"Chromium did not open its DevTools port {port} within {start_timeout_s:.0f} s")
    bound_port = listening.rsplit(":", 1)[1]
    shown = f"[{host}]" if ":" in host else host
    return BrowserNode(process, f"cdp://{shown}:{bound_port}", profile)


def _wait_listening(process: subprocess.Popen, timeout_s: float) -> str | None:
    """HOST:PORT from Chromium's "DevTools listening" line, or None (it exited or took too long)."""
    import threading

    found: list[str] = []
    done = threading.Event()

    def read() -> None:
        for line in process.stderr:  # keep draining afterwards, so Chromium never blocks on a full pipe
            match = _LISTENING.search(line)
            if match and not found:
                found.append(match.group(1))
                done.set()
        done.set()

    threading.Thread(target=read, name="chromium-stderr", daemon=True).start()
    done.wait(timeout_s)
    return found[0] if found else None
