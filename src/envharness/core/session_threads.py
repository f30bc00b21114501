"""One thread per session: where a sync environment's `reset`, `step`, `state` and `close` run.

Objects bound to the thread that made them (a `sqlite3` connection, some native handles, a
thread-local) break when one call of a session runs on one thread and the next on another, as
happens with `asyncio.to_thread`, whose pool hands each call to whichever thread is free. So each
environment instance (one per session) leases one worker thread for its life and runs its sync
calls there, one at a time.

Threads are leased from a process-wide free list, not started per session: the stateless HTTP
routes open and close a session per request. A lease comes back to the list when its environment
closes with nothing of its own still running; otherwise (a step still stuck) its thread ends once
that call returns, and no later session waits behind it.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")

#: Idle threads kept for later sessions; more than this are stopped when their session closes.
MAX_IDLE = 32

_idle: list[ThreadPoolExecutor] = []
_idle_guard = threading.Lock()


def _executor() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="envharness-session")


class SessionThread:
    """A lease of one worker thread; `run` calls there in order, `release` gives it back."""

    def __init__(self) -> None:
        with _idle_guard:
            executor = _idle.pop() if _idle else None
        self._executor: ThreadPoolExecutor | None = executor or _executor()
        #: The latest call handed to the thread: calls run in order, so when it is done all are.
        self._last: Future | None = None

    async def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """`fn(*args, **kwargs)` on this lease's thread (context variables included)."""
        if self._executor is None:
            raise RuntimeError("this session's thread was released (the environment is closed)")
        call = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
        self._last = self._executor.submit(call)
        return await asyncio.wrap_future(self._last)

    def release(self) -> None:
        """Give the thread back (idle) or let it end (busy, or enough idle ones). Safe twice."""
        executor, self._executor = self._executor, None
        if executor is None:
            return
        if self._last is None or self._last.done():
            with _idle_guard:
                if len(_idle) < MAX_IDLE:
                    _idle.append(executor)
                    return
        executor.shutdown(wait=False)  # a call still running: the thread ends after it


def idle_threads() -> int:
    """How many leased-and-returned threads wait for a session (for tests and /health-like probes)."""
    with _idle_guard:
        return len(_idle)


__all__ = ["MAX_IDLE", "SessionThread", "idle_threads"]
