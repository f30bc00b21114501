"""Sessions over real sockets: nothing left behind, capacity, idle timeout, token auth,
one-session environments, graceful shutdown."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import httpx
import pytest
from conftest import health, server_tasks, wait_until
from websockets.sync.client import connect

from envharness.core.client import EnvServerError
from envharness.core.launchers import LocalServer
from envharness.core.server import create_app
from envharness.envs.echo import AsyncEchoEnv, EchoAction, EchoEnv, EchoEnvironment


class CountingEcho(EchoEnvironment):
    """Echo that counts its live instances (created minus closed)."""

    live = 0

    def __init__(self) -> None:
        super().__init__()
        type(self).live += 1
        self._closed = False

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            type(self).live -= 1


async def test_200_sessions_leave_nothing_behind():
    CountingEcho.live = 0
    with LocalServer(create_app(CountingEcho, max_sessions=64)) as server:
        with EchoEnv(server.base_url) as warm:  # warm up lazily created server state
            warm.reset()
        wait_until(lambda: health(server)["active_sessions"] == 0)
        wait_until(lambda: not server.server.server_state.connections)
        tasks_before = server_tasks(server)  # uvicorn's own, the lifespan, the idle reaper
        assert len(tasks_before) == 3

        async def session(i: int) -> float:
            async with AsyncEchoEnv(server.base_url) as env:
                await env.reset()
                return (await env.step(EchoAction(message="x" * (i % 12)))).reward

        rewards = []
        for wave in range(5):  # 5 waves of 40 concurrent sessions
            rewards += await asyncio.gather(*(session(wave * 40 + i) for i in range(40)))
        assert rewards == [pytest.approx(min((i % 12) * 0.1, 1.0)) for i in range(200)]

        wait_until(lambda: health(server)["active_sessions"] == 0)
        body = health(server)
        assert body["live_environments"] == 0 and CountingEcho.live == 0
        assert body["sessions_opened"] == body["sessions_closed"] == 201
        wait_until(lambda: not server.server.server_state.connections)  # sockets closed
        wait_until(lambda: server_tasks(server) == tasks_before)  # no handler task left


def test_capacity_reached_then_freed():
    with LocalServer("echo", max_sessions=2) as server:
        first, second, third = (EchoEnv(server.base_url) for _ in range(3))
        first.reset(), second.reset()
        with pytest.raises(EnvServerError) as info:
            third.reset()
        assert info.value.code == "CAPACITY_REACHED"
        assert (
            "2 concurrent session(s) allowed" in info.value.message and info.value.data["max_sessions"] == 2
        )
        refused = httpx.post(f"{server.base_url}/reset", json={})
        assert refused.status_code == 503 and refused.json()["detail"]["code"] == "CAPACITY_REACHED"
        assert first.step(EchoAction(message="still served")).observation.echoed_message == "still served"
        first.close()
        wait_until(lambda: health(server)["active_sessions"] == 1)
        assert third.reset().observation.echoed_message == "Echo environment ready!"  # reconnects
        second.close(), third.close()
        wait_until(lambda: health(server)["live_environments"] == 0)


class SoloEcho(EchoEnvironment):
    supports_concurrent_sessions = False


def test_environment_without_concurrency_gets_one_session():
    with LocalServer(create_app(SoloEcho, max_sessions=8)) as server:
        assert health(server)["max_sessions"] == 1
        with EchoEnv(server.base_url) as one, EchoEnv(server.base_url) as two:
            one.reset()
            with pytest.raises(EnvServerError, match="CAPACITY_REACHED"):
                two.reset()


def test_idle_timeout_frees_a_silent_session():
    CountingEcho.live = 0
    # 2 s: the health check right after reset must come before the session times out, even on a busy machine
    with LocalServer(create_app(CountingEcho, idle_timeout_s=2.0)) as server, EchoEnv(server.base_url) as env:
        env.reset()
        assert health(server)["active_sessions"] == 1 and CountingEcho.live == 1
        wait_until(lambda: health(server)["active_sessions"] == 0)
        assert health(server)["live_environments"] == 0 and CountingEcho.live == 0
        with pytest.raises(EnvServerError) as info:  # the server said why before closing
            env.step(EchoAction(message="too late"))
        assert info.value.code == "IDLE_TIMEOUT"
        assert env.reset().observation.echoed_message == "Echo environment ready!"  # a new session


class SlowStepEcho(EchoEnvironment):
    def step(self, action: EchoAction):
        time.sleep(3.0)
        return super().step(action)


def test_a_step_longer_than_the_idle_timeout_is_not_cut():
    """The idle clock runs between calls, not during them."""
    with LocalServer(create_app(SlowStepEcho, idle_timeout_s=1.0)) as server, EchoEnv(server.base_url) as env:
        env.reset()
        assert env.step(EchoAction(message="slow")).observation.echoed_message == "slow"
        assert env.state().step_count == 1
        wait_until(lambda: health(server)["active_sessions"] == 0)  # and silence still ends it


def test_token_protects_every_endpoint():
    token = "s3cret-token"
    with LocalServer("echo", token=token) as server:
        url = server.base_url
        for method, path in [
            ("GET", "/schema"),
            ("GET", "/metadata"),
            ("GET", "/state"),
            ("POST", "/reset"),
            ("POST", "/step"),
            ("GET", "/docs"),
            ("GET", "/openapi.json"),
        ]:
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": token}):
                reply = httpx.request(method, url + path, headers=headers)
                assert reply.status_code in (401, 404), (path, headers, reply.status_code)
                if reply.status_code == 401:
                    assert reply.json()["detail"]["code"] == "UNAUTHORIZED"
        full = httpx.get(url + "/health", headers={"Authorization": f"Bearer {token}"})
        assert full.status_code == 200 and full.json()["max_sessions"] == 64
        for headers in ({}, {"Authorization": "Bearer wrong"}):  # open to probes, and it tells them nothing
            assert httpx.get(url + "/health", headers=headers).json() == {"status": "healthy"}
            assert httpx.get(url + "/ready", headers=headers).json() == {"status": "ready"}

        with EchoEnv(url) as anonymous, pytest.raises(EnvServerError) as info:
            anonymous.reset()
        assert info.value.code == "UNAUTHORIZED"
        with EchoEnv(url, token="wrong") as wrong, pytest.raises(EnvServerError, match="UNAUTHORIZED"):
            wrong.reset()
        with EchoEnv(url, token=token) as env:
            env.reset()
            assert env.step(EchoAction(message="ok")).reward == pytest.approx(0.2)
        with connect(url.replace("http", "ws") + f"/ws?token={token}") as ws:  # browsers cannot set headers
            ws.send(json.dumps({"type": "reset"}))
            assert json.loads(ws.recv(timeout=60))["type"] == "observation"
        wait_until(
            lambda: (
                httpx.get(url + "/health", headers={"Authorization": f"Bearer {token}"}).json()[
                    "active_sessions"
                ]
                == 0
            )
        )


class ClosingFactory:
    """A factory object with `aclose()`, like the browser's (which stops Chromium)."""

    def __init__(self) -> None:
        self.made: list[CountingEcho] = []
        self.aclosed = False

    def __call__(self) -> CountingEcho:
        self.made.append(CountingEcho())
        return self.made[-1]

    async def aclose(self) -> None:
        self.aclosed = True


def test_graceful_shutdown_closes_every_environment_and_the_factory():
    CountingEcho.live = 0
    factory = ClosingFactory()
    server = LocalServer(create_app(factory, idle_timeout_s=None))
    clients = [EchoEnv(server.base_url) for _ in range(3)]
    try:
        for client in clients:
            client.reset()
        assert CountingEcho.live == 3 and not factory.aclosed
        server.close()
        assert CountingEcho.live == 0 and all(env._closed for env in factory.made)
        assert factory.aclosed
        with pytest.raises((EnvServerError, ConnectionError)):
            clients[0].step(EchoAction(message="after shutdown"))
    finally:
        for client in clients:
            client.close()


class RendezvousEcho(EchoEnvironment):
    """Steps meet at a barrier: they finish only if two sessions step at the same time.
    Within a session, it records how many of its own calls overlap."""

    barrier = threading.Barrier(2, timeout=60)

    def __init__(self) -> None:
        super().__init__()
        self.inside, self.max_inside = 0, 0

    def step(self, action: EchoAction):
        self.inside += 1
        self.max_inside = max(self.max_inside, self.inside)
        try:
            if action.message == "meet":
                self.barrier.wait()
            else:
                time.sleep(0.01)
            return super().step(action)
        finally:
            self.inside -= 1


async def test_sessions_run_concurrently_and_calls_into_one_are_serialized():
    made: list[RendezvousEcho] = []

    def factory() -> RendezvousEcho:
        made.append(RendezvousEcho())
        return made[-1]

    with LocalServer(create_app(factory)) as server:
        async with AsyncEchoEnv(server.base_url) as a, AsyncEchoEnv(server.base_url) as b:
            await asyncio.gather(a.reset(), b.reset())
            results = await asyncio.gather(
                a.step(EchoAction(message="meet")), b.step(EchoAction(message="meet"))
            )
            assert [r.observation.echoed_message for r in results] == ["meet", "meet"]  # no barrier timeout
        with connect(
            server.base_url.replace("http", "ws") + "/ws"
        ) as ws:  # pipeline 10 steps into one session
            ws.send(json.dumps({"type": "reset"}))
            ws.recv(timeout=60)
            for i in range(10):
                ws.send(json.dumps({"type": "step", "data": {"message": f"s{i}"}}))
            assert all(json.loads(ws.recv(timeout=60))["type"] == "observation" for _ in range(10))
        assert made[-1].max_inside == 1 and made[-1].state.step_count == 10


class HangingStepEcho(EchoEnvironment):
    """A step that never ends; `entered` is set once a step is in flight."""

    entered = threading.Event()

    async def step_async(self, action: EchoAction):
        type(self).entered.set()
        await asyncio.sleep(600)


def test_stopping_with_a_step_in_flight_tells_its_client_and_does_not_wait_for_the_step():
    """uvicorn alone waits its graceful timeout (10 s) for a connection whose step hangs, then
    cuts it without a word; the server closes its sessions first, so the client hears why."""
    CountingEcho.live = 0
    HangingStepEcho.entered = threading.Event()
    server = LocalServer(create_app(HangingStepEcho, idle_timeout_s=None))
    try:
        with connect(server.base_url.replace("http", "ws") + "/ws") as ws:
            ws.send(json.dumps({"type": "reset"}))
            assert json.loads(ws.recv(timeout=60))["type"] == "observation"
            ws.send(json.dumps({"type": "step", "data": {"message": "hang"}}))
            assert HangingStepEcho.entered.wait(60)  # the step is in flight
            stopping = threading.Thread(target=server.close)
            stopping.start()
            reply = json.loads(ws.recv(timeout=60))
            assert reply["type"] == "error" and reply["data"]["code"] == "SHUTTING_DOWN", reply
            stopping.join(60)
            assert not stopping.is_alive()
    finally:
        server.close()


def test_a_client_gone_mid_step_ends_the_step_and_frees_its_session():
    """A client that times out on a hung step and goes away takes its session with it now,
    not when the step would have returned."""
    CountingEcho.live = 0

    entered = threading.Event()

    class HangingCountingEcho(CountingEcho):
        async def step_async(self, action: EchoAction):
            entered.set()
            await asyncio.sleep(600)

    with LocalServer(create_app(HangingCountingEcho, idle_timeout_s=None, max_sessions=1)) as server:
        ws = connect(server.base_url.replace("http", "ws") + "/ws")
        ws.send(json.dumps({"type": "reset"}))
        assert json.loads(ws.recv(timeout=60))["type"] == "observation"
        ws.send(json.dumps({"type": "step", "data": {"message": "hang"}}))
        assert entered.wait(60)  # the step is in flight
        ws.close()
        wait_until(lambda: health(server)["active_sessions"] == 0 and CountingEcho.live == 0)
        with EchoEnv(server.base_url) as env:  # the one session the server allows is free again
            assert env.reset().observation.echoed_message == "Echo environment ready!"
