"""`Environment`: the one interface every envharness environment implements.

Like Gymnasium's `Env`, it is small: `reset`, `step`, `state`, `close`. The server
creates one instance per session. Environments that do I/O (a browser) implement the
`*_async` methods natively; simple ones implement the sync methods and inherit async
variants that call them, each instance's on one thread of its own. Never implement both directions by calling each other.
"""

from __future__ import annotations

import weakref
from typing import Any, ClassVar, Generic, TypeVar

from envharness.core.session_threads import SessionThread
from envharness.core.types import Action, EnvironmentMetadata, Observation, State


class InvalidOptions(ValueError):
    """Reset options the client got wrong (an unknown task or option, a value of the wrong
    type): the server answers VALIDATION_ERROR (4xx) in words and logs no traceback."""


ActT = TypeVar("ActT", bound=Action)
_THREAD = "_envharness_session_thread"
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
    #: The reset options it takes and their bounds (`core/option_bounds.ResetOptions`), checked
    #: by the server before `reset` sees them; None: undeclared, the environment checks its own.
    reset_options: ClassVar[Any] = None

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
    # The sync methods of one instance (one session) all run on one thread of their own
    # (`core/session_threads.py`): what `reset` makes, `step`, `state` and `close` may use, a
    # sqlite connection included. `__init__` runs where the server makes the instance (its
    # event loop), so open thread-bound things in `reset`.
    async def reset_async(
        self, seed: int | None = None, episode_id: str | None = None, **options: Any
    ) -> ObsT:
        return await self._session_thread().run(self.reset, seed, episode_id, **options)

    async def step_async(self, action: ActT) -> ObsT:
        return await self._session_thread().run(self.step, action)

    async def state_async(self) -> State:
        thread = self.__dict__.get(_THREAD)
        if thread is None:  # no sync call yet: nothing of this session lives on a thread
            return self.state
        return await thread.run(lambda: self.state)

    async def close_async(self) -> None:
        thread = self.__dict__.pop(_THREAD, None)
        if thread is None or type(self).close is Environment.close:  # (nothing to close: no hop)
            self.close()
            if thread is not None:
                thread.release()
            return
        try:
            await thread.run(self.close)
        finally:
            thread.release()

    def _session_thread(self) -> SessionThread:
        """This instance's thread, leased on its first sync call (given back at close, or when
        the instance is collected unclosed)."""
        thread = self.__dict__.get(_THREAD)
        if thread is None:
            thread = self.__dict__[_THREAD] = SessionThread()
            weakref.finalize(self, thread.release)
        return thread

    # -- description ------------------------------------------------------------------
    def metadata(self) -> EnvironmentMetadata:
        return EnvironmentMetadata(name=type(self).__name__, description=(type(self).__doc__ or "").strip())
