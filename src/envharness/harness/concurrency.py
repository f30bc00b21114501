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
_executor: contextvars.ContextVar[Executor | None] = contextvars.ContextVar(
    "envharness_executor", default=None
)


async def run_sync(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Run a blocking call in the harness's worker threads (context variables included)."""
    loop = asyncio.get_running_loop()
    call = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
    return await loop.run_in_executor(_executor.get(), call)


async def call_maybe_async(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Await `fn` if it is async; otherwise run it in a worker thread (then await its result
    if it returned an awaitable, as OpenEnv 0.10's dual-mode clients do)."""
    if inspect.iscoroutinefunction(fn):
        return await fn(*args, **kwargs)
    result = await run_sync(fn, *args, **kwargs)
    if inspect.isawaitable(result):
        result = await result
    return result


@contextlib.contextmanager
def worker_threads(count: int) -> Iterator[None]:
    """Give `run_sync` calls made inside this block (and tasks started in it) `count` threads."""
    pool = ThreadPoolExecutor(max_workers=max(1, count), thread_name_prefix="envharness")
    token = _executor.set(pool)
    try:
        yield
    finally:
        _executor.reset(token)
        pool.shutdown(wait=False, cancel_futures=True)


def run_coroutine_sync(awaitable: Awaitable[T]) -> T:
    """Run `awaitable` to completion from sync code, even when called inside a running loop
    (then it runs on a private loop in a helper thread, so the caller's loop is not re-entered)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(_as_coroutine(awaitable))
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(_as_coroutine(awaitable))
        except BaseException as exc:  # re-raised in the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=target, name="envharness-sync-bridge")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


async def _as_coroutine(awaitable: Awaitable[T]) -> T:
    return await awaitable
