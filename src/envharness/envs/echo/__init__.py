"""The echo environment: `EchoAction(message=...)` -> `EchoObservation(echoed_message, message_length)`."""

from envharness.envs.echo.client import AsyncEchoEnv, EchoEnv
from envharness.envs.echo.environment import EchoEnvironment
from envharness.envs.echo.models import EchoAction, EchoObservation

__all__ = ["AsyncEchoEnv", "EchoAction", "EchoEnv", "EchoEnvironment", "EchoObservation"]
