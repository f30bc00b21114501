"""The one exception an environment raises for a bad action.

The rule, the same on every surface (the WebSocket and HTTP server, MCP, `/web`, the harness
behind eval, train, TRL's `environment_factory`, replay and check): when `step` raises
`InvalidAction` (or any `ValueError`: Python's own word for a bad argument, pydantic's
`ValidationError` included), the agent reads its message as the tool's error, the step counts
and the episode goes on. Any other exception is the environment's bug: the episode ends and is
counted apart from the agent's failures (eval's `errors` column, `env_error` in its record).

That includes `SystemExit` and `KeyboardInterrupt` raised by an environment's own code: on a
server they become `EnvironmentExit` (`contained`), so one session hears EXECUTION_ERROR and
the server keeps serving, instead of the exception stopping the whole process.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator


class InvalidAction(ValueError):
    """The agent's action cannot be carried out; the message says why and what would work."""


def is_invalid_action(exc: BaseException) -> bool:
    """Whether `step` raising `exc` is the agent's mistake (the episode goes on)."""
    return isinstance(exc, ValueError)


class EnvironmentExit(RuntimeError):
    """An environment raised `SystemExit` or `KeyboardInterrupt`: its bug, not a stop of the server."""


@contextlib.contextmanager
def contained() -> Iterator[None]:
    """Around a server's call into an environment: a `SystemExit` or `KeyboardInterrupt` it raises
    becomes `EnvironmentExit`. The server's own stop never comes this way (uvicorn turns SIGINT
    and SIGTERM into a graceful shutdown; a session's thread gets no signals), and cancellation
    passes untouched."""
    try:
        yield
    except (Exception, asyncio.CancelledError, GeneratorExit):
        raise
    except BaseException as exc:
        said = f": {exc}" if str(exc) else ""
        raise EnvironmentExit(
            f"the environment raised {type(exc).__name__}{said} (an environment may not stop the server)"
        ) from exc


__all__ = ["EnvironmentExit", "InvalidAction", "contained", "is_invalid_action"]
