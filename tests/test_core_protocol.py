"""The wire, over real sockets: episodes on /ws and HTTP, and every kind of bad input
getting a structured error while the session and the server go on."""

from __future__ import annotations

import json
import socket
import threading
import time

import httpx
import pytest
from conftest import health, wait_until
from websockets.sync.client import connect

from envharness.core.client import AsyncEnvClient, EnvClient, EnvServerError
from envharness.core.launchers import LocalServer
from envharness.core.server import create_app
from envharness.envs.echo import AsyncEchoEnv, EchoAction, EchoEnv, EchoEnvironment, EchoObservation


def ws_url(server: LocalServer) -> str:
    return server.base_url.replace("http://", "ws://") + "/ws"


def ask(ws, message) -> dict:
    ws.send(message if isinstance(message, (str, bytes)) else json.dumps(message))
    return json.loads(ws.recv(timeout=60))


# -- episodes -------------------------------------------------------------------------
def test_sync_client_runs_an_episode(echo_server):
    with EchoEnv(echo_server.base_url) as env:
        first = env.reset(seed=7, episode_id="ep-1")
        assert isinstance(first.observation, EchoObservation)
        assert (
            first.observation.echoed_message == "Echo environment ready!"
            and first.reward == 0.0
            and not first.done
        )
        result = env.step(EchoAction(message="hello"))
        assert result.observation.echoed_message == "hello" and result.observation.message_length == 5
        assert result.reward == pytest.approx(0.5) and result.metadata == {
            "original_message": "hello",
            "step": 1,
        }
        env.step(EchoAction(message="a much longer message"))
        state = env.state()
        assert state.episode_id == "ep-1" and state.step_count == 2


async def test_async_client_runs_concurrent_episodes(echo_server):
    import asyncio

    async def episode(i: int) -> list[float]:
        async with AsyncEchoEnv(echo_server.base_url) as env:
            await env.reset(episode_id=f"ep-{i}")
            rewards = [(await env.step(EchoAction(message="x" * (i + k)))).reward for k in range(3)]
            assert (await env.state()).episode_id == f"ep-{i}"
            return rewards

    results = await asyncio.gather(*(episode(i) for i in range(8)))
    assert results == [[pytest.approx(min((i + k) * 0.1, 1.0)) for k in range(3)] for i in range(8)]


def test_generic_client_reads_any_observation(echo_server):
    with EnvClient(echo_server.base_url) as env:  # no types: a dict action, every field kept
        env.reset()
        result = env.step({"message": "abc"})
        assert result.observation.echoed_message == "abc" and result.observation.message_length == 3


def test_episode_ends_with_done_after_max_steps():
    with LocalServer("echo", max_steps=2) as server, EchoEnv(server.base_url) as env:
        env.reset()
        assert not env.step(EchoAction(message="a")).done
        last = env.step(EchoAction(message="b"))
        assert last.done and last.observation.done


def test_http_endpoints(echo_server):
    with httpx.Client(base_url=echo_server.base_url) as http:
        reset = http.post("/reset", json={"seed": 1}).json()
        assert reset == {
            "observation": {"metadata": {}, "echoed_message": "Echo environment ready!", "message_length": 0},
            "reward": 0.0,
            "done": False,
        }
        assert http.post("/reset").status_code == 200  # no body: defaults
        step = http.post("/step", json={"action": {"message": "hi"}}).json()
        assert (
            step["observation"]["echoed_message"] == "hi"
            and step["reward"] == pytest.approx(0.2)
            and step["done"] is False
        )
        assert step["metadata"] == {"original_message": "hi", "step": 1}
        assert http.get("/state").json() == {
            "episode_id": None,
            "step_count": 0,
        }  # stateless: a fresh environment
        schema = http.get("/schema").json()
        assert set(schema) == {"action", "observation", "state"}
        assert (
            schema["action"]["required"] == ["message"]
            and "echoed_message" in schema["observation"]["properties"]
        )
        assert http.get("/metadata").json()["name"] == "echo"
        body = http.get("/health").json()
        assert body["status"] == "healthy" and body["env"] == "echo" and body["live_environments"] == 0


# -- bad input ------------------------------------------------------------------------
def test_bad_websocket_frames_get_structured_errors_and_the_session_goes_on(echo_server):
    with connect(ws_url(echo_server)) as ws:
        assert ask(ws, {"type": "reset", "data": {}})["type"] == "observation"
        cases = [
            ("{not json", "INVALID_JSON", "Invalid JSON"),
            ("[1, 2]", "INVALID_JSON", "Expected a JSON object"),
            ({"type": "jump", "data": {}}, "UNKNOWN_TYPE", "Unknown message type: 'jump'"),
            ({"data": {}}, "UNKNOWN_TYPE", "Unknown message type: None"),
            (
                {"type": "step", "data": {"mesage": "typo"}},
                "VALIDATION_ERROR",
                "message: Field required; mesage: Extra inputs are not permitted",
            ),
            (
                {"type": "step", "data": {"message": 42}},
                "VALIDATION_ERROR",
                "message: Input should be a valid string",
            ),
            ({"type": "step"}, "VALIDATION_ERROR", "Invalid step message: data: Field required"),
            (
                {"type": "reset", "data": {"seed": -1}},
                "VALIDATION_ERROR",
                "seed: Input should be greater than or equal to 0",
            ),
            (
                {"type": "reset", "data": {"task": "x"}},
                "VALIDATION_ERROR",  # the client's mistake (InvalidOptions), not the environment's
                "echo takes no reset options, got: task",
            ),
            (b'{"type": "state"', "INVALID_JSON", "Invalid JSON"),  # a binary frame
        ]
        for frame, code, words in cases:
            reply = ask(ws, frame)
            assert reply["type"] == "error" and reply["data"]["code"] == code, (frame, reply)
            assert words in reply["data"]["message"], (frame, reply)
        step = ask(ws, {"type": "step", "data": {"message": "still here"}})
        assert step["type"] == "observation" and step["data"]["observation"]["echoed_message"] == "still here"
        assert ask(ws, {"type": "state"})["data"]["step_count"] == 1


def test_step_before_reset(echo_server):
    with connect(ws_url(echo_server)) as ws:
        reply = ask(ws, {"type": "step", "data": {"message": "early"}})
        assert reply["data"]["code"] == "NOT_RESET" and "Call reset before step" in reply["data"]["message"]
        assert ask(ws, {"type": "reset"})["type"] == "observation"
        assert ask(ws, {"type": "step", "data": {"message": "now"}})["type"] == "observation"
    with EchoEnv(echo_server.base_url) as env, pytest.raises(EnvServerError) as info:
        env.step(EchoAction(message="early"))
    assert info.value.code == "NOT_RESET"


def test_oversized_messages_are_refused_and_the_session_goes_on():
    with LocalServer("echo", max_message_bytes=1000) as server:
        with connect(ws_url(server), max_size=None) as ws:
            ask(ws, {"type": "reset"})
            reply = ask(ws, {"type": "step", "data": {"message": "x" * 2000}})
            assert (
                reply["data"]["code"] == "MESSAGE_TOO_LARGE"
                and "exceeds the limit of 1000 bytes" in reply["data"]["message"]
            )
            assert ask(ws, {"type": "step", "data": {"message": "small"}})["type"] == "observation"
        big = httpx.post(f"{server.base_url}/step", json={"action": {"message": "x" * 2000}})
        assert big.status_code == 413 and big.json()["detail"]["code"] == "MESSAGE_TOO_LARGE"
        assert health(server)["live_environments"] == 0


def test_bad_http_bodies(echo_server):
    with httpx.Client(base_url=echo_server.base_url) as http:
        bad_json = http.post("/step", content=b"{oops", headers={"content-type": "application/json"})
        assert bad_json.status_code == 400 and bad_json.json()["detail"]["code"] == "INVALID_JSON"
        no_action = http.post("/step", json={"message": "hi"})
        assert (
            no_action.status_code == 422 and "action: Field required" in no_action.json()["detail"]["message"]
        )
        bad_action = http.post("/step", json={"action": {"message": ["not", "a", "string"]}})
        detail = bad_action.json()["detail"]
        assert bad_action.status_code == 422 and detail["code"] == "VALIDATION_ERROR"
        assert detail["errors"][0]["loc"] == ["message"]
        bad_seed = http.post("/reset", json={"seed": "abc"})
        assert bad_seed.status_code == 422 and "seed" in bad_seed.json()["detail"]["message"]
        assert http.get("/health").json()["live_environments"] == 0


class FailingEcho(EchoEnvironment):
    """Raises on a magic message, like an environment with a bug."""

    def step(self, action: EchoAction) -> EchoObservation:
        if action.message == "boom":
            raise RuntimeError("the environment broke")
        return super().step(action)


def test_environment_exceptions_become_execution_errors():
    with LocalServer(create_app(FailingEcho)) as server, EchoEnv(server.base_url) as env:
        env.reset()
        with pytest.raises(EnvServerError) as info:
            env.step(EchoAction(message="boom"))
        assert (
            info.value.code == "EXECUTION_ERROR"
            and "RuntimeError: the environment broke" in info.value.message
        )
        assert env.step(EchoAction(message="fine")).observation.echoed_message == "fine"


class SlowEcho(EchoEnvironment):
    """Each step takes a while (far longer than a reset, even on a busy machine); records whether
    it started, finished and whether it was closed."""

    steps_started = 0
    steps_finished = 0
    closed = 0

    def step(self, action: EchoAction) -> EchoObservation:
        type(self).steps_started += 1
        time.sleep(2.0)
        type(self).steps_finished += 1
        return super().step(action)

    def close(self) -> None:
        type(self).closed += 1


def test_client_vanishing_mid_step_frees_the_session():
    SlowEcho.steps_started = SlowEcho.steps_finished = SlowEcho.closed = 0
    with LocalServer(create_app(SlowEcho)) as server:
        ws = connect(ws_url(server))
        ask(ws, {"type": "reset"})
        ws.send(json.dumps({"type": "step", "data": {"message": "bye"}}))
        wait_until(lambda: SlowEcho.steps_started == 1)  # the step is running in the server now
        ws.socket.shutdown(socket.SHUT_RDWR)  # vanish without a close handshake
        ws.socket.close()
        wait_until(lambda: SlowEcho.closed == 1 and health(server)["live_environments"] == 0)
        assert SlowEcho.steps_finished == 1 and health(server)["active_sessions"] == 0
        with EchoEnv(server.base_url) as env:  # the server goes on
            env.reset()
            assert env.step(EchoAction(message="next")).observation.echoed_message == "next"


def test_half_open_connection_is_found_by_keepalive_pings():
    """A peer that stops answering (no FIN, no pong) is dropped by the server's pings."""
    with LocalServer(create_app(EchoEnvironment, idle_timeout_s=None), ping_interval_s=0.3) as server:
        port = int(server.base_url.rsplit(":", 1)[1])
        raw = socket.create_connection(("127.0.0.1", port))
        raw.sendall(
            b"GET /ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )
        assert b"101 Switching Protocols" in raw.recv(4096)
        wait_until(lambda: health(server)["active_sessions"] == 1)
        # never read again, never answer a ping: the server must give up on its own
        wait_until(
            lambda: health(server)["active_sessions"] == 0 and health(server)["live_environments"] == 0
        )
        raw.close()


def test_many_frames_in_flight_are_answered_in_order(echo_server):
    """Calls into one session are serialized: replies come back in request order."""
    with connect(ws_url(echo_server)) as ws:
        ask(ws, {"type": "reset"})
        for i in range(20):
            ws.send(json.dumps({"type": "step", "data": {"message": f"m{i}"}}))
        replies = [json.loads(ws.recv(timeout=60)) for _ in range(20)]
        assert [r["data"]["observation"]["echoed_message"] for r in replies] == [f"m{i}" for i in range(20)]
        assert [r["data"]["observation"]["metadata"]["step"] for r in replies] == list(range(1, 21))


def test_step_and_state_is_one_exchange_with_the_answers_of_two_calls(echo_server):
    """The pipelined pair answers as `step` then `state` would; a refused step raises, and the
    state reply sent with it does not pair with the next call."""
    with EchoEnv(echo_server.base_url) as env:
        with pytest.raises(EnvServerError) as info:
            env.step_and_state(EchoAction(message="early"))
        assert info.value.code == "NOT_RESET"
        first, state = env.reset_and_state(episode_id="ep-9")
        assert first.observation.echoed_message == "Echo environment ready!"
        assert state.episode_id == "ep-9" and state.step_count == 0
        result, state = env.step_and_state(EchoAction(message="hello"))
        assert result.observation.echoed_message == "hello" and result.reward == pytest.approx(0.5)
        assert state.step_count == 1
        assert env.step(EchoAction(message="again")).observation.echoed_message == "again"
        assert env.state().step_count == 2


async def test_message_timeout_on_the_client():
    with LocalServer(create_app(SlowEcho)) as server:
        async with AsyncEnvClient(
            server.base_url, message_timeout_s=1.0
        ) as env:  # reset: well under; step: 2 s
            await env.reset()
            with pytest.raises(TimeoutError, match="No reply to 'step'"):
                await env.step({"message": "slow"})
            # the late reply is not paired with the next request: a fresh session answers it
            result = await env.reset()
            assert result.observation.echoed_message == "Echo environment ready!"
        wait_until(lambda: health(server)["live_environments"] == 0)


def test_connect_errors_are_clear():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with (
        EchoEnv(f"http://127.0.0.1:{port}", connect_timeout_s=2) as env,
        pytest.raises(ConnectionError, match="Could not connect"),
    ):
        env.reset()


def test_threads_are_not_left_behind_by_sync_clients(echo_server):
    with EchoEnv(
        echo_server.base_url
    ) as env:  # the sync clients' one shared loop thread starts at first use, and stays
        env.reset()
    before = threading.active_count()
    for _ in range(5):
        with EchoEnv(echo_server.base_url) as env:
            env.reset()
    wait_until(lambda: threading.active_count() <= before)
