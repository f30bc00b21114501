"""MCP for real: the `mcp` SDK's own client (streamable HTTP at /mcp and stdio through
`envharness mcp`), OpenEnv's `MCPToolClient`, and `MCPHarnessAdapter` through an MCP server,
each playing MiniWoB's click-test to reward 1 on a fixed seed in real Chromium."""

from __future__ import annotations

import asyncio
import os
import sys
import uuid
from pathlib import Path

import httpx
import pytest
from conftest import health, wait_until
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from envharness.core.launchers import LocalServer
from envharness.envs.browsergym.action_text import ACTION_TOOLS, build_browsergym_action_tool_call
from envharness.envs.browsergym.solutions import next_action
from envharness.harness import BatchingModelStep, HarnessRunLimits, MCPHarnessAdapter, run_episodes
from envharness.harness.mcp_session import MCPSessionFactory
from envharness.models.scripted import ScriptedBackend

SEED = 7
CLI = [sys.executable, "-c", "import sys; from envharness.cli import main; sys.exit(main())"]


@pytest.fixture(scope="module")
def browser_server():
    with LocalServer("browsergym") as server:
        yield server


async def play_click_test(session: ClientSession) -> dict:
    """List the tools, reset click-test with a screenshot, click what the scripted policy says."""
    tools = {t.name: t for t in (await session.list_tools()).tools}
    assert {"reset", "observation", *ACTION_TOOLS} <= set(tools)
    assert tools["click"].inputSchema["required"] == ["bid"]
    assert tools["fill"].inputSchema["properties"]["value"] == {"type": "string"}  # BrowserGym's name
    assert (
        tools["fill"].inputSchema["properties"]["text"]["type"] == "string"
    )  # its older name, still accepted
    assert set(tools["reset"].inputSchema["properties"]) == {"task", "seed", "screenshot"}

    first = await session.call_tool("reset", {"task": "click-test", "seed": SEED, "screenshot": True})
    assert not first.isError
    obs = first.structuredContent
    assert (
        obs["goal"] == "Click the button."
        and obs["reward"] == 0.0
        and obs["done"] is False
        and obs["step"] == 0
    )
    assert (
        "Page (accessibility tree):" in first.content[0].text
        and "button 'Click Me!'" in first.content[0].text
    )
    image = [c for c in first.content if c.type == "image"]
    assert len(image) == 1 and image[0].mimeType == "image/png" and len(image[0].data) > 1000

    missed = await session.call_tool("click", {"bid": "9999"})  # a failed action: reported, not an MCP error
    assert (
        not missed.isError
        and missed.structuredContent["last_action_error"]
        and missed.structuredContent["step"] == 1
    )
    bad = await session.call_tool("click", {"bid": 13})  # outside the schema: an MCP error, no step
    assert bad.isError and "not of type 'string'" in bad.content[0].text

    action = next_action(obs["goal"], obs["axtree_txt"])
    bid = action.split("'")[1]
    final = await session.call_tool("click", {"bid": bid})
    assert not final.isError
    assert final.structuredContent["reward"] == 1.0 and final.structuredContent["done"] is True
    assert final.structuredContent["last_action_error"] == "" and final.structuredContent["step"] == 2
    again = await session.call_tool("observation", {"screenshot": True})
    assert again.structuredContent["reward"] == 1.0 and any(c.type == "image" for c in again.content)
    return final.structuredContent


def test_sdk_client_plays_click_test_over_streamable_http(browser_server):
    before = health(browser_server)

    async def main() -> None:
        async with (
            streamable_http_client(f"{browser_server.base_url}/mcp") as (read, write, _),
            ClientSession(read, write) as session,
        ):
            info = await session.initialize()
            assert info.serverInfo.name == "envharness-browsergym"
            await play_click_test(session)
            assert health(browser_server)["active_sessions"] == before["active_sessions"] + 1

    asyncio.run(main())
    # the MCP session ended: its environment session is closed
    wait_until(lambda: health(browser_server)["active_sessions"] == before["active_sessions"])
    after = health(browser_server)
    assert (
        after["sessions_closed"] - before["sessions_closed"]
        == after["sessions_opened"] - before["sessions_opened"]
        == 1
    )


def test_tool_errors_before_reset_and_unknown_tools(browser_server):
    async def main() -> None:
        async with (
            streamable_http_client(f"{browser_server.base_url}/mcp") as (read, write, _),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            early = await session.call_tool("click", {"bid": "13"})
            assert early.isError and "reset" in early.content[0].text
            unknown = await session.call_tool("exec", {"code": "1"})
            assert unknown.isError and "Unknown tool 'exec'" in unknown.content[0].text
            bad_task = await session.call_tool("reset", {"task": "no-such-task"})
            assert bad_task.isError and "unknown MiniWoB task" in bad_task.content[0].text

    asyncio.run(main())


def test_mcp_needs_the_bearer_token_and_shares_the_session_limit():
    """One slot: a /ws client holding it makes MCP's reset fail with CAPACITY_REACHED; once
    it leaves, MCP gets it; a second MCP session is refused while one is open."""
    from envharness.envs.echo.client import AsyncEchoEnv

    auth = {"Authorization": "Bearer s3cret"}
    with LocalServer("echo", token="s3cret", max_sessions=1) as server:
        refused = httpx.post(
            f"{server.base_url}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}
        )
        assert refused.status_code == 401

        async def main() -> None:
            async with (
                httpx.AsyncClient(headers=auth) as c1,
                streamable_http_client(f"{server.base_url}/mcp", http_client=c1) as (r1, w1, _),
                ClientSession(r1, w1) as first,
            ):
                await first.initialize()
                assert [t.name for t in (await first.list_tools()).tools] == [
                    "reset",
                    "step",
                    "state",
                ]
                ws = AsyncEchoEnv(base_url=server.base_url, token="s3cret")
                await ws.reset()  # the /ws client holds the one slot
                full = await first.call_tool("reset", {})
                assert full.isError and "CAPACITY_REACHED" in full.content[0].text.upper()
                await ws.close()
                wait_until(lambda: health(server, authorization="Bearer s3cret")["active_sessions"] == 0)
                assert not (await first.call_tool("reset", {})).isError
                echoed = await first.call_tool("step", {"message": "hi"})
                assert echoed.structuredContent["observation"]["echoed_message"] == "hi"
                second = await c1.post(
                    f"{server.base_url}/mcp",
                    headers={"Accept": "application/json, text/event-stream"},
                    json={
                        "jsonrpc": "2.0",
                        "id": 1,
                        "method": "initialize",
                        "params": {
                            "protocolVersion": "2025-06-18",
                            "capabilities": {},
                            "clientInfo": {"name": "t", "version": "0"},
                        },
                    },
                )
                assert second.status_code == 503

        asyncio.run(main())
        wait_until(lambda: health(server, authorization="Bearer s3cret")["active_sessions"] == 0)


def test_the_sdk_is_imported_at_the_first_mcp_request_only():
    """A fifth of a server's start-up was importing the `mcp` SDK; a server that nobody asks
    for tools never imports it, and the first `/mcp` request starts it and is answered."""
    import subprocess
    import textwrap

    script = textwrap.dedent("""
        import sys, httpx
        from envharness.core.launchers import LocalServer
        with LocalServer("echo") as server:
            assert httpx.get(f"{server.base_url}/health").status_code == 200
            before = "mcp" in sys.modules
            reply = httpx.post(f"{server.base_url}/mcp", headers={"Accept": "application/json, text/event-stream"},
                               json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                                   "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}})
            print(before, "mcp" in sys.modules, reply.status_code, reply.headers.get("mcp-session-id") is not None)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["False", "True", "200", "True"], out.stdout


def _processes_tagged(tag: str) -> list[int]:
    """Processes (of this user) whose environment carries `tag`: the stdio server and its Chromium."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if tag.encode() in (entry / "environ").read_bytes():
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


def test_sdk_client_plays_click_test_over_stdio():
    tag = f"ENVHARNESS_MCP_TEST_TAG={uuid.uuid4().hex}"
    env = dict(os.environ, ENVHARNESS_MCP_TEST_TAG=tag.split("=", 1)[1])
    params = StdioServerParameters(command=CLI[0], args=[*CLI[1:], "mcp", "browsergym"], env=env)

    async def main() -> None:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            assert (await session.initialize()).serverInfo.name == "envharness-browsergym"
            await play_click_test(session)
            assert _processes_tagged(tag)  # the server and its browser are up

    asyncio.run(main())
    wait_until(lambda: not _processes_tagged(tag), timeout_s=30)


def test_openenv_mcp_tool_client_lists_and_calls_our_tools(browser_server):
    from openenv.core.mcp_client import MCPToolClient

    async def main() -> None:
        async with MCPToolClient(base_url=browser_server.base_url) as client:
            tools = {t.name: t for t in await client.list_tools()}
            assert {"reset", "click", "fill"} <= set(tools)
            assert tools["click"].input_schema["required"] == ["bid"]
            first = await client.call_tool("reset", task="click-test", seed=SEED)
            assert first["goal"] == "Click the button." and first["done"] is False
            bid = next_action(first["goal"], first["axtree_txt"]).split("'")[1]
            final = await client.call_tool("click", bid=bid)
            assert final["reward"] == 1.0 and final["done"] is True and final["last_action_error"] == ""
            unknown = await client._production_mcp_request(
                "tools/call", {"name": "noop", "session_id": "nope"}
            )
            assert "Unknown session_id" in unknown["error"]["message"]
            # as OpenEnv's docs do it: reset over its WebSocket, then tools on the same environment
            assert health(browser_server)["active_sessions"] == before["active_sessions"] + 1  # one, shared
            again = await client.reset(task="click-test", seed=SEED + 1)
            assert again.observation.goal == "Click the button." and again.done is False
            bid = next_action(again.observation.goal, again.observation.axtree_txt).split("'")[1]
            final = await client.call_tool("click", bid=bid)
            assert final["reward"] == 1.0 and final["done"] is True and final["step"] == 1

    before = health(browser_server)
    asyncio.run(main())
    wait_until(lambda: health(browser_server)["active_sessions"] == before["active_sessions"])
    assert health(browser_server)["sessions_opened"] == before["sessions_opened"] + 1


def test_mcp_harness_adapter_runs_episodes_through_an_mcp_server(browser_server):
    factory = MCPSessionFactory(url=f"{browser_server.base_url}/mcp")
    batcher = BatchingModelStep(
        ScriptedBackend(), tool_call_parser=build_browsergym_action_tool_call, send_tools=False
    )

    async def main():
        return await run_episodes(
            factory,
            ["click-test", "click-test"],
            backend=batcher,
            harness_adapter=MCPHarnessAdapter(),
            seeds=[SEED, SEED + 1],
            limits=HarnessRunLimits(max_turns=3),
        )

    before = health(browser_server)
    results = asyncio.run(main())
    for result in results:
        assert result.error is None, result.error
        assert result.env_reward == 1.0 and result.done and result.metrics["stop_reason"] == "done"
        assert [e.tool_name for e in result.tool_trace] == ["click"]
        assert "Goal: Click the button." in result.messages[0]["content"]
    wait_until(lambda: health(browser_server)["active_sessions"] == before["active_sessions"])


def test_mcp_command_refuses_bad_input_clearly(capsys):
    from envharness.cli import main

    assert main(["mcp", "no-such-env"]) == 2
    assert "Unknown environment 'no-such-env'" in capsys.readouterr().err
    assert main(["mcp", "browsergym", "--option", "no_such_option=1"]) == 2
    assert "unknown browsergym option" in capsys.readouterr().err


def test_a_vanished_mcp_client_loses_its_session_and_environment_after_the_idle_timeout():
    """No DELETE (the client just went away): the idle timeout ends the MCP session and its
    environment session, as it does for /ws."""
    with LocalServer("echo", idle_timeout_s=1.0) as server:
        session_ids = []

        async def main() -> None:
            async with (
                streamable_http_client(f"{server.base_url}/mcp", terminate_on_close=False) as (
                    read,
                    write,
                    get_id,
                ),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                assert not (await session.call_tool("reset", {})).isError
                session_ids.append(get_id())

        asyncio.run(main())
        wait_until(lambda: not server.app.state.mcp._http._server_instances, timeout_s=30)
        assert health(server)["active_sessions"] == 0 and health(server)["live_environments"] == 0
        gone = httpx.post(
            f"{server.base_url}/mcp",
            headers={"Mcp-Session-Id": session_ids[0], "Accept": "application/json, text/event-stream"},
            json={"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}},
        )
        assert gone.status_code == 404


def test_generic_tools_check_reset_options_as_the_websocket_does(echo_server):
    async def main() -> None:
        async with (
            streamable_http_client(f"{echo_server.base_url}/mcp") as (read, write, _),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            long_id = await session.call_tool("reset", {"episode_id": "x" * 300})
            assert long_id.isError and "episode_id" in long_id.content[0].text
            ok = await session.call_tool("reset", {"seed": 3, "episode_id": "mine"})
            assert not ok.isError and ok.structuredContent["done"] is False
            state = await session.call_tool("state", {})
            assert state.structuredContent["episode_id"] == "mine"
            missing = await session.call_tool("step", {})
            assert missing.isError and "'message' is a required property" in missing.content[0].text

    asyncio.run(main())


def test_mcp_session_factory_says_why_it_cannot_connect():
    with LocalServer("echo", token="s3cret") as server:

        async def main() -> None:
            with pytest.raises(ConnectionError, match="401 Unauthorized"):
                await MCPSessionFactory(url=f"{server.base_url}/mcp").create_async("t")
            session = await MCPSessionFactory(
                url=f"{server.base_url}/mcp", headers={"Authorization": "Bearer s3cret"}, reset_tool=None
            ).create_async("t")
            try:
                assert [t["name"] for t in await session.list_tools_async()] == ["reset", "step", "state"]
            finally:
                await session.close_async()

        asyncio.run(main())
    with pytest.raises(ValueError, match="exactly one of url"):
        MCPSessionFactory()
