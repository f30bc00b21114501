"""Which MCP tools an environment offers, and how one call runs on one environment session.

`EnvToolset` is the interface; `StepToolset` serves any environment (reset, step with the
action's own JSON schema, state); environments with a better vocabulary bring their own
(the browser's is its `mcp_tools.py`, named by its `EnvSpec.mcp_toolset`). `run_tool` is the one entry point that
both the SDK server and the OpenEnv dialect use: lookup, schema check, errors as
`isError` results (never a crashed session).
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema
from mcp import types
from pydantic import ValidationError

from envharness.core.protocol import ProtocolError, serialize_observation
from envharness.core.sessions import EnvDescription
from envharness.core.tool_actions import ToolCallAction
from envharness.core.types import Observation
from envharness.mcp.handle import EnvSessionHandle

#: Failures a caller should read as "your call was wrong", not "the server broke".
CALL_ERRORS = (ProtocolError, ValueError, KeyError, TypeError, ValidationError)


class EnvToolset:
    """The tools of one kind of environment."""

    def tools(self) -> list[types.Tool]:
        raise NotImplementedError

    async def call(
        self, handle: EnvSessionHandle, name: str, arguments: dict[str, Any]
    ) -> types.CallToolResult:
        raise NotImplementedError


def error_result(message: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=message)], isError=True)


async def run_tool(
    toolset: EnvToolset, handle: EnvSessionHandle, name: str, arguments: dict[str, Any] | None
) -> types.CallToolResult:
    """Run one tool call: unknown tools, arguments outside the schema and environment
    refusals come back as `isError` results the caller can read and correct."""
    tool = next((t for t in toolset.tools() if t.name == name), None)
    if tool is None:
        return error_result(f"Unknown tool {name!r}; available: {', '.join(t.name for t in toolset.tools())}")
    arguments = arguments or {}
    try:
        jsonschema.validate(instance=arguments, schema=tool.inputSchema)
    except jsonschema.ValidationError as exc:
        return error_result(f"Invalid arguments for {name}: {exc.message}")
    try:
        return await toolset.call(handle, name, arguments)
    except ProtocolError as exc:
        return error_result(f"{exc.code.value}: {exc.message}")
    except CALL_ERRORS as exc:
        return error_result(f"{name} failed: {type(exc).__name__}: {exc}")


#: The MCP resource that lists the environment's tasks (`mcp/server.py`).
TASKS_URI = "envharness://tasks"
#: Up to this many tasks are listed in `reset`'s schema as an enum; more, in the resource only.
MAX_TASK_ENUM = 200


def reset_tool(tasks: list[str] | None) -> types.Tool:
    """The generic `reset`: `task` (the environment's tasks, when it lists them), `seed`,
    `episode_id`, and any other reset option of the environment."""
    properties: dict[str, Any] = {}
    if tasks:
        task: dict[str, Any] = {
            "type": "string",
            "description": f"which task to play ({len(tasks)}; the resource {TASKS_URI} lists them)",
        }
        if len(tasks) <= MAX_TASK_ENUM:
            task["enum"] = list(tasks)
        properties["task"] = task
    properties["seed"] = {"type": "integer", "minimum": 0, "description": "same seed, same episode"}
    properties["episode_id"] = {"type": "string"}
    return types.Tool(
        name="reset",
        description="Start a new episode; extra arguments are environment reset options.",
        inputSchema={"type": "object", "properties": properties, "additionalProperties": True},
    )


class StepToolset(EnvToolset):
    """Any environment: `reset`, `step` (the action's fields as arguments) and `state`; an
    environment of several tools has each of its tools instead of `step`. `tasks`: the names
    the server's Task API lists, offered in `reset`'s schema."""

    def __init__(self, description: EnvDescription, tasks: list[str] | None = None) -> None:
        self.description = description
        action_schema = description.action_type.model_json_schema()
        action_schema.pop("title", None)
        self._tools = [
            reset_tool(tasks),
            *action_tools(description.action_type, action_schema),
            types.Tool(
                name="state",
                description="The episode's state (step count, episode id, ...).",
                inputSchema={"type": "object", "properties": {}},
            ),
        ]

    def tools(self) -> list[types.Tool]:
        return self._tools

    async def call(
        self, handle: EnvSessionHandle, name: str, arguments: dict[str, Any]
    ) -> types.CallToolResult:
        if name == "reset":
            return observation_result(await handle.reset(arguments))
        if name != "state":  # `step`, or one of the environment's own tools (`core/tool_actions.py`)
            action = arguments if name == "step" else {"tool_name": name, "arguments": arguments}
            try:
                return observation_result(await handle.step(action))
            except ProtocolError as exc:
                if not exc.extra.get("invalid_action"):
                    raise
                return refused_result(exc.message, (await handle.state()).step_count)
        state = (await handle.state()).model_dump(mode="json")
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=json.dumps(state))], structuredContent=state
        )


def action_tools(action_type: type, action_schema: dict[str, Any]) -> list[types.Tool]:
    """`step` with the action's schema; for an environment of several tools, each of its tools."""
    if issubclass(action_type, ToolCallAction):
        return [types.Tool(**spec) for spec in action_type.tool_specs()]
    return [
        types.Tool(
            name="step", description=f"Take one action ({action_type.__name__}).", inputSchema=action_schema
        )
    ]


def observation_result(observation: Observation) -> types.CallToolResult:
    """OpenEnv's layout (`observation`, `reward`, `done`) as structured content and as JSON text."""
    payload = serialize_observation(observation)
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=json.dumps(payload))], structuredContent=payload
    )


def refused_result(message: str, step: int) -> types.CallToolResult:
    """A step the environment refused (`InvalidAction`): not an MCP error, since the step counted
    and the episode goes on; the reason is `last_action_error`, as the browser's tools report it."""
    payload = {"observation": None, "reward": None, "done": False, "last_action_error": message, "step": step}
    text = f"Refused: {message}\n(the step counted: step {step}; the episode goes on)"
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)], structuredContent=payload
    )


def toolset_for(
    description: EnvDescription, env: str | None = None, tasks: list[str] | None = None
) -> EnvToolset:
    """The environment's own tools (`EnvSpec.mcp_toolset` of `env`); the generic ones otherwise."""
    if env:
        from envharness.core.registry import get_spec

        try:
            make = get_spec(env).load("mcp_toolset")
        except KeyError:
            make = None
        if make is not None:
            return make(description)
    return StepToolset(description, tasks)
