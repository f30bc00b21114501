"""Wire compatibility with the real `openenv` package (PyPI openenv 0.10.0), both ways:
OpenEnv's own clients drive an envharness server, and envharness's client drives an
OpenEnv server."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import httpx
import pytest
from openenv.core import EnvClient as OpenEnvClient
from openenv.core.client_types import StepResult as OpenEnvStepResult
from openenv.core.env_server import types as oe
from openenv.core.env_server.http_server import create_app as openenv_create_app
from openenv.core.env_server.interfaces import Environment as OpenEnvEnvironment
from openenv.core.generic_client import GenericEnvClient
from pydantic import Field

from envharness.core.launchers import LocalServer
from envharness.envs.echo import AsyncEchoEnv, EchoAction, EchoEnv


# -- OpenEnv's side, written the way OpenEnv's echo template writes it ------------------
class OEEchoAction(oe.Action):
    message: str = Field(...)


class OEEchoObservation(oe.Observation):
    echoed_message: str = ""
    message_length: int = 0


class OpenEnvEchoClient(OpenEnvClient[OEEchoAction, OEEchoObservation, oe.State]):
    def _step_payload(self, action: OEEchoAction) -> dict:
        return {"message": action.message}

    def _parse_result(self, payload: dict) -> OpenEnvStepResult[OEEchoObservation]:
        obs = payload.get("observation", {})
        observation = OEEchoObservation(
            echoed_message=obs.get("echoed_message", ""),
            message_length=obs.get("message_length", 0),
            done=payload.get("done", False),
            reward=payload.get("reward"),
            metadata=payload.get("metadata", obs.get("metadata", {})),
        )
        return OpenEnvStepResult(
            observation=observation,
            reward=payload.get("reward"),
            done=payload.get("done", False),
            metadata=payload.get("metadata"),
        )

    def _parse_state(self, payload: dict) -> oe.State:
        return oe.State(episode_id=payload.get("episode_id"), step_count=payload.get("step_count", 0))


class OpenEnvEchoEnvironment(OpenEnvEnvironment):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        self._state = oe.State(episode_id=str(uuid.uuid4()), step_count=0)

    def reset(
        self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any
    ) -> OEEchoObservation:
        self._state = oe.State(episode_id=episode_id or str(uuid.uuid4()), step_count=0)
        return OEEchoObservation(echoed_message="ready", reward=0.0)

    def step(self, action: OEEchoAction, **kwargs: Any) -> OEEchoObservation:
        self._state.step_count += 1
        return OEEchoObservation(
            echoed_message=action.message,
            message_length=len(action.message),
            reward=min(len(action.message) * 0.1, 1.0),
            metadata={"step": self._state.step_count},
        )

    @property
    def state(self) -> oe.State:
        return self._state


# -- OpenEnv clients -> envharness server ---------------------------------------------
def test_openenv_generic_client_sync(echo_server):
    with GenericEnvClient(base_url=echo_server.base_url).sync() as env:
        first = env.reset(seed=1, episode_id="oe-1")
        assert first.observation["echoed_message"] == "Echo environment ready!" and first.done is False
        result = env.step({"message": "hello"})
        assert result.observation["echoed_message"] == "hello" and result.observation["message_length"] == 5
        assert result.reward == pytest.approx(0.5) and result.metadata == {
            "original_message": "hello",
            "step": 1,
        }
        assert env.state() == {"episode_id": "oe-1", "step_count": 1}
        with pytest.raises(
            RuntimeError,
            match=r"Server error: Invalid action for EchoAction: message: Field required.*\(code: VALIDATION_ERROR\)",
        ):
            env.step({"text": "wrong field"})
        assert env.step({"message": "after the error"}).observation["message_length"] == 15


async def test_openenv_typed_client_async_episodes(echo_server):
    async def episode(i: int) -> list[float]:
        async with OpenEnvEchoClient(base_url=echo_server.base_url) as env:
            result = await env.reset(episode_id=f"typed-{i}")
            assert isinstance(result.observation, OEEchoObservation)
            rewards = []
            for k in range(3):
                result = await env.step(OEEchoAction(message="ab" * (i + k)))
                assert result.observation.message_length == 2 * (i + k)
                rewards.append(result.reward)
            state = await env.state()
            assert state.episode_id == f"typed-{i}" and state.step_count == 3
            return rewards

    results = await asyncio.gather(*(episode(i) for i in range(4)))
    assert results == [[pytest.approx(min(0.2 * (i + k), 1.0)) for k in range(3)] for i in range(4)]


def test_openenv_client_sees_capacity_errors():
    with (
        LocalServer("echo", max_sessions=1) as server,
        GenericEnvClient(base_url=server.base_url).sync() as first,
        GenericEnvClient(base_url=server.base_url).sync() as second,
    ):
        first.reset()
        with pytest.raises(RuntimeError, match=r"\(code: CAPACITY_REACHED\)"):
            second.reset()


def test_openenv_http_models_accept_our_bodies(echo_server):
    with httpx.Client(base_url=echo_server.base_url) as http:
        oe.ResetResponse.model_validate(http.post("/reset", json={"seed": 3}).json())
        oe.StepResponse.model_validate(
            http.post("/step", json={"action": {"message": "x"}, "timeout_s": 5}).json()
        )
        oe.SchemaResponse.model_validate(http.get("/schema").json())
        assert http.get("/health").json()["status"] == oe.HealthStatus.HEALTHY.value


# -- envharness clients -> OpenEnv server ---------------------------------------------
@pytest.fixture(scope="module")
def openenv_server():
    app = openenv_create_app(
        OpenEnvEchoEnvironment, OEEchoAction, OEEchoObservation, env_name="oe_echo", max_concurrent_envs=4
    )
    with LocalServer(app) as server:
        yield server


def test_envharness_client_drives_an_openenv_server(openenv_server):
    with EchoEnv(openenv_server.base_url) as env:
        assert env.reset(episode_id="ours").observation.echoed_message == "ready"
        result = env.step(EchoAction(message="hey"))
        assert result.observation.echoed_message == "hey" and result.reward == pytest.approx(0.3)
        assert result.metadata == {"step": 1}
        state = env.state()
        assert state.episode_id == "ours" and state.step_count == 1
        # both frames before either reply: OpenEnv's server answers them in order too
        result, state = env.step_and_state(EchoAction(message="again"))
        assert result.observation.echoed_message == "again" and state.step_count == 2
        first, state = env.reset_and_state(episode_id="again")
        assert first.observation.echoed_message == "ready" and state.episode_id == "again"


async def test_envharness_async_client_drives_an_openenv_server(openenv_server):
    async with AsyncEchoEnv(openenv_server.base_url) as env:
        await env.reset()
        assert (await env.step(EchoAction(message="four"))).observation.message_length == 4
