"""BrowserGym's resets on a browser that stays up: one Chromium per set of launch arguments,
and the chat window in the task's browser.

BrowserGym's `reset()` closes its browser and launches a new one, twice (the task's and the
chat window's): most of a reset's time and CPU. `keep_browsers()` makes the global sync
Playwright's `chromium.launch` hand out a kept browser instead, whose `close()` closes only
the contexts it opened. Each reset still gets a fresh context and page, which is all the
task and its observations see. A browser that crashed or disconnected is launched anew.

The chat window gets its own context in the task's browser rather than a Chromium of its own
(one launch and ~95 MB fewer per worker). Nothing observed comes from the chat's page: the
chat messages are BrowserGym's Python list, and the task's pages are those of its own context.
Its launch differs from the task's only in the window size, which sizes the chat's page alone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from types import SimpleNamespace
from typing import Any


class KeptBrowser:
    """A sync Playwright `Browser` whose `close()` leaves the process up for the next reset,
    closing the contexts opened through it."""

    def __init__(self, browser: Any) -> None:
        self._browser = browser
        self._contexts: list[Any] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._browser, name)

    def new_context(self, **kwargs: Any) -> Any:
        context = self._browser.new_context(**kwargs)
        self._contexts.append(context)
        return context

    def close(self, **_: Any) -> None:
        contexts, self._contexts = self._contexts, []
        for context in contexts:
            try:
                context.close()
            except Exception:  # already closed (BrowserGym closes its context first), or the browser is gone
                pass


def keep_browsers(disable_features: Iterable[str] = ()) -> Callable[[], None]:
    """Patch the global sync Playwright's `chromium.launch` (once per process) and the chat's
    launch; returns the function that closes the kept browsers and unpatches the chat.
    `disable_features` join each launch's ``--disable-features=`` (Chromium reads only the last);
    the first call's apply for the life of the process."""
    import browsergym.core
    import browsergym.core.chat

    chromium = browsergym.core._get_global_playwright().chromium
    disabled = list(disable_features)
    if not hasattr(chromium.launch, "kept"):
        launch, kept, latest = chromium.launch, {}, []

        def kept_launch(**kwargs: Any) -> KeptBrowser:
            kwargs["args"] = with_features_disabled(list(kwargs.get("args") or []), disabled)
            key = repr(sorted(kwargs.items()))
            if key not in kept or not kept[key].is_connected():
                kept[key] = launch(**kwargs)
            latest[:] = [kept[key]]
            return KeptBrowser(kept[key])

        kept_launch.kept, kept_launch.latest = kept, latest  # type: ignore[attr-defined]
        chromium.launch = kept_launch
    kept, latest = chromium.launch.kept, chromium.launch.latest

    def chat_launch(**kwargs: Any) -> KeptBrowser:
        """The chat window's launch: the browser of the task launched just before it."""
        if latest and latest[0].is_connected():
            return KeptBrowser(latest[0])
        return chromium.launch(**kwargs)

    # chat.py calls `_get_global_playwright().chromium.launch(...)` through its own import
    for_chat = SimpleNamespace(chromium=SimpleNamespace(launch=chat_launch))
    browsergym.core.chat._get_global_playwright = lambda: for_chat

    def close_all() -> None:
        browsergym.core.chat._get_global_playwright = browsergym.core._get_global_playwright
        browsers = list(kept.values())
        kept.clear()
        latest.clear()
        for browser in browsers:
            try:
                browser.close()
            except Exception:
                pass

    return close_all


def with_features_disabled(args: list[str], features: list[str]) -> list[str]:
    """`args` with `features` added to its last ``--disable-features=`` (or a new one)."""
    if not features:
        return args
    for i in reversed(range(len(args))):
        if args[i].startswith("--disable-features="):
            return [*args[:i], ",".join([args[i], *features]), *args[i + 1 :]]
    return [*args, "--disable-features=" + ",".join(features)]
