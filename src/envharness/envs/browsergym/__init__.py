"""BrowserGym-compatible MiniWoB++ environment: one shared Chromium, one context per session.

Client side: ``BrowserGymEnv`` / ``AsyncBrowserGymEnv`` with ``BrowserGymAction(action_str=...)``.
Server side: ``make_environment_factory(**options)`` (what ``envharness serve browsergym`` uses).
Names are resolved lazily so importing the package does not start Playwright or numpy.
"""

from __future__ import annotations

from envharness.core.lazy import lazy_exports

_EXPORTS = {
    "BrowserGymAction": "models",
    "BrowserGymObservation": "models",
    "BrowserGymImageObservation": "models",
    "BrowserGymState": "models",
    "BrowserGymEnv": "client",
    "AsyncBrowserGymEnv": "client",
    "BrowserGymEnvironment": "environment",
    "BrowserGymConfig": "environment",
    "BrowserSessionLost": "environment",
    "make_environment_factory": "factory",
}

__all__ = sorted(_EXPORTS)


__getattr__ = lazy_exports(__name__, _EXPORTS)
