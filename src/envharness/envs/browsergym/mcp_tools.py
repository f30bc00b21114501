"""The browser's MCP tools: BrowserGym's actions (`ACTION_TOOLS`, derived from their declarations), plus `reset` and `observation`.

Every result carries the page as text (goal, URL, the AXTree with bids), the reward, done
and `last_action_error` (in `structuredContent` too), and the screenshot as MCP image
content when the episode was reset with `screenshot: true` or `observation` asks for it.
A failed action is not an MCP error: it cost a step and its reason is in the result,
exactly as BrowserGym reports it. Calls outside the schema or before `reset` are errors.
"""

from __future__ import annotations

from typing import Any

from mcp import types

from envharness.core.types import Observation
from envharness.envs.browsergym.action_tools import ACTION_TOOLS, build_browsergym_action_str
from envharness.envs.browsergym.models import MAX_SEED
from envharness.envs.browsergym.sessions import format_observation
from envharness.mcp.handle import EnvSessionHandle
from envharness.mcp.toolset import EnvToolset

SCREENSHOT_PARAM = {"type": "boolean", "description": "also return the viewport as an image"}

RESET_TOOL = types.Tool(
    name="reset",
    description=(
        "Start a new MiniWoB++ episode and return its first observation. `task` is a MiniWoB task name "
        "(e.g. click-test, click-button, enter-text; default: the server's task); `seed` fixes the "
        "episode; `screenshot: true` adds a screenshot to this and every later result of the episode."
    ),
    inputSchema={
        "type": "object",
        "properties": {
            "task": {"type": "string", "description": "MiniWoB++ task, e.g. 'click-test'"},
            "seed": {
                "type": "integer",
                "minimum": 0,
                "maximum": MAX_SEED,
                "description": "fixes the episode (same seed, same page)",
            },
            "screenshot": SCREENSHOT_PARAM,
        },
        "additionalProperties": False,
    },
)
OBSERVATION_TOOL = types.Tool(
    name="observation",
    description="The current observation again (goal, URL, AXTree, reward, done, last error), without acting.",
    inputSchema={
        "type": "object",
        "properties": {"screenshot": SCREENSHOT_PARAM},
        "additionalProperties": False,
    },
)


def _action_tools() -> list[types.Tool]:
    tools = []
    for name, tool in ACTION_TOOLS.items():  # the default tools first
        spec = tool.spec()
        schema = dict(spec["inputSchema"], additionalProperties=False)
        tools.append(
            types.Tool(
                name=name, description=f"BrowserGym action {name}: {spec['description']}", inputSchema=schema
            )
        )
    return tools


class BrowserGymToolset(EnvToolset):
    """reset, observation, and one tool per BrowserGym action (the seed's five first)."""

    def __init__(self, description: Any = None) -> None:
        self._tools = [RESET_TOOL, OBSERVATION_TOOL, *_action_tools()]

    def tools(self) -> list[types.Tool]:
        return self._tools

    async def call(
        self, handle: EnvSessionHandle, name: str, arguments: dict[str, Any]
    ) -> types.CallToolResult:
        if name == "reset":
            options = {k: v for k, v in arguments.items() if k in ("task", "seed")}
            if arguments.get("screenshot"):
                options["screenshot"] = True
            observation = await handle.reset(options)
            return observation_result(observation, step=0)
        if name == "observation":
            if handle.last is None:
                raise ValueError("no observation yet: call reset first")
            state = await handle.state()
            return observation_result(
                handle.last, step=state.step_count, want_screenshot=bool(arguments.get("screenshot"))
            )
        action_str = build_browsergym_action_str(name, arguments)
        observation = await handle.step({"action_str": action_str})
        state = await handle.state()
        return observation_result(observation, step=state.step_count)


def observation_result(obs: Observation, *, step: int, want_screenshot: bool = False) -> types.CallToolResult:
    """Text for the model, the same facts structured for programs, the screenshot as an image."""
    error = getattr(obs, "last_action_error", "") or ""
    text = format_observation(obs, max_chars=None, with_error=True)
    text += f"\n\nReward: {obs.reward}  Done: {bool(obs.done)}  Step: {step}"
    structured = {
        "goal": getattr(obs, "goal", ""),
        "url": getattr(obs, "url", ""),
        "reward": obs.reward,
        "done": bool(obs.done),
        "truncated": bool(getattr(obs, "truncated", False)),
        "last_action": getattr(obs, "last_action", ""),
        "last_action_error": error,
        "step": step,
        "axtree_txt": getattr(obs, "axtree_txt", ""),
    }
    content: list[Any] = [types.TextContent(type="text", text=text)]
    screenshot = getattr(obs, "screenshot", None)
    if screenshot:
        fmt = getattr(obs, "screenshot_format", None) or "png"
        content.append(types.ImageContent(type="image", data=screenshot, mimeType=f"image/{fmt}"))
    elif want_screenshot:
        content.append(
            types.TextContent(
                type="text", text="No screenshot in this episode: call reset with screenshot: true."
            )
        )
    return types.CallToolResult(content=content, structuredContent=structured)
