"""Bridges between the async runtime and sync code (sessions, model steps, callers).

The runtime is one async implementation. Sync pieces it calls (OpenEnv-style sessions,
a trainer's generate function) run in worker threads; sync callers of the runtime (TRL's
`rollout_func`, `run_white_box`) get a private event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
import threading
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")

#: Executor for sync calls, set by `run_episodes` so that `max_concurrency` episodes never
#: queue behind asyncio's default thread pool (5 + cores threads).
_executor: contextvars.ContextVar[Executor | _Pool | None] = contextvars.ContextVar(
    "envharness_executor", default=None
)


async def run_sync(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Run a blocking call in the harness's worker threads (context variables included)."""
    loop = asyncio.get_running_loop()
    call = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
    pool = _executor.get()
    if isinstance(pool, _Pool):
        pool.enter()
        return await loop.run_in_executor(pool.executor, pool.counted, call)
    return await loop.run_in_executor(pool, call)


async def call_maybe_async(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Await `fn` if it is async; otherwise run it in a worker thread (then await its result
    if it returned an awaitable, as OpenEnv 0.10's dual-mode clients do)."""
    if inspect.iscoroutinefunction(fn):
        return await fn(*args, **kwargs)
    result = await run_sync(fn, *args, **kwargs)
    if inspect.isawaitable(result):
        result = await result
    return result


class _Pool:
    """A thread pool that counts the calls sent to it and not yet returned (queued or running),
    so it is reused only when idle."""

    def __init__(self, count: int):
        self.count = count
        self.executor = ThreadPoolExecutor(max_workers=count, thread_name_prefix="envharness")
        self._guard = threading.Lock()
        self.running = 0

    def enter(self) -> None:
        with self._guard:
            self.running += 1

    def counted(self, call: Callable[[], T]) -> T:
        try:
            return call()
        finally:
            with self._guard:
                self.running -= 1


#: Pools whose block ended with nothing left running, by size: the next block of that size
#: takes one (a rollout per training step would otherwise start a thread per episode each step).
_idle_pools: dict[int, list[_Pool]] = {}
_idle_guard = threading.Lock()


@contextlib.contextmanager
def worker_threads(count: int) -> Iterator[None]:
    """Give `run_sync` calls made inside this block (and tasks started in it) `count` threads.

    The threads outlive the block when it ends with none of them busy, and serve the next
    block of the same size; a block that leaves a call running (a stuck session, an error)
    gives its pool up, as before, so a later block never waits behind it."""
    count = max(1, count)
    with _idle_guard:
        idle = _idle_pools.get(count)
        pool = idle.pop() if idle else _Pool(count)
    token = _executor.set(pool)
    clean = False
    try:
        yield
        clean = True
    finally:
        _executor.reset(token)
        if clean and pool.running == 0:
            with _idle_guard:
                _idle_pools.setdefault(count, []).append(pool)
        else:
            pool.executor.shutdown(wait=False, cancel_futures=True)


def run_coroutine_sync(awaitable: Awaitable[T]) -> T:
    """Run `awaitable` to completion from sync code, even when called inside a running loop
    (then it runs on a private loop in a helper thread, so the caller's loop is not re-entered)."""
    box: dict[str, Any] = {}
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        asyncio.run(_into(box, awaitable))
        return box["value"]

    def target() -> None:
        try:
            asyncio.run(_into(box, awaitable))
        except BaseException as exc:  # re-raised in the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=target, name="envharness-sync-bridge")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


async def _into(box: dict[str, Any], awaitable: Awaitable[Any]) -> None:
    """Await `awaitable` into `box["value"]`; the main task's own result stays None. In the main
    thread `asyncio.run` ends with `signal.getsignal(SIGINT)`, which formats its handler (a
    partial holding the main task) with `%r`: a task holding a rollout's results would print
    every episode's messages and tokens there, once per step, for nothing."""
    box["value"] = await awaitable
