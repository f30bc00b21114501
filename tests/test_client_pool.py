"""`ClientPool` over a real echo server on loopback: its sync leases and its async leases (what
the harness runtime takes), reusing server sessions across episodes."""

from __future__ import annotations

import asyncio

import pytest
from conftest import FourMethods, health

from envharness.core.client_pool import ClientPool
from envharness.core.launchers import LocalServer
from envharness.envs.echo import EchoAction, EchoEnv
from envharness.harness import StepEnvSessionAdapter, tool_spec
from envharness.harness.session import ClientSessionFactory


@pytest.fixture(scope="module")
def server():
    with LocalServer("echo") as running:
        yield running


async def test_async_leases_reuse_one_session_and_answer_as_the_client_does(server):
    pool = ClientPool(lambda: EchoEnv(base_url=server.base_url))
    try:
        for episode in range(3):  # back to back: one client, one server session
            lease = pool.async_lease()
            first, state = await lease.reset_and_state(episode_id=f"ep-{episode}")
            assert first.observation.echoed_message == "Echo environment ready!"
            assert state.episode_id == f"ep-{episode}" and state.step_count == 0
            result, state = await lease.step_and_state(EchoAction(message="hi"))
            assert result.observation.echoed_message == "hi" and state.step_count == 1
            assert (await lease.step(EchoAction(message="again"))).observation.echoed_message == "again"
            assert (await lease.state()).step_count == 2
            await lease.close()
        assert len(pool._all) == 1 and health(server)["live_environments"] == 1
        many = [pool.async_lease() for _ in range(4)]  # at once: a client each
        await asyncio.gather(*(lease.reset() for lease in many))
        assert len(pool._all) == 4
        for lease in many:
            await lease.close()
    finally:
        pool.close()


async def test_a_pooled_client_that_died_is_replaced_at_the_next_reset(server):
    pool = ClientPool(lambda: EchoEnv(base_url=server.base_url))
    try:
        lease = pool.async_lease()
        await lease.reset()
        await lease.close()
        (dead,) = pool._all
        dead.close()  # its loop and its connection are gone
        lease = pool.async_lease()
        result = await lease.reset()
        assert result.observation.echoed_message == "Echo environment ready!"
        assert pool._all != [dead]
        with pytest.raises(RuntimeError, match="reset\\(\\) first"):
            await pool.async_lease().step(EchoAction(message="x"))
    finally:
        pool.close()


async def test_sessions_made_on_an_event_loop_take_the_async_lease(server):
    echo = tool_spec("echo", "Echo a message back.", {"message": {"type": "string"}}, ["message"])

    class Factory(ClientSessionFactory):
        def session_for(self, client, task, seed, episode_id):
            return StepEnvSessionAdapter(
                client,
                task=task,
                tool_specs=[echo],
                action_builder=lambda name, args: EchoAction(message=args["message"]),
                initial_messages_builder=lambda result, task: [{"role": "user", "content": "go"}],
            )

    for make in (lambda: EchoEnv(base_url=server.base_url), lambda: FourMethods(server.base_url)):
        pool = ClientPool(make)
        try:
            session = await Factory(pool).create_async(task="t")
            assert await session.initial_messages_async() == [{"role": "user", "content": "go"}]
            result = await session.call_tool_async("echo", {"message": "hey"})
            assert result.data["observation"]["echoed_message"] == "hey"
            assert (await session.verify_async([])).metrics["step_count"] == 1
            await session.close_async()
            assert pool._free == pool._all  # given back for the next episode
        finally:
            pool.close()
