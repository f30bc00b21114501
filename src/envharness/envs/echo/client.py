"""Echo clients: the async one names the observation type, the sync one names the async one."""

from __future__ import annotations

from envharness.core.client import AsyncEnvClient, EnvClient
from envharness.core.types import State
from envharness.envs.echo.models import EchoAction, EchoObservation


class AsyncEchoEnv(AsyncEnvClient[EchoAction, EchoObservation, State]):
    observation_type = EchoObservation
    env_name = "echo"


class EchoEnv(EnvClient[EchoAction, EchoObservation, State]):
    async_client_class = AsyncEchoEnv
