"""The environment server a training run starts for itself: a process of its own when a new
process can serve the environment (its Python work then never holds the interpreter lock that
the decoding thread and the rollout loop need), a thread of the run's process when only this
program knows the environment (one it registered itself)."""

from __future__ import annotations

import dataclasses
import threading

import pytest

from envharness.core import launchers
from envharness.core.registry import ENVIRONMENTS, get_spec, register_environment, servable_elsewhere
from envharness.envs.echo.models import EchoAction
from envharness.integrations.trl.servers import env_clients


def _server_threads() -> set[str]:
    """The in-process servers' threads now (other tests' servers may be running too)."""
    return {t.name for t in threading.enumerate() if t.name.startswith("envharness-server-")}


def _play_once(clients) -> str:
    client = clients()
    try:
        client.reset()
        return client.step(EchoAction(message="hello")).observation.echoed_message
    finally:
        client.close()


@pytest.fixture
def echo_copy():
    """The echo environment registered by this program under a name of its own."""
    spec = register_environment(dataclasses.replace(get_spec("echo"), name="echo-registered-here"))
    try:
        yield spec.name
    finally:
        ENVIRONMENTS.pop(spec.name, None)


def test_what_a_new_process_can_serve():
    assert servable_elsewhere("echo") and servable_elsewhere("textarena")
    assert servable_elsewhere("envharness.envs.echo.environment:EchoEnvironment")  # importable there
    assert not servable_elsewhere("not-registered-anywhere")


def test_a_built_in_environment_is_served_by_a_process_of_its_own():
    before, threads = set(launchers._LIVE), _server_threads()
    with env_clients("echo") as clients:
        started = set(launchers._LIVE) - before
        assert len(started) == 1 and _server_threads() == threads
        [server] = started
        assert server.process.poll() is None
        assert _play_once(clients) == "hello"
    assert server.process.poll() is not None  # stopped with the run
    assert not set(launchers._LIVE) - before


def test_an_environment_this_program_registered_is_served_by_a_thread(echo_copy):
    assert not servable_elsewhere(echo_copy)
    before, threads = set(launchers._LIVE), _server_threads()
    with env_clients(echo_copy) as clients:
        assert not set(launchers._LIVE) - before and len(_server_threads() - threads) == 1
        assert _play_once(clients) == "hello"
    assert _server_threads() <= threads


def test_a_replaced_built_in_is_served_by_a_thread():
    original = ENVIRONMENTS["echo"]
    register_environment(dataclasses.replace(original, summary="replaced here"), replace=True)
    try:
        assert not servable_elsewhere("echo")
    finally:
        register_environment(original, replace=True)
    assert servable_elsewhere("echo")
