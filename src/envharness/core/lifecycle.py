"""Child processes that die with their parent, and shutdowns that end in bounded time.

Two layers keep a server from outliving the job that started it, however the job ends
(normal exit, exception, SIGINT, SIGTERM, SIGKILL, the OOM killer, `os._exit`):

- the kernel: `set_parent_death_signal()` (Linux `prctl(PR_SET_PDEATHSIG)`) sends the
  child SIGTERM when its parent goes. Linux ties that to the *thread* that forked the
  child, so `spawn()` forks from one thread that lives as long as the process;
- the child itself: `watch_process(pid, ...)` notices the parent (any program, not only
  Python) exiting, through a pidfd, or by polling where there is none.

Either way the server stops gracefully (sessions and browsers closed), and
`exit_deadline()` makes sure that takes at most a bounded time: past it the process
kills what it started (Playwright driver, Chromium: its whole process tree) and exits.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import queue
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

PR_SET_PDEATHSIG = 1


def set_parent_death_signal(sig: int = signal.SIGTERM) -> bool:
    """Ask the kernel to send `sig` to this process when its parent (thread) exits.
    Returns False where that is unsupported (not Linux)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def pid_alive(pid: int) -> bool:
    """True while `pid` runs (a zombie counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    return state not in ("Z", "X")


def watch_process(pid: int, on_exit: Callable[[], None], *, poll_s: float = 0.5) -> threading.Thread:
    """Call `on_exit()` (in a daemon thread) once process `pid` has exited.

    Uses a pidfd where the kernel has them (instant); otherwise polls every `poll_s`.
    When `pid` is this process's parent, a changed `getppid()` also counts as its exit.
    """
    watching_parent = pid == os.getppid()

    def gone() -> bool:
        return (watching_parent and os.getppid() != pid) or not pid_alive(pid)

    def run() -> None:
        pidfd = None
        try:
            pidfd = os.pidfd_open(pid)  # type: ignore[attr-defined]
        except (AttributeError, OSError):
            pass
        try:
            while not gone():
                if pidfd is not None:
                    select.select([pidfd], [], [], poll_s)
                else:
                    time.sleep(poll_s)
        finally:
            if pidfd is not None:
                os.close(pidfd)
        on_exit()

    thread = threading.Thread(target=run, name=f"envharness-watch-{pid}", daemon=True)
    thread.start()
    return thread


def descendants(pid: int) -> list[int]:
    """Every process below `pid` in the process tree (each before its own children), from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    found: list[int] = []
    stack = [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


def kill_descendants(pid: int | None = None, sig: int = signal.SIGKILL) -> list[int]:
    """Send `sig` to every process below `pid` (default: this one); returns their ids."""
    pids = descendants(os.getpid() if pid is None else pid)
    for child in pids:
        try:
            os.kill(child, sig)
        except (ProcessLookupError, PermissionError):
            pass
    return pids


def exit_deadline(seconds: float, *, code: int = 1, reason: str = "shutdown") -> threading.Timer:
    """After `seconds`, kill this process's whole tree and exit with `code` (cancel() to disarm).

    For a graceful stop that may hang (a browser that does not close, a stuck connection):
    the job still ends, and nothing it started survives it.
    """

    def expire() -> None:
        kill_descendants()
        try:
            print(
                f"envharness: {reason} took over {seconds:.0f}s; killed child processes, exiting",
                file=sys.stderr,
                flush=True,
            )
        finally:
            os._exit(code)

    timer = threading.Timer(seconds, expire)
    timer.daemon = True
    timer.name = "envharness-exit-deadline"
    timer.start()
    return timer


def bound_shutdown(stopping: Callable[[], bool], seconds: float, *, poll_s: float = 0.1) -> threading.Thread:
    """Arm `exit_deadline(seconds)` as soon as `stopping()` turns True (checked in a daemon thread)."""

    def run() -> None:
        while not stopping():
            time.sleep(poll_s)
        exit_deadline(seconds, reason="stopping")

    thread = threading.Thread(target=run, name="envharness-shutdown-bound", daemon=True)
    thread.start()
    return thread


class _Spawner:
    """One daemon thread that forks every child, so that the parent-death signal (which
    Linux ties to the forking thread) fires when the process ends, not when some worker
    thread that happened to start the child exits."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], Future]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def _run(self) -> None:
        while True:
            fn, future = self._jobs.get()
            try:
                future.set_result(fn())
            except BaseException as exc:  # handed to the caller
                future.set_exception(exc)

    def submit(self, fn: Callable[[], Any]) -> Any:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="envharness-spawner", daemon=True)
                self._thread.start()
        if threading.current_thread() is self._thread:
            return fn()
        future: Future = Future()
        self._jobs.put((fn, future))
        return future.result()


_SPAWNER = _Spawner()


def spawn(args: list[str], **popen_kwargs: Any) -> subprocess.Popen:
    """`subprocess.Popen(args, ...)` forked from the long-lived spawner thread."""
    return _SPAWNER.submit(lambda: subprocess.Popen(args, **popen_kwargs))


def exit_with_parent(parent_pid: int, stop: Callable[[], None], *, name: str = "envharness") -> None:
    """Call `stop()` once process `parent_pid` exits: by the kernel's parent-death signal
    (SIGTERM) when it is our parent, and by a watcher thread in any case (at once if it is
    already gone)."""
    is_parent = parent_pid == os.getppid()
    if is_parent:
        set_parent_death_signal(signal.SIGTERM)

    def on_exit() -> None:
        stop()
        try:  # the parent may have held the other end of our output: it can be gone
            print(f"{name}: parent process {parent_pid} exited; stopping", file=sys.stderr, flush=True)
        except (OSError, ValueError):
            pass

    if not pid_alive(parent_pid):
        on_exit()
        return
    watch_process(parent_pid, on_exit)


async def in_daemon_thread(fn: Callable[..., Any], *args: Any) -> Any:
    """`await` `fn(*args)` run in a daemon thread. Unlike `asyncio.to_thread`, a cancelled
    caller does not hold up the event loop's (and the interpreter's) exit until `fn` is done."""
    import asyncio

    loop = asyncio.get_running_loop()
    future = loop.create_future()

    def settle(setter: Callable[[Any], None], value: Any) -> None:
        if not future.done():
            setter(value)

    def run() -> None:
        try:
            outcome = (future.set_result, fn(*args))
        except BaseException as exc:  # handed to the awaiting task
            outcome = (future.set_exception, exc)
        try:
            loop.call_soon_threadsafe(settle, *outcome)
        except RuntimeError:  # the loop is closed: nobody waits any more
            pass

    threading.Thread(target=run, name=f"envharness-{getattr(fn, '__name__', 'call')}", daemon=True).start()
    return await future
