"""The echo environment itself (the template for new environments), in process."""

from __future__ import annotations

import pytest

from envharness.core.registry import make_factory
from envharness.envs.echo import EchoAction, EchoEnvironment, EchoObservation


def test_echo_episode():
    env = EchoEnvironment()
    first = env.reset(episode_id="e1")
    assert first == EchoObservation(
        echoed_message="Echo environment ready!", message_length=0, reward=0.0, done=False
    )
    obs = env.step(EchoAction(message="hi there"))
    assert (obs.echoed_message, obs.message_length, obs.done) == ("hi there", 8, False)
    assert obs.reward == pytest.approx(0.8) and obs.metadata == {"original_message": "hi there", "step": 1}
    assert env.step(EchoAction(message="x" * 50)).reward == 1.0  # capped
    assert env.state.episode_id == "e1" and env.state.step_count == 2
    env.reset()
    assert env.state.step_count == 0 and env.state.episode_id not in (None, "e1")


async def test_echo_async_api_and_max_steps():
    env = EchoEnvironment(max_steps=2)
    await env.reset_async()
    assert not (await env.step_async(EchoAction(message="a"))).done
    assert (await env.step_async(EchoAction(message="b"))).done
    assert (await env.state_async()).step_count == 2
    await env.close_async()


def test_echo_rejects_bad_options():
    with pytest.raises(ValueError, match="echo takes no reset options, got: task"):
        EchoEnvironment().reset(task="click-test")
    with pytest.raises(ValueError, match="max_steps must be at least 1"):
        EchoEnvironment(max_steps=0)
    with pytest.raises(ValueError, match="Bad options for echo"):
        make_factory("echo", colour="red")
    with pytest.raises(KeyError, match="Unknown environment 'nope'"):
        make_factory("nope")


def test_registry_accepts_module_paths():
    factory = make_factory("envharness.envs.echo.environment:EchoEnvironment", max_steps=1)
    env = factory()
    env.reset()
    assert env.step(EchoAction(message="m")).done
