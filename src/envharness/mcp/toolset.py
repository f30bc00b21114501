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


class StepToolset(EnvToolset):
    """Any environment: `reset`, `step` (the action's fields as arguments) and `state`; an
    environment of several tools has each of its tools instead of `step`."""

    def __init__(self, description: EnvDescription) -> None:
        self.description = description
        action_schema = description.action_type.model_json_schema()
        action_schema.pop("title", None)
        self._tools = [
            types.Tool(
                name="reset",
                description="Start a new episode; extra arguments are environment reset options.",
                inputSchema={
                    "type": "object",
                    "properties": {
                        "seed": {
                            "type": "integer",
                            "minimum": 0,
                            "description": "fix the episode's randomness",
                        },
                        "episode_id": {"type": "string"},
                    },
                    "additionalProperties": True,
                },
            ),
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
        if name == "step":
            return observation_result(await handle.step(arguments))
        if name != "state":  # one of the environment's own tools (`core/tool_actions.py`)
            return observation_result(await handle.step({"tool_name": name, "arguments": arguments}))
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


def toolset_for(description: EnvDescription, env: str | None = None) -> EnvToolset:
    """The environment's own tools (`EnvSpec.mcp_toolset` of `env`); the generic ones otherwise."""
    if env:
        from envharness.core.registry import get_spec

        try:
            make = get_spec(env).load("mcp_toolset")
        except KeyError:
            make = None
        if make is not None:
            return make(description)
    return StepToolset(description)
