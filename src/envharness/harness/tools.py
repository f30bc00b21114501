"""MCP-style tool specs: building them, naming them, checking a call's arguments.

A tool is a dict `{"name", "description", "inputSchema"}` (MCP's wire form). OpenEnv's
pydantic `Tool` objects (`.name`, `.input_schema`) are accepted wherever a spec is read,
so sessions written for OpenEnv keep working.
"""

from __future__ import annotations

from typing import Any

from envharness.harness.types import Tool

RESERVED_TOOL_NAMES = frozenset({"reset", "step", "state", "close"})

_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list, tuple),
    "object": (dict,),
    "null": (type(None),),
}


def tool_spec(
    name: str, description: str, properties: dict[str, Any] | None = None, required: list[str] | None = None
) -> Tool:
    """An MCP tool spec whose input is a JSON object with the given properties."""
    schema: dict[str, Any] = {"type": "object", "properties": dict(properties or {})}
    if required:
        schema["required"] = list(required)
    return {"name": name, "description": description, "inputSchema": schema}


def tool_name(tool: Any) -> str:
    return tool["name"] if isinstance(tool, dict) else tool.name


def tool_schema(tool: Any) -> dict[str, Any]:
    if isinstance(tool, dict):
        return tool.get("inputSchema") or tool.get("input_schema") or {}
    return getattr(tool, "input_schema", None) or getattr(tool, "inputSchema", None) or {}


def as_mcp_dict(tool: Any) -> Tool:
    """The MCP dict form of a spec (for records and chat templates)."""
    if isinstance(tool, dict):
        return {
            "name": tool["name"],
            "description": tool.get("description", ""),
            "inputSchema": tool_schema(tool),
        }
    return {
        "name": tool.name,
        "description": getattr(tool, "description", ""),
        "inputSchema": tool_schema(tool),
    }


def _type_ok(value: Any, expected: str | list[str]) -> bool:
    names = [expected] if isinstance(expected, str) else list(expected)
    for name in names:
        types = _JSON_TYPES.get(name)
        if types is None:
            return True  # a type we do not check
        # bool is an int in Python but not in JSON Schema
        if isinstance(value, bool) and name in ("integer", "number"):
            continue
        if isinstance(value, types):
            return True
    return False


def validate_arguments(tool: Any, arguments: Any) -> str | None:
    """The first problem with `arguments` for `tool`, in words, or None when they fit.

    Checks what models get wrong in practice: not an object, missing required keys,
    unknown keys (when the schema forbids them), wrong JSON types, values outside an enum.
    """
    if not isinstance(arguments, dict):
        return f"arguments must be a JSON object, got {type(arguments).__name__}"
    schema = tool_schema(tool)
    props: dict[str, Any] = schema.get("properties") or {}
    missing = [key for key in schema.get("required") or [] if key not in arguments]
    if missing:
        return f"missing required argument(s): {', '.join(missing)}"
    if schema.get("additionalProperties") is False:
        unknown = sorted(set(arguments) - set(props))
        if unknown:
            return f"unknown argument(s): {', '.join(unknown)}; expected: {', '.join(props) or 'none'}"
    for key, value in arguments.items():
        prop = props.get(key) or {}
        if "type" in prop and not _type_ok(value, prop["type"]):
            return f"argument {key!r} must be of type {prop['type']}, got {type(value).__name__}"
        if "enum" in prop and value not in prop["enum"]:
            return f"argument {key!r} must be one of {prop['enum']}, got {value!r}"
    return None
