"""Getting a server: `envharness serve` in a subprocess (from_local), Docker (a clear
error where no engine runs), Hugging Face Spaces, the in-process LocalServer."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import httpx
import pytest
from conftest import wait_until

from envharness.core.client import EnvServerError
from envharness.core.launchers import (
    DockerUnavailableError,
    LaunchError,
    LocalServer,
    hub_image,
    hub_url,
    launch_local,
)
from envharness.envs.echo import AsyncEchoEnv, EchoAction, EchoEnv


def test_from_local_starts_serve_and_stops_it_on_close():
    env = EchoEnv.from_local(max_steps=2, server_args=["--max-sessions", "3"])
    server = env.async_client._owned
    try:
        assert env.reset().observation.echoed_message == "Echo environment ready!"
        assert not env.step(EchoAction(message="one")).done
        assert env.step(EchoAction(message="two")).done  # --option max_steps=2 reached the env
        body = httpx.get(f"{env.base_url}/health").json()
        assert body["env"] == "echo" and body["max_sessions"] == 3 and body["active_sessions"] == 1
        assert env.base_url.startswith("http://127.0.0.1:")
    finally:
        env.close()
    assert server.process.wait(timeout=15) == 0  # SIGTERM -> graceful shutdown -> exit 0
    wait_until(lambda: server.output and "stopped;" in server.output[-1])
    assert server.output[-1] == "envharness serve: stopped; 1 session(s) closed, 0 environment(s) still open"


async def test_async_from_local_with_a_token():
    env = await AsyncEchoEnv.from_local("echo", token="tok-123")
    try:
        await env.reset()
        assert (await env.step(EchoAction(message="hey"))).reward == pytest.approx(0.3)
        assert httpx.get(f"{env.base_url}/metadata").status_code == 401  # the token reached the server
    finally:
        await env.close()


def test_serve_options_from_environment_variables():
    os.environ["ENVHARNESS_OPTION_MAX_STEPS"] = "1"
    try:
        server = launch_local("echo")
    finally:
        del os.environ["ENVHARNESS_OPTION_MAX_STEPS"]
    try:
        with EchoEnv(server.base_url) as env:
            env.reset()
            assert env.step(EchoAction(message="x")).done
    finally:
        server.stop()


def test_serve_refuses_bad_names_and_options_clearly():
    with pytest.raises(LaunchError, match="Unknown environment 'nope'"):
        launch_local("nope", startup_timeout_s=30)
    with pytest.raises(LaunchError, match="Bad options for echo"):
        launch_local("echo", options={"colour": "red"}, startup_timeout_s=30)
    cli = [sys.executable, "-c", "import sys; from envharness.cli import main; sys.exit(main())"]
    result = subprocess.run(
        [*cli, "serve", "echo", "--option", "novalue"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2 and "--option expects KEY=VALUE" in result.stderr


@pytest.mark.skipif(shutil.which("docker") is None, reason="the docker CLI is not installed")
def test_from_docker_image_says_clearly_when_no_engine_runs():
    if subprocess.run(["docker", "info"], capture_output=True, timeout=30).returncode == 0:
        pytest.skip("a Docker engine runs here; this test is about its absence")
    with pytest.raises(DockerUnavailableError, match=r"No Docker engine is reachable \(`docker info` failed"):
        EchoEnv.from_docker_image("echo-env:latest", env_vars={"A": "1"})
    with pytest.raises(DockerUnavailableError, match="from_local"):
        EchoEnv.from_hub("openenv/echo-env")


def test_hub_names():
    assert hub_url("openenv/echo_env") == "https://openenv-echo-env.hf.space"
    assert hub_image("Burtenshaw/BrowserGym_Env", "v2") == "registry.hf.space/burtenshaw-browsergym-env:v2"
    client = EchoEnv.from_hub("openenv/echo-env", use_docker=False)
    try:
        assert client.base_url == "https://openenv-echo-env.hf.space"
        assert client.async_client.ws_url == "wss://openenv-echo-env.hf.space/ws"
    finally:
        client.close()  # never connected: nothing leaves this machine


def test_local_server_from_a_name_with_settings():
    with LocalServer("echo", max_sessions=1, max_steps=1) as server, EchoEnv(server.base_url) as env:
        env.reset()
        assert env.step(EchoAction(message="z")).done
        with EchoEnv(server.base_url) as other, pytest.raises(EnvServerError, match="CAPACITY_REACHED"):
            other.reset()
    with pytest.raises(TypeError, match="only apply when LocalServer is given an environment name"):
        LocalServer(server.app, max_steps=3)
