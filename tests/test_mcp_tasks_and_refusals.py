"""The generic MCP tools of a user's environment (`tests/ledger_env.py`), with the `mcp` SDK's
client over a real server on loopback: `reset`'s schema lists `task` (the environment's tasks) and
`seed`; the tasks are an MCP resource; a refused step, which counts, is not an MCP error
(docs/mcp_and_web.md)."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from envharness.core.launchers import LocalServer

TESTS = Path(__file__).resolve().parent
pytestmark = pytest.mark.timeout(300)


@pytest.fixture(autouse=True)
def importable(monkeypatch):
    monkeypatch.syspath_prepend(str(TESTS))
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join([str(TESTS), *filter(None, [os.environ.get("PYTHONPATH")])])
    )


def test_reset_lists_task_and_seed_and_the_tasks_are_a_resource():
    async def main(base_url: str) -> None:
        async with (
            streamable_http_client(f"{base_url}/mcp") as (read, write, _),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            tools = {t.name: t for t in (await session.list_tools()).tools}
            properties = tools["reset"].inputSchema["properties"]
            assert properties["task"]["enum"] == ["ledger-10", "ledger-50"]
            assert properties["seed"]["type"] == "integer"
            resources = (await session.list_resources()).resources
            assert [str(r.uri) for r in resources] == ["envharness://tasks"]
            listing = await session.read_resource("envharness://tasks")
            assert json.loads(listing.contents[0].text)["tasks"] == ["ledger-10", "ledger-50"]
            first = await session.call_tool("reset", {"task": "ledger-50", "seed": 2})
            assert not first.isError and "target" in first.structuredContent["observation"]["text"]

    with LocalServer("ledger_env:SPEC") as server:
        asyncio.run(main(server.base_url))


def test_a_refused_step_counts_and_is_not_an_mcp_error():
    """docs/mcp_and_web.md: `isError` is for calls that did nothing; a refusal cost a step."""

    async def main(base_url: str) -> None:
        async with (
            streamable_http_client(f"{base_url}/mcp") as (read, write, _),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            await session.call_tool("reset", {"task": "ledger-10", "seed": 1})
            refused = await session.call_tool("step", {"amount": 0})
            assert not refused.isError, refused
            assert refused.structuredContent["last_action_error"].startswith("an amount of 0")
            assert refused.structuredContent["step"] == 1 and refused.structuredContent["done"] is False
            assert "the step counted" in refused.content[0].text
            state = await session.call_tool("state", {})
            assert state.structuredContent["step_count"] == 1
            nothing = await session.call_tool("step", {"amount": "many"})  # outside the schema: did nothing
            assert nothing.isError
            moved = await session.call_tool("step", {"amount": 1})
            assert not moved.isError and moved.structuredContent["observation"]["text"].startswith(
                "balance 1;"
            )

    with LocalServer("ledger_env:SPEC") as server:
        asyncio.run(main(server.base_url))
