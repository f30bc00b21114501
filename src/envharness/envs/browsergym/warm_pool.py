"""Warm browser contexts, so that a new session does not wait for Chromium.

A session's first reset used to open its context and page (~250 ms: Chromium forks a renderer
and sets up the page's targets) and then load the task (~70 ms). Users who do not keep sessions
(seed-style ``environment_factory`` code, Eval Protocol's processor, a fleet failing over) paid
that on every episode. `WarmPool` keeps a few contexts ready, each with a page that already shows
a task, started once: the one new sessions asked for last (at first the server's default). A new
session takes one whose page shows its task and restarts the episode in place, as a same-task
reset does; otherwise any, and loads its task. The pool refills in the background, one context at
a time.

A session that knows its next task says so (``reset(..., next_task=...)``, what a trainer knows
while the model is still thinking): `prepare` opens a context showing that task, and the session's
next reset takes it instead of loading the page (~60 ms) in its own context.

Every context is fresh: taken once, never given back. A context of a browser that died since it
was opened is thrown away, not handed out.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from envharness.envs.browsergym.engine import CLOSE_TIMEOUT_S

logger = logging.getLogger(__name__)

#: How long closing waits for a context that is being opened.
_CLOSE_WAIT_S = 10.0
#: At most this many contexts opened for `prepare` wait untaken; older ones are closed.
MAX_PREPARED = 16


@dataclass
class WarmPage:
    """An opened context with its page; `task` is the task the page shows (None: blank).
    `prepared`: opened for a `prepare(task)` (a session's ``next_task``)."""

    context: Any
    page: Any
    task: str | None
    generation: int
    prepared: bool = False


class WarmPool:
    """Up to `size` warm contexts, opened by `open(task)` (``size=0``: no pool, every session opens
    its own). `alive(warm)` says whether a pooled context can still be used."""

    def __init__(
        self,
        open: Callable[[str | None], Awaitable[WarmPage]],
        alive: Callable[[WarmPage], bool],
        size: int = 2,
    ) -> None:
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise ValueError(f"warm_sessions must be an integer >= 0, got {size!r}")
        self.size = size
        self._open = open
        self._alive = alive
        self._ready: list[WarmPage] = []
        self._refill_task: asyncio.Task | None = None
        self._hot_task: str | None = None
        self._wanted: list[str] = []  # tasks to `prepare`, oldest first
        self._closing: set[asyncio.Task] = set()  # contexts being closed off the caller's path
        self._closed = False

    def take(self, task: str | None, *, exact: bool = False) -> WarmPage | None:
        """A warm context, preferably one whose page shows `task`; None when none is ready.
        `exact`: only a context prepared for `task` (a task change named in advance: swapping
        contexts on every task change would cost more CPU than loading the page).
        `task` becomes the one the pool prepares next; call `refill()` once the session's reset
        is done (opening a context meanwhile would slow that reset down)."""
        if self._closed:
            return None
        if not exact:
            self._hot_task = task
        self._discard_dead()
        chosen = next((w for w in self._ready if w.task == task and (w.prepared or not exact)), None)
        if chosen is None and not exact and self._ready:
            chosen = self._ready[0]
        if chosen is not None:
            self._ready.remove(chosen)
        return chosen

    def _discard_dead(self) -> None:
        for warm in [w for w in self._ready if not self._alive(w)]:
            self._ready.remove(warm)
            self.close_later(warm.context)

    def prepare(self, task: str) -> None:
        """Open a context showing `task` in the background, for a reset that will ask for it
        (``take(task, exact=True)``); works with ``size=0`` too."""
        if not self._closed:
            self._wanted.append(task)
            self.refill()

    def refill(self) -> None:
        """Open what `prepare` asked for, then top the pool up to `size`, in the background, one
        context at a time (no-op when nothing is missing or a refill runs)."""
        if self._closed or (not self._wanted and len(self._ready) >= self.size):
            return
        if self._refill_task is None or self._refill_task.done():
            self._refill_task = asyncio.ensure_future(self._refill())

    async def _refill(self) -> None:
        while not self._closed:
            if self._wanted:
                task, prepared = self._wanted.pop(0), True
            elif len(self._ready) < self.size:
                task, prepared = self._hot_task, False
            else:
                return
            try:
                warm = await self._open(task)
            except Exception as e:  # a busy or dying browser: the next take tries again
                logger.debug("could not open a warm context: %s", e)
                return
            if self._closed:
                await close_quietly(warm.context)
                return
            warm.prepared = prepared
            self._ready.append(warm)
            if prepared and len(self._ready) > self.size + MAX_PREPARED:
                self.close_later(self._ready.pop(0).context)

    def close_later(self, context: Any) -> None:
        """Close `context` in the background (a session's old one after a swap, a dead or surplus
        warm one); `aclose` waits for these."""
        task = asyncio.ensure_future(close_quietly(context))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    @property
    def ready(self) -> int:
        """How many warm contexts wait to be taken."""
        return len(self._ready)

    async def wait_filled(self) -> None:
        """Wait until the pool has refilled (tests and benchmarks: measure from a full pool)."""
        if self._refill_task is not None:
            await asyncio.shield(self._refill_task)

    async def aclose(self) -> None:
        """Close the warm contexts; no more are opened. Safe to call twice."""
        self._closed = True
        task, self._refill_task = self._refill_task, None
        if task is not None and not task.done():
            # Let the context being opened finish (the loop closes it): cancelling Playwright mid-load
            # leaves its own futures failing unheard. A hung browser is cancelled after a while.
            done, _ = await asyncio.wait({task}, timeout=_CLOSE_WAIT_S)
            if not done:
                task.cancel()
        ready, self._ready = self._ready, []
        await asyncio.gather(*(close_quietly(w.context) for w in ready), *self._closing)


async def close_quietly(context: Any) -> None:
    try:
        await asyncio.wait_for(context.close(), CLOSE_TIMEOUT_S)
    except asyncio.TimeoutError:  # its browser stopped answering: the engine kills it when it closes
        logger.warning(
            "a browser context did not close within %.0f s; left to the browser's own close", CLOSE_TIMEOUT_S
        )
    except Exception:  # its browser is gone already
        pass
