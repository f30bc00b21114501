"""Echo's action and observation, with the field names of OpenEnv's echo environment."""

from __future__ import annotations

from pydantic import Field

from envharness.core.types import Action, Observation


class EchoAction(Action):
    """A message to echo back."""

    message: str = Field(..., description="Message to echo back")


class EchoObservation(Observation):
    """The echoed message and its length."""

    echoed_message: str = Field(default="", description="The echoed message")
    message_length: int = Field(default=0, description="Length of the echoed message")
