"""The MCP server of one environment, on the SDK's low-level `Server`.

Why the low-level server and not FastMCP: our tools already exist as JSON schemas
(`ACTION_TOOLS`, the action model's schema), chosen at run time per environment;
FastMCP derives schemas from Python signatures and would need generated functions. The
low-level server also runs its `lifespan` once per MCP session (per streamable-HTTP
session, once per stdio process), which is exactly where an environment session opens
and closes.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Sequence
from typing import Any

from mcp import types
from mcp.server.lowlevel import Server
from mcp.server.lowlevel.helper_types import ReadResourceContents

from envharness.core.sessions import SessionManager
from envharness.mcp.handle import EnvSessionHandle
from envharness.mcp.outcomes import RolloutOutcomes, rollout_tag
from envharness.mcp.toolset import TASKS_URI, EnvToolset, error_result, run_tool, toolset_for

INSTRUCTIONS = (
    "Each MCP session owns one environment session. Call `reset` first (the browser: task and seed), "
    "then act with the tools; every result carries the observation, reward, done and the last error."
)


class ToolsetProvider:
    """The environment's toolset, worked out once from the first environment the server makes."""

    def __init__(self, manager: SessionManager, env: str | None = None, fixed: Sequence[str] = ()) -> None:
        self.manager = manager
        self.env = env
        #: Reset options the operator keeps from MCP clients (`create_app(mcp_fixed=...)`).
        self.fixed = tuple(fixed)
        self._toolset: EnvToolset | None = None

    async def get(self) -> EnvToolset:
        if self._toolset is None:
            self._toolset = toolset_for(await self.manager.describe(), self.env, self.tasks())
        return self._toolset

    def _listing(self) -> Any:
        """What the server's Task API lists, else the tasks the environment's registered harness
        lists (`define_environment(tasks=...)`); None when neither lists any."""
        if self.manager.task_listing is not None:
            return self.manager.task_listing()
        from envharness.core.registry import get_spec

        try:
            harness = get_spec(self.env).load("harness") if self.env else None
        except (KeyError, ImportError, AttributeError):
            return None
        task_list = getattr(harness, "task_list", None)
        return task_list() if callable(task_list) else None

    def tasks(self) -> list[str] | None:
        """The task names `reset(task=...)` takes (None: the environment lists none)."""
        listing = self._listing()
        return list(listing.tasks) if listing is not None and listing.tasks else None

    def task_listing(self) -> dict[str, Any] | None:
        """The tasks and splits, as the `envharness://tasks` resource gives them."""
        listing = self._listing()
        if listing is None or not listing.tasks:
            return None
        return {"env": self.env, "tasks": list(listing.tasks), "splits": dict(listing.splits)}


def build_server(
    manager: SessionManager,
    name: str,
    provider: ToolsetProvider | None = None,
    outcomes: RolloutOutcomes | None = None,
) -> Server:
    """A `Server` whose every session gets its own `EnvSessionHandle`, closed when the session ends.
    With `outcomes`, tool calls of sessions tagged with a rollout id are recorded there (`outcomes.py`)."""
    provider = provider or ToolsetProvider(manager, name)

    @contextlib.asynccontextmanager
    async def per_session(_: Server) -> AsyncIterator[EnvSessionHandle]:
        handle = EnvSessionHandle(manager, provider.fixed)
        try:
            yield handle
        finally:
            await handle.close()

    from envharness import __version__

    server: Server = Server(
        f"envharness-{name}", version=__version__, instructions=INSTRUCTIONS, lifespan=per_session
    )

    @server.list_resources()
    async def list_resources() -> list[types.Resource]:
        if provider.tasks() is None:
            return []
        return [
            types.Resource(
                uri=TASKS_URI,
                name="tasks",
                description="The tasks `reset(task=...)` takes, and their splits (JSON).",
                mimeType="application/json",
            )
        ]

    @server.read_resource()
    async def read_resource(uri: Any) -> list[ReadResourceContents]:
        listing = provider.task_listing() if str(uri) == TASKS_URI else None
        if listing is None:
            raise ValueError(
                f"no resource {uri}; this server has: {TASKS_URI if provider.tasks() else 'none'}"
            )
        return [ReadResourceContents(content=json.dumps(listing), mime_type="application/json")]

    @server.list_tools()
    async def list_tools() -> list[types.Tool]:
        return shown_tools((await provider.get()).tools(), provider.fixed)

    # Validation happens in `run_tool`, shared with the OpenEnv dialect.
    @server.call_tool(validate_input=False)
    async def call_tool(tool: str, arguments: dict) -> types.CallToolResult:
        context = server.request_context
        handle: EnvSessionHandle = context.lifespan_context
        before = handle.last
        tag = rollout_tag(context.request) if outcomes is not None else None
        handle.pinned = pinned_by_operator(context.request, provider.fixed)
        if tool == "reset" and handle.pinned and tag is not None and _began(outcomes, tag):
            return error_result(
                f"rollout {tag} has begun its episode: its seed is the operator's, so it plays one"
            )
        result = await run_tool(await provider.get(), handle, tool, arguments)
        if tag is not None:  # only a call that produced a new observation moved the episode
            outcomes.record(
                tag, tool, handle.last if handle.last is not before else None, bool(result.isError)
            )
        return result

    return server


def shown_tools(tools: Sequence[types.Tool], fixed: Sequence[str]) -> list[types.Tool]:
    """The tools as clients see them: `reset` without the options the operator fixed."""
    if not fixed:
        return list(tools)
    shown = []
    for tool in tools:
        if tool.name == "reset":
            schema = dict(tool.inputSchema)
            schema["properties"] = {
                k: v for k, v in (schema.get("properties") or {}).items() if k not in fixed
            }
            tool = tool.model_copy(update={"inputSchema": schema})
        shown.append(tool)
    return shown


def pinned_by_operator(request: Any, fixed: Sequence[str]) -> dict[str, Any]:
    """The seed the operator chose for a rollout, from the URL it gave the agent
    (`/mcp?rollout=ID&seed=S`, `policy/agents.py`), when the seed is fixed; else nothing."""
    if "seed" not in fixed or request is None:
        return {}
    seed = request.query_params.get("seed")
    return {"seed": int(seed)} if seed is not None and seed.isdigit() and len(seed) <= 19 else {}


def _began(outcomes: RolloutOutcomes | None, tag: str) -> bool:
    outcome = outcomes.get(tag) if outcomes is not None else None
    return outcome is not None and outcome.resets > 0
