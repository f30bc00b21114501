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
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")

#: Idle threads kept for later sessions; more than this are stopped when their session closes.
MAX_IDLE = 32

_idle: list[_Worker] = []
_idle_guard = threading.Lock()


class _Worker:
    """One thread (a one-worker executor) and how many calls it was given and not yet finished."""

    def __init__(self) -> None:
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="envharness-session")
        self.pending = 0
        self.guard = threading.Lock()

    def counted(self, call: Callable[[], T]) -> T:
        try:
            return call()
        finally:
            with self.guard:
                self.pending -= 1


class SessionThread:
    """A lease of one worker thread; `run` calls there in order, `release` gives it back."""

    def __init__(self) -> None:
        with _idle_guard:
            self._worker: _Worker | None = _idle.pop() if _idle else None
        if self._worker is None:
            self._worker = _Worker()

    async def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """`fn(*args, **kwargs)` on this lease's thread (context variables included)."""
        worker = self._worker
        if worker is None:
            raise RuntimeError("this session's thread was released (the environment is closed)")
        call = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
        with worker.guard:
            worker.pending += 1
        try:
            future = worker.executor.submit(worker.counted, call)
        except BaseException:
            with worker.guard:
                worker.pending -= 1
            raise
        return await asyncio.wrap_future(future)

    def release(self) -> None:
        """Give the thread back (idle) or let it end (busy, or enough idle ones). Safe twice."""
        worker, self._worker = self._worker, None
        if worker is None:
            return
        with worker.guard:
            idle = worker.pending == 0
        if idle:
            with _idle_guard:
                if len(_idle) < MAX_IDLE:
                    _idle.append(worker)
                    return
        worker.executor.shutdown(wait=False)


def idle_threads() -> int:
    """How many leased-and-returned threads wait for a session (for tests and /health-like probes)."""
    with _idle_guard:
        return len(_idle)


__all__ = ["MAX_IDLE", "SessionThread", "idle_threads"]
