"""`EchoEnvironment`: the smallest environment, and the template for new ones.

It echoes each message back; the reward grows with the message's length (0.1 per
character, at most 1.0), as in OpenEnv's echo environment. A sync environment: the
server runs its `reset`/`step` in a worker thread.
"""

from __future__ import annotations

import uuid
from typing import Any

from envharness.core.environment import Environment, InvalidOptions
from envharness.core.types import EnvironmentMetadata, State
from envharness.envs.echo.models import EchoAction, EchoObservation


class EchoEnvironment(Environment[EchoAction, EchoObservation]):
    """Echoes messages back; reward = min(0.1 * len(message), 1.0)."""

    action_type = EchoAction
    observation_type = EchoObservation
    supports_concurrent_sessions = True

    def __init__(self, max_steps: int | None = None) -> None:
        """`max_steps`: end the episode (done=True) after that many steps; None: never."""
        if max_steps is not None and max_steps < 1:
            raise ValueError("max_steps must be at least 1")
        self.max_steps = max_steps
        self._state = State(episode_id=None, step_count=0)

    def reset(
        self, seed: int | None = None, episode_id: str | None = None, **options: Any
    ) -> EchoObservation:
        if options:
            raise InvalidOptions(f"echo takes no reset options, got: {', '.join(sorted(options))}")
        self._state = State(episode_id=episode_id or str(uuid.uuid4()), step_count=0)
        return EchoObservation(
            echoed_message="Echo environment ready!", message_length=0, done=False, reward=0.0
        )

    def step(self, action: EchoAction) -> EchoObservation:
        self._state.step_count += 1
        message = action.message
        done = self.max_steps is not None and self._state.step_count >= self.max_steps
        return EchoObservation(
            echoed_message=message,
            message_length=len(message),
            done=done,
            reward=min(len(message) * 0.1, 1.0),
            metadata={"original_message": message, "step": self._state.step_count},
        )

    @property
    def state(self) -> State:
        return self._state

    def metadata(self) -> EnvironmentMetadata:
        return EnvironmentMetadata(
            name="echo", description="Echoes messages back; reward grows with their length."
        )
