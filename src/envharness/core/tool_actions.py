"""Environments whose actions are several tools: typed methods, as FastMCP's `@mcp.tool` and
verifiers' `ToolEnv` take them.

A tool is a function called with the environment first (a method, or a function taking the
environment), its docstring the tool's description (a Google-style ``Args:`` section describes
the arguments), its type hints the arguments' JSON schema (pydantic's, `Annotated[..., Field(...)]`
included). It returns the environment's observation (reward and done on it, as `step`'s), or a
string when the observation has one text field.

On the wire a call is OpenEnv's `CallToolAction`: ``{"type": "call_tool", "tool_name": "search",
"arguments": {"query": "dune"}}`` (``type`` may be left out), so OpenEnv's `GenericEnvClient`
sends it as a plain dict and OpenEnv's `MCPToolClient.call_tool(name, **arguments)` works over
the WebSocket. `tool_environment` makes the served class: the environment with that action type
and a `step` that calls the named tool.
"""

from __future__ import annotations

import inspect
import re
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, model_validator

from envharness.core.environment import Environment
from envharness.core.types import Action, Observation

#: Names a tool may not take: the environment's own calls, and TRL's methods.
RESERVED = frozenset({"reset", "step", "state", "close", "get_reward"})


def _doc_parts(doc: str | None) -> tuple[str, dict[str, str]]:
    """(the description: what comes before ``Args:``, {argument: its description})."""
    text = inspect.cleandoc(doc or "")
    found = re.search(r"^(?:Args|Arguments|Parameters):\s*$", text, flags=re.M)
    head, rest = (text[: found.start()], text[found.end() :]) if found else (text, "")
    described: dict[str, str] = {}
    for line in rest.splitlines():
        argument = re.match(r"^\s+(\w+)\s*(?:\([^)]*\))?\s*:\s*(.+)$", line)
        if argument:
            described[argument.group(1)] = argument.group(2).strip()
        elif re.match(r"^\S", line):  # Returns:, Raises: ... end the arguments
            break
    return " ".join(head.split("\n\n")[0].split()), described


@dataclass(frozen=True)
class ToolFunction:
    """One tool: its name, the function (called with the environment first), its description
    and the pydantic model of its arguments."""

    name: str
    function: Callable[..., Any]
    description: str
    arguments_model: type[BaseModel]

    @property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.function)

    def input_schema(self) -> dict[str, Any]:
        """The arguments' JSON schema (MCP's `inputSchema`): pydantic's, titles left out."""
        schema = _untitled(self.arguments_model.model_json_schema())
        schema["additionalProperties"] = False
        return schema

    def spec(self) -> dict[str, Any]:
        """The tool in MCP's form, as `tools/list` gives it."""
        return {"name": self.name, "description": self.description, "inputSchema": self.input_schema()}

    def arguments_for(self, arguments: Any) -> dict[str, Any]:
        """The call's keyword arguments, checked and converted; ValueError in words otherwise."""
        if not isinstance(arguments, dict):
            raise ValueError(f"{self.name}: arguments must be a JSON object, not {type(arguments).__name__}")
        try:
            checked = self.arguments_model.model_validate(arguments)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}" for e in exc.errors()
            )
            raise ValueError(f"{self.name}: {problems}") from None
        return {name: getattr(checked, name) for name in type(checked).model_fields}


def _untitled(schema: Any) -> Any:
    """A JSON schema without pydantic's `title` keys (models read the descriptions)."""
    if isinstance(schema, dict):
        return {k: _untitled(v) for k, v in schema.items() if k != "title" or not isinstance(v, str)}
    if isinstance(schema, list):
        return [_untitled(v) for v in schema]
    return schema


def _hints(function: Callable[..., Any], names: set[str]) -> dict[str, Any]:
    """The type hints of the arguments `names` (the environment's own hint, maybe of a class
    defined where the function cannot see it, is not needed)."""
    holder: Any = lambda: None  # noqa: E731 - only a carrier of annotations
    holder.__annotations__ = {n: a for n, a in getattr(function, "__annotations__", {}).items() if n in names}
    return typing.get_type_hints(holder, globalns=getattr(function, "__globals__", {}), include_extras=True)


def tool_function(function: Callable[..., Any], name: str | None = None) -> ToolFunction:
    """A `ToolFunction` from a typed function whose first parameter is the environment."""
    name = name or function.__name__
    if not name.isidentifier() or name.startswith("_") or name in RESERVED:
        raise ValueError(
            f"tool name {name!r}: a tool is a public name that is not one of {', '.join(sorted(RESERVED))}"
        )
    parameters = list(inspect.signature(function).parameters.values())[1:]  # the environment first
    hints = _hints(function, {p.name for p in parameters})
    description, described = _doc_parts(function.__doc__)
    fields: dict[str, Any] = {}
    for p in parameters:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise ValueError(f"tool {name}: *{p.name} has no schema; name each argument")
        if p.name not in hints:
            raise ValueError(f"tool {name}: argument {p.name!r} needs a type hint (the hints are the schema)")
        default = ... if p.default is inspect.Parameter.empty else p.default
        about = {"description": described[p.name]} if p.name in described else {}
        fields[p.name] = (hints[p.name], Field(default, **about))
    model = create_model(  # type: ignore[call-overload]
        f"{name.title().replace('_', '')}Arguments", __config__=ConfigDict(extra="forbid"), **fields
    )
    return ToolFunction(name, function, description or name, model)


class ToolCallAction(Action):
    """One call of one of the environment's tools (OpenEnv's `CallToolAction`)."""

    type: Literal["call_tool"] = Field(default="call_tool", description="always call_tool")
    tool_name: str = Field(..., description="the tool to call")
    arguments: dict[str, Any] = Field(default_factory=dict, description="the tool's arguments")

    #: The environment's tools by name (set on each environment's own subclass).
    tool_functions: ClassVar[dict[str, ToolFunction]] = {}

    @model_validator(mode="after")
    def _a_known_tool_and_its_arguments(self) -> ToolCallAction:
        tool = self.tool_functions.get(self.tool_name)
        if tool is None:
            known = ", ".join(self.tool_functions) or "none"
            raise ValueError(f"unknown tool {self.tool_name!r}; this environment's tools: {known}")
        tool.arguments_for(self.arguments)
        return self

    @classmethod
    def tool_specs(cls) -> list[dict[str, Any]]:
        """Every tool in MCP's form."""
        return [t.spec() for t in cls.tool_functions.values()]

    @classmethod
    def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """Pydantic's schema, plus one `oneOf` branch per tool with its arguments' schema (what
        `/schema`, `/web` and MCP's `step` show)."""
        schema = super().model_json_schema(*args, **kwargs)
        names = list(cls.tool_functions)
        schema["properties"]["tool_name"]["enum"] = names
        branches, defs = [], dict(schema.get("$defs") or {})
        for tool in cls.tool_functions.values():
            arguments = tool.input_schema()
            defs.update(arguments.pop("$defs", {}))
            branches.append(
                {
                    "properties": {"tool_name": {"const": tool.name}, "arguments": arguments},
                    "required": ["tool_name", "arguments"] if arguments.get("required") else ["tool_name"],
                    "description": tool.description,
                }
            )
        schema["oneOf"] = branches
        if defs:
            schema["$defs"] = defs
        return schema


def _text_field(observation_type: type[Observation]) -> str | None:
    """The observation's one string field, if it has exactly one (where a string result goes)."""
    own = [n for n, f in observation_type.model_fields.items() if n not in Observation.model_fields]
    texts = [n for n in own if observation_type.model_fields[n].annotation is str]
    return texts[0] if len(texts) == 1 else None


def _as_observation(env: Environment, name: str, value: Any) -> Observation:
    observation_type = type(env).observation_type
    if isinstance(value, Observation):
        return value
    field = _text_field(observation_type)
    if isinstance(value, str) and field is not None:
        return observation_type(**{field: value})
    raise TypeError(
        f"tool {name} returned {type(value).__name__}; a tool returns a {observation_type.__name__}"
        + (f" or a string (its {field})" if field else "")
    )


def _step(self: Environment, action: ToolCallAction) -> Observation:
    tool = type(action).tool_functions[action.tool_name]
    if tool.is_async:
        raise TypeError(f"tool {tool.name} is async: call step_async")
    return _as_observation(self, tool.name, tool.function(self, **tool.arguments_for(action.arguments)))


def tool_environment(
    environment: type[Environment], tools: Sequence[str | Callable[..., Any]]
) -> type[Environment]:
    """The class the server runs: `environment` with a `ToolCallAction` of `tools` (method
    names, or functions taking the environment first) as its action type, and a `step` that
    calls the named tool."""
    if environment.step is not Environment.step or environment.step_async is not Environment.step_async:
        raise ValueError(
            f"{environment.__name__} defines step and tools: an environment acts either through one "
            "action type and step, or through its tools (no step)"
        )
    if not tools:
        raise ValueError("tools=[...] names at least one tool")
    functions = [
        tool_function(getattr(environment, t), t) if isinstance(t, str) else tool_function(t) for t in tools
    ]
    by_name = {t.name: t for t in functions}
    if len(by_name) != len(functions):
        raise ValueError(f"two tools share a name: {[t.name for t in functions]}")
    base = environment.__name__.removesuffix("Environment") or "Tool"
    action = type(
        f"{base}ToolCall",
        (ToolCallAction,),
        {"tool_functions": by_name, "__module__": environment.__module__},
    )

    async def step_async(self: Environment, action: ToolCallAction) -> Observation:
        tool = type(action).tool_functions[action.tool_name]
        if not tool.is_async:
            return await super(served, self).step_async(action)  # the sync step, where sync calls run
        return _as_observation(
            self, tool.name, await tool.function(self, **tool.arguments_for(action.arguments))
        )

    served = type(
        environment.__name__,
        (environment,),
        {
            "action_type": action,
            "step": _step,
            "step_async": step_async,
            "__module__": environment.__module__,
            "__qualname__": environment.__qualname__,
            "__doc__": environment.__doc__,
        },
    )
    return served


__all__ = ["RESERVED", "ToolCallAction", "ToolFunction", "tool_environment", "tool_function"]
