"""Any MCP server as a harness `ResourceSession`: the harness's tools are MCP tools for real.

`MCPSessionFactory(url=...)` (streamable HTTP, e.g. `envharness serve`'s `/mcp`) or
`MCPSessionFactory(command=[...])` (stdio, e.g. `envharness mcp NAME`) opens one MCP
session per episode with the SDK's `ClientSession`. If the server has a `reset` tool (ours
do), the episode starts with `reset(task, seed)` and its result is the first prompt;
`list_tools` hides `reset`/`observation` from the model unless asked. A tool result's
`structuredContent` gives done, reward and `last_action_error`; `verify` forwards the last
reward the server reported (never invents one).

The SDK's transports live in anyio task groups that must be left from the task that
entered them, so each session keeps its connection in one background task of its own;
`close()` may come from anywhere.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from envharness.harness.session import ResourceSession, ResourceSessionFactory
from envharness.harness.types import Message, Tool, ToolResult, VerifyResult

CONTROL_TOOLS = ("reset", "observation")
PromptBuilder = Callable[[str, Any, list[Tool]], list[Message]]


def default_prompt(first_observation: str, task: Any, tools: list[Tool]) -> list[Message]:
    """The tools by name and description, then what `reset` returned."""
    lines = "\n".join(f"- {t['name']}: {t.get('description', '')}" for t in tools)
    return [
        {
            "role": "user",
            "content": f"Complete the task with these tools (one call per turn):\n{lines}\n\n{first_observation}",
        }
    ]


def _leaf(exc: BaseException) -> BaseException:
    """The one real error inside anyio's exception groups."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def result_text(result: Any) -> str:
    """The text parts of an MCP tool result (images are left to multimodal callers)."""
    return "\n".join(c.text for c in result.content if getattr(c, "type", None) == "text")


@dataclass
class MCPSessionFactory(ResourceSessionFactory["MCPSession"]):
    """One MCP connection per episode. Exactly one of `url` and `command`.

    `headers`: e.g. `{"Authorization": "Bearer TOKEN"}`; `env`: the stdio child's environment
    (default: this process's); `reset_tool`: None when the server has no episode to reset;
    `show_control_tools`: let the model call reset/observation too.
    """

    url: str | None = None
    command: Sequence[str] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] | None = None
    reset_tool: str | None = "reset"
    reset_arguments: dict[str, Any] = field(default_factory=dict)
    show_control_tools: bool = False
    prompt_builder: PromptBuilder = default_prompt
    connect_timeout_s: float = 60.0

    def __post_init__(self) -> None:
        if (self.url is None) == (self.command is None):
            raise ValueError(
                "MCPSessionFactory needs exactly one of url= (streamable HTTP) and command= (stdio)"
            )

    async def create_async(
        self, task: Any = None, seed: int | None = None, episode_id: str | None = None
    ) -> MCPSession:
        session = MCPSession(self, task, seed)
        await session.connect()
        return session

    def create(self, task: Any = None, seed: int | None = None, episode_id: str | None = None) -> MCPSession:
        raise TypeError(
            "MCPSessionFactory is async: use create_async (run_episodes and the rollout functions do)"
        )


class MCPSession(ResourceSession):
    """One episode on one MCP session."""

    def __init__(self, factory: MCPSessionFactory, task: Any, seed: int | None) -> None:
        self.factory, self.task, self.seed = factory, task, seed
        self.client: Any = None
        self.last_structured: dict[str, Any] = {}
        self._tools: list[Tool] | None = None
        self._ready = asyncio.Event()
        self._stop = asyncio.Event()
        self._holder: asyncio.Task | None = None
        self._failure: BaseException | None = None

    async def connect(self) -> None:
        self._holder = asyncio.create_task(self._hold(), name="envharness-mcp-client")
        try:
            await asyncio.wait_for(self._ready.wait(), self.factory.connect_timeout_s)
        except TimeoutError:
            await self.close_async()
            raise ConnectionError(
                f"MCP server did not answer within {self.factory.connect_timeout_s:.0f}s"
            ) from None
        if self._failure is not None:
            await self.close_async()
            cause = _leaf(self._failure)
            where = self.factory.url or " ".join(self.factory.command or [])
            raise ConnectionError(
                f"could not open an MCP session with {where}: {type(cause).__name__}: {cause}"
            ) from cause

    async def _hold(self) -> None:
        from mcp import ClientSession

        try:
            async with contextlib.AsyncExitStack() as stack:
                read, write = await stack.enter_async_context(self._transport())
                self.client = await stack.enter_async_context(ClientSession(read, write))
                await self.client.initialize()
                self._ready.set()
                await self._stop.wait()
        except BaseException as exc:  # reported to connect(); a later failure surfaces in the next call
            self._failure = exc
            if isinstance(exc, asyncio.CancelledError):
                raise
        finally:
            self._ready.set()

    def _transport(self) -> Any:
        f = self.factory
        if f.url is not None:
            import httpx
            from mcp.client.streamable_http import streamable_http_client

            @contextlib.asynccontextmanager
            async def http():
                async with (
                    httpx.AsyncClient(headers=f.headers, timeout=httpx.Timeout(60.0, read=300.0)) as client,
                    streamable_http_client(f.url, http_client=client) as (read, write, _),
                ):
                    yield read, write

            return http()
        import os

        from mcp.client.stdio import StdioServerParameters, stdio_client

        command = list(f.command or [])
        params = StdioServerParameters(
            command=command[0], args=command[1:], env=f.env if f.env is not None else dict(os.environ)
        )
        return stdio_client(params)

    # -- ResourceSession ----------------------------------------------------------------
    async def list_tools_async(self) -> list[Tool]:
        if self._tools is None:
            listed = (await self.client.list_tools()).tools
            self._tools = [
                {"name": t.name, "description": t.description or "", "inputSchema": t.inputSchema}
                for t in listed
            ]
        if self.factory.show_control_tools or self.factory.reset_tool is None:
            return list(self._tools)
        return [t for t in self._tools if t["name"] not in CONTROL_TOOLS]

    async def initial_messages_async(self) -> list[Message]:
        tools = await self.list_tools_async()
        text = ""
        if self.factory.reset_tool is not None:
            arguments = dict(self.factory.reset_arguments)
            if isinstance(self.task, str):
                arguments.setdefault("task", self.task)
            if self.seed is not None:
                arguments.setdefault("seed", self.seed)
            result = await self.client.call_tool(self.factory.reset_tool, arguments)
            if result.isError:
                raise RuntimeError(f"{self.factory.reset_tool} failed: {result_text(result)}")
            self.last_structured = dict(result.structuredContent or {})
            text = result_text(result)
        return list(self.factory.prompt_builder(text, self.task, tools))

    async def call_tool_async(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        result = await self.client.call_tool(name, arguments)
        text = result_text(result)
        if result.isError:  # the server refused the call: the model reads why and may retry
            return ToolResult(data=None, error=text or "tool error", metadata={"error_type": "mcp_error"})
        structured = dict(result.structuredContent or {})
        self.last_structured = structured
        return ToolResult(
            data=text,
            done=bool(structured.get("done", False)),
            error=structured.get("last_action_error") or None,
            metadata=structured,
        )

    async def verify_async(self, transcript: list[Message], final_state: Any | None = None) -> VerifyResult:
        s = self.last_structured
        return VerifyResult(
            env_reward=s.get("reward"),
            done=bool(s.get("done", False)),
            metrics={"step_count": s.get("step", 0)},
            artifacts={"last_result": s},
        )

    async def close_async(self) -> None:
        """End the MCP session (the server closes its environment). Safe to call twice."""
        self._stop.set()
        if self._holder is not None:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(self._holder), 30.0)
            if not self._holder.done():
                self._holder.cancel()

    def close(self) -> None:
        raise TypeError("MCPSession is async: use close_async")
