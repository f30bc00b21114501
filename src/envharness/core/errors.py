"""The one exception an environment raises for a bad action.

The rule, the same on every surface (the WebSocket and HTTP server, MCP, `/web`, the harness
behind eval, train, TRL's `environment_factory`, replay and check): when `step` raises
`InvalidAction` (or any `ValueError`: Python's own word for a bad argument, pydantic's
`ValidationError` included), the agent reads its message as the tool's error, the step counts
and the episode goes on. Any other exception is the environment's bug: the episode ends and is
counted apart from the agent's failures (eval's `errors` column, `env_error` in its record).
"""

from __future__ import annotations


class InvalidAction(ValueError):
    """The agent's action cannot be carried out; the message says why and what would work."""


def is_invalid_action(exc: BaseException) -> bool:
    """Whether `step` raising `exc` is the agent's mistake (the episode goes on)."""
    return isinstance(exc, ValueError)


__all__ = ["InvalidAction", "is_invalid_action"]
