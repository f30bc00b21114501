"""`EnvSessionHandle`: the one environment session an MCP session owns.

Opened lazily (on the first tool call that needs it) through the server's
`SessionManager`, so /ws, HTTP and MCP share one capacity limit and one idle timeout;
closed when the MCP session ends. Calls go through the same `run_reset`/`run_step` as /ws.
"""

from __future__ import annotations

import anyio

from envharness.core.protocol import ErrorCode, ProtocolError, ResetRequest
from envharness.core.sessions import Session, SessionManager, run_reset, run_state, run_step
from envharness.core.types import Observation, State


class EnvSessionHandle:
    """One MCP session's environment; `last` is its latest observation. `fixed`: the reset
    options this server's operator keeps from MCP clients (`--mcp-fixed`); `pinned`: the values
    the operator chose for this session's rollout (its tag's `seed=`), which its resets take."""

    def __init__(self, manager: SessionManager, fixed: tuple[str, ...] = ()) -> None:
        self.manager = manager
        self.session: Session | None = None
        self.last: Observation | None = None
        self.options: dict = {}  # what the last reset asked for (e.g. screenshot)
        self.fixed = fixed
        self.pinned: dict = {}

    async def _live(self, *, opening: bool) -> Session:
        if self.session is not None and not self.session.closed:
            return self.session
        if self.session is not None and not opening:
            reason = self.session.expire_reason.value if self.session.expire_reason else "closed"
            raise ProtocolError(
                ErrorCode.NOT_RESET,
                f"The environment session ended ({reason}); call reset to start a new one",
            )
        if not opening:
            raise ProtocolError(ErrorCode.NOT_RESET, "Call reset first: this MCP session has no episode yet")
        self.session, self.last = await self.manager.open(), None
        return self.session

    async def open(self) -> Session:
        """The environment session, opened now if need be (a WebSocket joining this one)."""
        return await self._live(opening=True)

    async def reset(self, options: dict) -> Observation:
        """Reset options are checked as /ws checks them (raises pydantic's ValidationError)."""

        options = ResetRequest.model_validate(options).model_dump(exclude_unset=True)
        options = self._operators(options)
        session = await self._live(opening=True)
        async with self.manager.activity(session):
            self.last = await run_reset(session, options)
        self.options = dict(options)
        return self.last

    def _operators(self, options: dict) -> dict:
        """`options` with the operator's choices: a fixed option the call chose otherwise is
        refused in words (wherever it came from: a tool argument, a game's keyword arguments),
        and the rollout's pinned values are filled in."""
        chosen = sorted(k for k in self.fixed if k in options and options[k] != self.pinned.get(k))
        if chosen:
            raise ProtocolError(
                ErrorCode.VALIDATION_ERROR,
                f"{', '.join(chosen)}: fixed by this server's operator (--mcp-fixed "
                f"{','.join(self.fixed)}); a reset through MCP may not choose "
                f"{'it' if len(chosen) == 1 else 'them'}",
            )
        return {**options, **self.pinned}

    async def step(self, action_data: dict) -> Observation:

        session = await self._live(opening=False)
        async with self.manager.activity(session):
            self.last = await run_step(session, action_data)
        return self.last

    async def state(self) -> State:
        session = await self._live(opening=False)
        async with self.manager.activity(session):
            return await run_state(session)

    async def close(self) -> None:
        """Free the environment; shielded, since MCP sessions end by cancellation."""
        if self.session is not None:
            with anyio.CancelScope(shield=True):
                await self.manager.close(self.session)
