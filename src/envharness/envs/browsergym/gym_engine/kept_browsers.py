"""BrowserGym's resets on browsers that stay up: one Chromium per set of launch arguments.

BrowserGym's `reset()` closes its browser and launches a new one, twice (the task's and the
chat window's): most of a reset's time and CPU. `keep_browsers()` makes the global sync
Playwright's `chromium.launch` hand out a kept browser instead, whose `close()` closes only
the contexts it opened. Each reset still gets a fresh context and page, which is all the
task and its observations see. A browser that crashed or disconnected is launched anew.
"""

from __future__ import annotations

from typing import Any, Callable


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


def keep_browsers() -> Callable[[], None]:
    """Patch the global sync Playwright's `chromium.launch` (once per process); returns the
    function that closes the kept browsers."""
    import browsergym.core

    chromium = browsergym.core._get_global_playwright().chromium
    if not hasattr(chromium.launch, "kept"):
        launch, kept = chromium.launch, {}

        def kept_launch(**kwargs: Any) -> KeptBrowser:
            key = repr(sorted(kwargs.items()))
            if key not in kept or not kept[key].is_connected():
                kept[key] = launch(**kwargs)
            return KeptBrowser(kept[key])

        kept_launch.kept = kept  # type: ignore[attr-defined]
        chromium.launch = kept_launch
    kept = chromium.launch.kept

    def close_all() -> None:
        browsers = list(kept.values())
        kept.clear()
        for browser in browsers:
            try:
                browser.close()
            except Exception:
                pass

    return close_all
