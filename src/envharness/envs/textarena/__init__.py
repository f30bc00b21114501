"""TextArena games (Wordle-v0 and the other single-player games) as an envharness environment.

Client side, OpenEnv's names: ``TextArenaEnv`` / ``AsyncTextArenaEnv`` with
``TextArenaAction(message=...)``; observations carry ``prompt``, ``messages`` (``sender_id``,
``content``, ``category``), ``current_player_id``, ``legal_players`` and ``info``.
Server side: ``make_environment_factory(**options)`` (what ``envharness serve textarena`` uses).
Names are resolved lazily so importing the package does not import textarena or NLTK.
"""

from __future__ import annotations

from envharness.core.lazy import lazy_exports

_EXPORTS = {
    "TextArenaAction": "models",
    "TextArenaMessage": "models",
    "TextArenaObservation": "models",
    "TextArenaState": "models",
    "TextArenaEnv": "client",
    "AsyncTextArenaEnv": "client",
    "TextArenaEnvironment": "environment",
    "TextArenaConfig": "environment",
    "make_environment_factory": "factory",
}

__all__ = sorted(_EXPORTS)


__getattr__ = lazy_exports(__name__, _EXPORTS)
