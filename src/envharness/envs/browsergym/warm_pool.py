"""Warm browser contexts, so that a new session does not wait for Chromium.

A session's first reset used to open its context and page (~250 ms: Chromium forks a renderer
and sets up the page's targets) and then load the task (~70 ms). Users who do not keep sessions
(seed-style ``environment_factory`` code, Eval Protocol's processor, a fleet failing over) paid
that on every episode. `WarmPool` keeps contexts ready, each with a page that already shows a
task: the one new sessions asked for last (at first the server's default). A new session takes
one whose page shows its task and restarts the episode in place, as a same-task reset does;
otherwise any, and switches it to its task in place.

The pool follows demand: it keeps `size` contexts, and more while sessions are taken faster
(as many as were taken in the last second, up to `max_size`, the memory budget: ~30 MB each),
opening two at a time while it is short; a second after the last take or give-back it
closes what it holds beyond `size`. A session that ends cleanly gives its context back
(`give_back`: the environment decides when that is safe and clears what the session left), so
sessions opened back to back reuse contexts instead of waiting for new ones.

A session that knows its next task says so (``reset(..., next_task=...)``): `prepare` opens a
context showing that task, and the session's next reset takes it instead of loading the page
(only for tasks that cannot be switched to in place: web tasks, MiniWoB pages with images).

A context of a browser that died since it was opened is thrown away, not handed out.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from envharness.envs.browsergym.engine import CLOSE_TIMEOUT_S
from envharness.envs.browsergym.observation import _cdp

logger = logging.getLogger(__name__)

#: How long closing waits for a context that is being opened.
_CLOSE_WAIT_S = 10.0
#: At most this many contexts opened for `prepare` wait untaken; older ones are closed.
MAX_PREPARED = 16
#: Contexts opened at once while the pool is short (two cores: more would slow the sessions down).
PARALLEL_OPENS = 2
#: The demand the pool follows: contexts taken within this many seconds.
DEMAND_WINDOW_S = 1.0
#: After this long without a take or a give-back, contexts beyond `size` are closed (the memory
#: a burst of sessions took comes back when it is over).
SHRINK_AFTER_S = 1.0


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
        max_size: int | None = None,
    ) -> None:
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise ValueError(f"warm_sessions must be an integer >= 0, got {size!r}")
        max_size = max(size, 8) if max_size is None else max_size
        if not isinstance(max_size, int) or isinstance(max_size, bool) or max_size < size:
            raise ValueError(
                f"warm_sessions_max must be an integer >= warm_sessions ({size}), got {max_size!r}"
            )
        self.size = size
        self.max_size = max_size if size > 0 else 0
        self._open = open
        self._alive = alive
        self._ready: list[WarmPage] = []
        self._refills: set[asyncio.Task] = set()
        self._opening = 0
        self._taken: deque[float] = deque(maxlen=64)  # when contexts were taken (demand)
        self._shrink: asyncio.TimerHandle | None = None
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
            self._taken.append(time.monotonic())
        self._discard_dead()
        chosen = next((w for w in self._ready if w.task == task and (w.prepared or not exact)), None)
        if chosen is None and not exact and self._ready:
            chosen = self._ready[0]
        if chosen is not None:
            self._ready.remove(chosen)
        self._shrink_later()
        return chosen

    def _shrink_later(self) -> None:
        """Close the contexts beyond `size` once demand has been gone for `SHRINK_AFTER_S`."""
        if self._shrink is not None:
            self._shrink.cancel()
        self._shrink = asyncio.get_running_loop().call_later(SHRINK_AFTER_S, self._shrink_now)

    def _shrink_now(self) -> None:
        self._shrink = None
        # The last in line go: the first are the contexts given back last, whose pages keep task files.
        spare = [w for w in reversed(self._ready) if not w.prepared][: max(0, len(self._ready) - self.target)]
        for warm in spare:
            self._ready.remove(warm)
            self.close_later(warm.context)

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

    @property
    def target(self) -> int:
        """How many contexts the pool keeps ready now: `size`, or the recent demand (contexts
        taken in the last `DEMAND_WINDOW_S`), at most `max_size`."""
        now = time.monotonic()
        demand = sum(1 for t in self._taken if now - t <= DEMAND_WINDOW_S)
        return min(self.max_size, max(self.size, demand))

    def _missing(self) -> int:
        return len(self._wanted) + max(0, self.target - len(self._ready) - self._opening)

    def refill(self) -> None:
        """Open what `prepare` asked for, then top the pool up to `target`, in the background, up
        to `PARALLEL_OPENS` contexts at a time (no-op when nothing is missing)."""
        if self._closed:
            return
        while self._missing() > len(self._refills) and len(self._refills) < PARALLEL_OPENS:
            task = asyncio.ensure_future(self._refill())
            self._refills.add(task)
            task.add_done_callback(self._refills.discard)

    async def _refill(self) -> None:
        while not self._closed:
            if self._wanted:
                task, prepared = self._wanted.pop(0), True
            elif len(self._ready) + self._opening < self.target:
                task, prepared = self._hot_task, False
            else:
                return
            self._opening += 1
            try:
                warm = await self._open(task)
            except Exception as e:  # a busy or dying browser: the next take tries again
                logger.debug("could not open a warm context: %s", e)
                return
            finally:
                self._opening -= 1
            if self._closed:
                await close_quietly(warm.context)
                return
            warm.prepared = prepared
            self._ready.append(warm)
            if prepared and len(self._ready) > self.max_size + MAX_PREPARED:
                self.close_later(self._ready.pop(0).context)

    def give_back(self, warm: WarmPage) -> None:
        """Keep a context a session has finished with (cleared by its environment) for the next
        session; closed instead when the pool is full or closed, or the context is dead."""
        if self._closed or len(self._ready) >= self.max_size or not self._alive(warm):
            self.close_later(warm.context)
        else:  # first in line: its page keeps the task files it was sent, so task changes stay cheap
            self._ready.insert(0, warm)
            self._shrink_later()

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
        while self._refills:
            await asyncio.shield(asyncio.gather(*self._refills, return_exceptions=True))

    async def aclose(self) -> None:
        """Close the warm contexts; no more are opened. Safe to call twice."""
        self._closed = True
        if self._shrink is not None:
            self._shrink.cancel()
        refills, self._refills = set(self._refills), set()
        if refills:
            # Let the contexts being opened finish (the loops close them): cancelling Playwright
            # mid-load leaves its own futures failing unheard. A hung browser is cancelled after a while.
            _, pending = await asyncio.wait(refills, timeout=_CLOSE_WAIT_S)
            for task in pending:
                task.cancel()
        ready, self._ready = self._ready, []
        await asyncio.gather(*(close_quietly(w.context) for w in ready), *self._closing)


async def close_quietly(context: Any) -> None:
    try:
        await asyncio.wait_for(context.close(), CLOSE_TIMEOUT_S)
    except TimeoutError:  # its browser stopped answering: the engine kills it when it closes
        logger.warning(
            "a browser context did not close within %.0f s; left to the browser's own close", CLOSE_TIMEOUT_S
        )
    except Exception:  # its browser is gone already
        pass


#: How long clearing a context for the next session may take before it is closed instead.
CLEAR_TIMEOUT_S = 2.0


async def clear_for_reuse(context: Any, page: Any) -> bool:
    """Clear what a session leaves in its context besides the page's document, which the next
    reset rewrites or restarts: other tabs, cookies, the page origin's storage (local, session,
    IndexedDB, caches), the tab's history. False when that failed (the context is closed instead)."""

    async def clear() -> None:
        for other in [p for p in context.pages if p is not page]:
            await other.close()
        parts = urlsplit(page.url)
        cdp = await _cdp(page)
        await asyncio.gather(
            context.clear_cookies(),
            cdp.send(
                "Storage.clearDataForOrigin",
                {"origin": f"{parts.scheme}://{parts.netloc}", "storageTypes": "all"},
            ),
            cdp.send("Page.resetNavigationHistory"),
            page.evaluate("() => sessionStorage.clear()"),
        )

    try:
        await asyncio.wait_for(clear(), CLEAR_TIMEOUT_S)
        return True
    except Exception as e:  # a dialog open, a dying browser: not worth keeping
        logger.debug("a context could not be cleared for reuse: %s", e)
        return False
