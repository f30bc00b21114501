"""What an agent's MCP tools may choose about seats and seeds is the operator's call: a server
started with `--mcp-fixed seat,seed` (as `train --agent` starts its own) hides both from
`reset`'s schema and refuses them in words, however they are sent; a rollout's seed comes from the
URL the trainer gave the agent, and that rollout plays one episode. TextArena on a real server on
loopback, the `mcp` SDK's client."""

from __future__ import annotations

import asyncio

import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from envharness.core.launchers import LocalServer
from envharness.integrations.trl.servers import agent_env_url

pytestmark = pytest.mark.timeout(300)
FIXED = "fixed by this server's operator"


async def call(url: str, *calls: tuple[str, dict]) -> list:
    """One MCP session at `url`: each (tool, arguments) in turn; the reset tool's schema first."""
    async with streamable_http_client(url) as (read, write, _), ClientSession(read, write) as session:
        await session.initialize()
        tools = {t.name: t for t in (await session.list_tools()).tools}
        return [tools["reset"].inputSchema, *[await session.call_tool(n, a) for n, a in calls]]


def test_fixed_seat_and_seed_are_refused_however_sent_and_the_rollout_plays_its_seed():
    async def main(base: str) -> None:
        schema, seat, seed, smuggled, unseeded = await call(
            f"{base}/mcp",
            ("reset", {"task": "TicTacToe-v0", "opponent": "random", "seat": "1"}),
            ("reset", {"task": "GuessTheNumber-v0", "seed": 3}),
            ("reset", {"task": "GuessTheNumber-v0", "game_kwargs": {"seed": 3}}),
            ("reset", {"task": "GuessTheNumber-v0"}),
        )
        assert "seat" not in schema["properties"] and "seed" not in schema["properties"]
        assert "task" in schema["properties"]
        for refused, what in ((seat, "seat"), (seed, "seed"), (smuggled, "seed")):
            assert refused.isError and refused.content[0].text.startswith(
                f"VALIDATION_ERROR: {what}: {FIXED}"
            )
        assert not unseeded.isError  # the environment draws the seed
        _, first, again = await call(
            f"{base}/mcp?rollout=r1&seed=5",
            ("reset", {"task": "GuessTheNumber-v0"}),
            ("reset", {"task": "GuessTheNumber-v0"}),
        )
        assert not first.isError and first.structuredContent["seed"] == 5  # the trainer's seed
        assert again.isError and "plays one" in again.content[0].text  # no replay of the deal
        _, elsewhere = await call(f"{base}/mcp?rollout=r1&seed=5", ("reset", {"task": "GuessTheNumber-v0"}))
        assert elsewhere.isError  # not from another MCP session with the same tag either
        _, same = await call(
            f"{base}/mcp?rollout=r2&seed=6", ("reset", {"task": "GuessTheNumber-v0", "seed": 6})
        )
        assert not same.isError and same.structuredContent["seed"] == 6  # the rollout's own seed, said again

    with LocalServer("textarena", mcp_fixed="seat,seed") as server:
        asyncio.run(main(server.base_url))


def test_an_unfixed_server_still_lets_the_client_choose():
    async def main(base: str) -> None:
        schema, chosen = await call(f"{base}/mcp", ("reset", {"task": "GuessTheNumber-v0", "seed": 3}))
        assert "seed" in schema["properties"] and "seat" in schema["properties"]
        assert not chosen.isError and chosen.structuredContent["seed"] == 3

    with LocalServer("textarena") as server:
        asyncio.run(main(server.base_url))


def test_train_agents_server_fixes_seat_and_seed():
    """The server `train --agent` starts for its agent (a process of its own here)."""
    with agent_env_url("textarena", None, {}) as base:
        schema, seat = asyncio.run(
            call(f"{base}/mcp", ("reset", {"task": "TicTacToe-v0", "opponent": "random", "seat": "0"}))
        )
    assert "seat" not in schema["properties"] and "seed" not in schema["properties"]
    assert seat.isError and FIXED in seat.content[0].text
