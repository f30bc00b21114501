"""`StepEnvSessionAdapter` over a real echo server on loopback, with the sync and the async client."""

from __future__ import annotations

import pytest
from conftest import FourMethods

from envharness.core.launchers import LocalServer
from envharness.envs.echo.client import AsyncEchoEnv, EchoEnv
from envharness.envs.echo.models import EchoAction
from envharness.harness import (
    HarnessRunLimits,
    LLMResponse,
    ModelStepResult,
    ResourceSessionFactory,
    StepEnvSessionAdapter,
    ToolCall,
    run_coroutine_sync,
    run_episodes,
    tool_spec,
)

ECHO_TOOL = tool_spec("echo", "Echo a message back.", {"message": {"type": "string"}}, ["message"])


@pytest.fixture(scope="module")
def echo_url():
    with LocalServer("echo") as server:
        yield server.base_url


class EchoSessionFactory(ResourceSessionFactory):
    def __init__(self, make_client):
        self.make_client = make_client

    def create(self, task, seed=None, episode_id=None):
        return StepEnvSessionAdapter(
            self.make_client(),
            task=task,
            seed=seed,
            episode_id=episode_id,
            tool_specs=[ECHO_TOOL],
            action_builder=lambda name, args: EchoAction(message=args["message"]),
            initial_messages_builder=lambda result, task: [{"role": "user", "content": f"Say: {task}"}],
        )


def say(messages, tools, sampling):
    """Echo the task word, then repeat it doubled."""
    word = messages[0]["content"].removeprefix("Say: ")
    turn = sum(1 for m in messages if m["role"] == "assistant")
    text = word * (turn + 1)
    return ModelStepResult(
        response=LLMResponse(
            content=text, tool_calls=[ToolCall(id=f"c{turn}", name="echo", args={"message": text})]
        )
    )


@pytest.mark.parametrize("client", ["sync", "async", "four-methods"])
def test_echo_episodes_forward_the_env_reward(echo_url, client):
    make = {
        "sync": lambda: EchoEnv(base_url=echo_url),
        "async": lambda: AsyncEchoEnv(echo_url),
        "four-methods": lambda: FourMethods(echo_url),
    }[client]
    results = run_coroutine_sync(
        run_episodes(
            EchoSessionFactory(make),
            ["ab", "hello"],
            model_step=say,
            limits=HarnessRunLimits(max_turns=2),
            max_concurrency=2,
        )
    )
    assert [r.error for r in results] == [None, None]
    for word, r in zip(["ab", "hello"], results):
        observations = [e.result.data["observation"] for e in r.tool_trace]
        assert [o["echoed_message"] for o in observations] == [word, word * 2]
        # the env's own reward for the last step, forwarded by verify (echo: from the message length)
        assert r.env_reward == r.tool_trace[-1].result.metadata["reward"] == r.verify.env_reward
        assert r.verify.metrics["step_count"] == 2


def test_sync_session_works_without_the_runtime(echo_url):
    """OpenEnv-style direct use: reset happens in the constructor, methods are sync."""
    session = EchoSessionFactory(lambda: EchoEnv(base_url=echo_url)).create("hi")
    try:
        assert session.initial_messages() == [{"role": "user", "content": "Say: hi"}]
        result = session.call_tool("echo", {"message": "hey"})
        assert result.data["observation"]["echoed_message"] == "hey"
        with pytest.raises(KeyError, match="Unknown tool"):
            session.call_tool("shout", {})
        with pytest.raises(KeyError, match="Reserved"):
            session.call_tool("reset", {})
        assert session.verify([]).env_reward == result.metadata["reward"]
    finally:
        session.close()
        session.close()  # twice is fine


def test_async_client_session_refuses_sync_calls_clearly(echo_url):
    session = EchoSessionFactory(lambda: AsyncEchoEnv(echo_url)).create("hi")
    with pytest.raises(TypeError, match="async client"):
        session.initial_messages()


def test_reserved_tool_names_are_refused(echo_url):
    with pytest.raises(ValueError, match="reserved"):
        StepEnvSessionAdapter(
            AsyncEchoEnv(echo_url),
            tool_specs=[tool_spec("step", "no")],
            action_builder=lambda n, a: None,
            initial_messages_builder=lambda r, t: [],
        )


def test_a_session_that_cannot_be_made_closes_its_client():
    """Whatever fails while wrapping a client (an unknown task, a reset the server refused), the
    factory closes that client: no server session is left for nobody to close."""
    import asyncio

    from envharness.harness.session import ClientSessionFactory

    class Client:
        def __init__(self, is_async: bool):
            self.closed = 0
            if is_async:

                async def reset(**kw):  # noqa: ANN202
                    return None

                async def close():  # noqa: ANN202
                    self.closed += 1

                self.reset, self.close = reset, close
            else:
                self.reset = lambda **kw: None
                self.close = lambda: setattr(self, "closed", self.closed + 1)

    class Refusing(ClientSessionFactory):
        def session_for(self, client, task, seed, episode_id):
            raise ValueError(f"unknown task {task!r}")

    for is_async in (False, True):
        clients = []
        factory = Refusing(
            lambda clients=clients, is_async=is_async: clients.append(Client(is_async)) or clients[-1]
        )
        with pytest.raises(ValueError, match="unknown task 'nope'"):
            if is_async:
                asyncio.run(factory.create_async("nope"))
            else:
                factory.create("nope")
        assert clients[0].closed == 1
