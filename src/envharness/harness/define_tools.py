"""What an environment of several tools (`define_environment(..., tools=[...])`) shows: the
opening that lists its tools and the form of a call, and `/web`'s list of its actions."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from envharness.harness.types import Message, Tool

_PLACEHOLDERS = {"string": "...", "integer": 0, "number": 0, "boolean": True, "array": [], "object": {}}


def _kind(schema: dict[str, Any]) -> str:
    kind = schema.get("type")
    if kind is None and schema.get("anyOf"):  # Optional[...]: the type that is not null
        kinds = [b.get("type") for b in schema["anyOf"] if b.get("type") not in (None, "null")]
        kind = kinds[0] if kinds else None
    return str(kind or "any")


def signature(tool: Tool) -> str:
    """`search(query: string)`; an optional argument with a `?`."""
    schema = tool.get("inputSchema") or {}
    required = set(schema.get("required") or [])
    arguments = [
        f"{name}{'' if name in required else '?'}: {_kind(prop)}"
        for name, prop in (schema.get("properties") or {}).items()
    ]
    return f"{tool['name']}({', '.join(arguments)})"


def example_arguments(tool: Tool) -> dict[str, Any]:
    """A placeholder for each required argument (the form of a call, not a good one)."""
    schema = tool.get("inputSchema") or {}
    properties = schema.get("properties") or {}
    return {name: _PLACEHOLDERS.get(_kind(properties[name]), "...") for name in schema.get("required") or []}


def _arguments_text(tool: Tool) -> str:
    """`query (string): words to look for`, one argument after another ("none" without)."""
    schema = tool.get("inputSchema") or {}
    required = set(schema.get("required") or [])
    parts = [
        f"{name} ({_kind(prop)}{'' if name in required else ', optional'})"
        + (f": {prop['description']}" if prop.get("description") else "")
        for name, prop in (schema.get("properties") or {}).items()
    ]
    return "; ".join(parts) or "none"


def tools_opening(
    observation: Any, task: Any, tool_names: list[str], *, tools: Sequence[Tool], text: Callable[[Any], str]
) -> list[Message]:
    """The first observation's text, the tools enabled (each with its description and
    arguments) and a call in the JSON shape a reply takes."""
    shown = [t for t in tools if t["name"] in tool_names] or list(tools)
    lines = [f"{t['name']}: {t.get('description', '')} Arguments: {_arguments_text(t)}." for t in shown]
    call = json.dumps({"name": shown[0]["name"], "arguments": example_arguments(shown[0])})
    return [
        {
            "role": "user",
            "content": f"{text(observation)}\n\nYou have these tools:\n"
            + "\n".join(lines)
            + "\n\nReply with "
            f"exactly one tool call as JSON, like this:\n{call}",
        }
    ]


def tools_web_info(tools: Sequence[Tool], tasks: Sequence[str], default_task: str) -> dict[str, Any]:
    """`/web`'s task picker and list of actions: each tool, typed as the JSON action the
    WebSocket carries."""
    return {
        "tasks": list(tasks),
        "default_task": default_task,
        "actions": [
            {
                "name": t["name"],
                "signature": signature(t),
                "description": t.get("description", ""),
                "example": json.dumps({"tool_name": t["name"], "arguments": example_arguments(t)}),
            }
            for t in tools
        ],
        "action_note": 'Type the action as JSON: {"tool_name": TOOL, "arguments": {...}}; click an example.',
    }


__all__ = ["example_arguments", "signature", "tools_opening", "tools_web_info"]
