"""`Environment`: the one interface every envharness environment implements.

Like Gymnasium's `Env`, it is small: `reset`, `step`, `state`, `close`. The server
creates one instance per session. Environments that do I/O (a browser) implement the
`*_async` methods natively; simple ones implement the sync methods and inherit async
variants that call them. Never implement both directions by calling each other.
"""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar, Generic, TypeVar

from envharness.core.types import Action, EnvironmentMetadata, Observation, State


class InvalidOptions(ValueError):
    """Reset options the client got wrong (an unknown task or option, a value of the wrong
    type): the server answers VALIDATION_ERROR (4xx) in words and logs no traceback."""


ActT = TypeVar("ActT", bound=Action)
ObsT = TypeVar("ObsT", bound=Observation)


class Environment(Generic[ActT, ObsT]):
    """Base class for environments served by `envharness.core.server.create_app`.

    Subclasses set `action_type`, `observation_type` (and optionally `state_type`), and
    override either the sync methods (`reset`, `step`) or the async ones (`reset_async`,
    `step_async`). The server always calls the async ones.
    """

    action_type: ClassVar[type[Action]] = Action
    observation_type: ClassVar[type[Observation]] = Observation
    state_type: ClassVar[type[State]] = State

    #: Whether many instances may run at once in one process. When False the server
    #: allows at most one session at a time for this environment.
    supports_concurrent_sessions: ClassVar[bool] = True

    # -- sync API ---------------------------------------------------------------------
    def reset(self, seed: int | None = None, episode_id: str | None = None, **options: Any) -> ObsT:
        """Start a new episode and return its first observation."""
        raise NotImplementedError(f"{type(self).__name__} implements neither reset nor reset_async")

    def step(self, action: ActT) -> ObsT:
        """Apply one action; the observation carries `reward` and `done`."""
        raise NotImplementedError(f"{type(self).__name__} implements neither step nor step_async")

    @property
    def state(self) -> State:
        """Episode bookkeeping (episode id, step count, env-specific fields)."""
        raise NotImplementedError

    def close(self) -> None:
        """Free everything the environment holds. Safe to call twice."""

    # -- async API (what the server calls) --------------------------------------------
    async def reset_async(
        self, seed: int | None = None, episode_id: str | None = None, **options: Any
    ) -> ObsT:
        return await asyncio.to_thread(self.reset, seed, episode_id, **options)

    async def step_async(self, action: ActT) -> ObsT:
        return await asyncio.to_thread(self.step, action)

    async def state_async(self) -> State:
        return self.state

    async def close_async(self) -> None:
        self.close()

    # -- description ------------------------------------------------------------------
    def metadata(self) -> EnvironmentMetadata:
        return EnvironmentMetadata(name=type(self).__name__, description=(type(self).__doc__ or "").strip())
