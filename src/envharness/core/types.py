"""The data every environment speaks: actions, observations, state, step results.

These mirror OpenEnv's `openenv.core.env_server.types` so that OpenEnv clients and
envharness servers understand each other. Environments subclass `Action` and
`Observation` with their own fields; `State` accepts extra fields.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field


class Action(BaseModel):
    """Base class for an environment's action. Unknown fields are rejected."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, arbitrary_types_allowed=True)

    metadata: dict[str, Any] = Field(
        default_factory=dict, description="Free-form, not interpreted by the env"
    )


class Observation(BaseModel):
    """Base class for what an environment returns after reset and step."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, arbitrary_types_allowed=True)

    done: bool = Field(default=False, description="Whether the episode has ended")
    reward: float | int | bool | None = Field(default=None, description="Reward of the last step")
    metadata: dict[str, Any] = Field(default_factory=dict, description="Extra information")


class State(BaseModel):
    """Episode bookkeeping; environments add their own fields (extra fields are allowed)."""

    model_config = ConfigDict(extra="allow", validate_assignment=True, arbitrary_types_allowed=True)

    episode_id: str | None = None
    step_count: int = 0


ObsT = TypeVar("ObsT", bound=Observation)


class StepResult(BaseModel, Generic[ObsT]):
    """What a client gets back from reset/step: the observation, its reward, and done."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    observation: ObsT
    reward: float | None = None
    done: bool = False
    metadata: dict[str, Any] | None = None  # the observation's metadata, as OpenEnv's StepResult has it


class EnvironmentMetadata(BaseModel):
    """Served at GET /metadata."""

    name: str
    description: str = ""
    version: str = "0.1.0"
    readme_content: str | None = None
    author: str | None = None
    documentation_url: str | None = None
