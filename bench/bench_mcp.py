"""The same browser steps through each front door, in one run: /ws (envharness's client),
MCP streamable HTTP at /mcp (the `mcp` SDK's client), OpenEnv's `MCPToolClient` (its HTTP
JSON-RPC dialect at /mcp), and MCP over stdio (`envharness mcp browsergym`, env in-process).
One `envharness serve browsergym` subprocess serves the first three. Rounds interleave
the paths so machine load hits them alike; medians are printed as a markdown table.

    PLAYWRIGHT_BROWSERS_PATH=.venv/ms-playwright .venv/bin/python bench/bench_mcp.py [--rounds 10 --steps 10]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import statistics
import sys
import time

from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from envharness.core.launchers import launch_local
from envharness.envs.browsergym.client import AsyncBrowserGymEnv
from envharness.envs.browsergym.models import BrowserGymAction

TASK, SEED = "click-checkboxes", 3
CHECKBOX = re.compile(r"\[(\w+)\] checkbox")


class Ws:
    name = "/ws (AsyncBrowserGymEnv)"

    def __init__(self, url: str) -> None:
        self.env = AsyncBrowserGymEnv(url)

    async def reset(self) -> str:
        return (await self.env.reset(task=TASK, seed=SEED)).observation.axtree_txt

    async def click(self, bid: str) -> None:
        result = await self.env.step(BrowserGymAction(action_str=f"click('{bid}')"))
        assert not result.observation.last_action_error, result.observation.last_action_error

    async def aclose(self) -> None:
        await self.env.close()


class Mcp:
    def __init__(self, name: str, transport) -> None:
        self.name, self._transport, self._stack = name, transport, contextlib.AsyncExitStack()

    async def open(self) -> Mcp:
        streams = await self._stack.enter_async_context(self._transport)
        self.session = await self._stack.enter_async_context(ClientSession(streams[0], streams[1]))
        await self.session.initialize()
        return self

    async def reset(self) -> str:
        return (await self.session.call_tool("reset", {"task": TASK, "seed": SEED})).structuredContent[
            "axtree_txt"
        ]

    async def click(self, bid: str) -> None:
        result = await self.session.call_tool("click", {"bid": bid})
        assert not result.isError and not result.structuredContent["last_action_error"], result

    async def aclose(self) -> None:
        await self._stack.aclose()


class OpenEnvMcp:
    name = "OpenEnv MCPToolClient (/mcp dialect)"

    def __init__(self, url: str) -> None:
        from openenv.core.mcp_client import MCPToolClient

        self.client = MCPToolClient(base_url=url)

    async def reset(self) -> str:
        return (await self.client.call_tool("reset", task=TASK, seed=SEED))["axtree_txt"]

    async def click(self, bid: str) -> None:
        result = await self.client.call_tool("click", bid=bid)
        assert not result["last_action_error"], result

    async def aclose(self) -> None:
        await self.client.close()


async def measure(paths: list, rounds: int, steps: int) -> dict[str, dict[str, list[float]]]:
    times = {p.name: {"reset": [], "step": []} for p in paths}
    for _ in range(rounds):
        for path in paths:
            start = time.perf_counter()
            tree = await path.reset()
            times[path.name]["reset"].append(time.perf_counter() - start)
            bid = CHECKBOX.search(tree).group(1)
            for _ in range(steps):
                start = time.perf_counter()
                await path.click(bid)  # toggles the box: the episode goes on
                times[path.name]["step"].append(time.perf_counter() - start)
    return times


async def main(args: argparse.Namespace) -> None:
    server = launch_local("browsergym")
    cli = [
        sys.executable,
        "-c",
        "import sys; from envharness.cli import main; sys.exit(main())",
        "mcp",
        "browsergym",
    ]
    paths: list = []
    try:
        paths.append(Ws(server.base_url))
        paths.append(
            await Mcp(
                "MCP streamable HTTP (mcp SDK client)", streamable_http_client(f"{server.base_url}/mcp")
            ).open()
        )
        paths.append(OpenEnvMcp(server.base_url))
        stdio = StdioServerParameters(command=cli[0], args=cli[1:], env=dict(os.environ))
        paths.append(await Mcp("MCP stdio (envharness mcp, env in-process)", stdio_client(stdio)).open())
        for path in paths:  # warm-up: first page load, first context
            await path.reset()
        times = await measure(paths, args.rounds, args.steps)
    finally:
        for path in reversed(paths):
            with contextlib.suppress(Exception):
                await path.aclose()
        server.stop()
    print(
        f"\n{args.rounds} rounds x (1 reset + {args.steps} clicks) per path, {TASK} seed {SEED}, interleaved; medians\n"
    )
    print("| path | reset p50 (ms) | click+observation p50 (ms) | click p90 (ms) |\n|---|---|---|---|")
    for name, t in times.items():
        q = statistics.quantiles(t["step"], n=10)
        print(
            f"| {name} | {statistics.median(t['reset']) * 1e3:.1f} | {statistics.median(t['step']) * 1e3:.1f} | {q[8] * 1e3:.1f} |"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--steps", type=int, default=10)
    asyncio.run(main(parser.parse_args()))
