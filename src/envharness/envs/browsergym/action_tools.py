"""The browser's actions as tools, derived from their declarations in `executor.py`.

`ACTION_TOOLS` holds each action a model may call: its parameters in BrowserGym's positional
order, their JSON schemas, its description (the declaring function's docstring). Tool calls
become BrowserGym action strings (`build_browsergym_action_str`), which the environment's
grammar parses back to exactly the values given. The seed's five tools (`click`, `fill`,
`send_keys`, `scroll`, `noop`) are on by default; the rest are opt-in.

A declared alias keeps an older argument name working (`fill`'s ``text``, from before it took
BrowserGym's ``value``): the schema lists it, and the parameter it stands for is then not
required there, so that old calls and recorded episodes still pass the schema.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from envharness.envs.browsergym.action_set import KINDS, PARAMS, REQUIRED, Action, ActionSet, Derived, Param
from envharness.envs.browsergym.executor import ACTIONS
from envharness.harness.tools import tool_spec
from envharness.harness.types import Tool

STR, NUM = "string", "number"
#: The tools a session offers unless told otherwise (OpenEnv's BrowserGym harness tools).
DEFAULT_TOOL_NAMES = ("click", "fill", "send_keys", "scroll", "noop")


@dataclass(frozen=True)
class ActionTool:
    """One action as a tool; built from its declaration (`ActionTool.of`), never written by hand."""

    name: str
    description: str
    params: tuple[tuple[str, Any], ...] = ()  # (name, JSON type), in positional order
    optional: tuple[str, ...] = ()  # the parameters with a default
    aliases: tuple[tuple[str, str], ...] = ()  # (older argument name, the parameter it stands for)
    declared: tuple[Param, ...] = ()

    @classmethod
    def of(cls, action: Action) -> ActionTool:
        return cls(
            name=action.name,
            description=action.doc,
            params=tuple((p.name, KINDS[p.kind]["type"]) for p in action.params),
            optional=tuple(p.name for p in action.params if p.default is not REQUIRED),
            aliases=action.aliases,
            declared=action.params,
        )

    @property
    def required(self) -> tuple[str, ...]:
        """The parameters a call must give (under their name or an alias)."""
        return tuple(p for p, _ in self.params if p not in self.optional)

    def shown(self, param: str) -> str:
        """How prompts name `param` in this tool's signature."""
        return PARAMS[param].shown_as or param

    def spec(self) -> Tool:
        props = {p.name: dict(KINDS[p.kind]) for p in self.declared}
        for old, new in self.aliases:
            props[old] = {**props[new], "description": f"the older name of `{new}`, still accepted"}
        aliased = {new for _, new in self.aliases}
        return tool_spec(self.name, self.description, props, [p for p in self.required if p not in aliased])

    def arguments(self, args: dict[str, Any]) -> dict[str, Any]:
        """`args` under the parameters' names (aliases resolved); ValueError for unknown,
        doubled or missing arguments."""
        names = [p for p, _ in self.params]
        renamed = dict(self.aliases)
        unknown = set(args) - set(names) - set(renamed)
        if unknown:
            raise ValueError(f"{self.name} takes no argument(s) {', '.join(sorted(unknown))}")
        out: dict[str, Any] = {}
        for old, new in self.aliases:
            if old in args and new in args:
                raise ValueError(f"{self.name} got {new!r} twice: as {new!r} and as its older name {old!r}")
        for key, value in args.items():
            out[renamed.get(key, key)] = value
        missing = [p for p in self.required if p not in out]
        if missing:
            raise ValueError(f"{self.name} needs argument {missing[0]!r}")
        return {p: out[p] for p in names if p in out}

    def action_string(self, args: dict[str, Any]) -> str:
        """The BrowserGym action string; values are Python literals (repr), so the env's `ast`
        parser reads back exactly the value given. After a left-out optional argument the rest
        are written as keywords."""
        values, by_keyword = [], False
        given = self.arguments(args)
        for param, _ in self.params:
            if param not in given:
                by_keyword = True
                continue
            values.append(f"{param}={given[param]!r}" if by_keyword else repr(given[param]))
        return f"{self.name}({', '.join(values)})"


def _tools(actions: ActionSet) -> dict[str, ActionTool]:
    offered = {a.name: ActionTool.of(a) for a in actions.tools()}
    first = [n for n in DEFAULT_TOOL_NAMES if n in offered]
    return {n: offered[n] for n in [*first, *(n for n in offered if n not in first)]}


#: name -> tool, the default tools first, then in declaration order.
ACTION_TOOLS: Derived[ActionTool] = Derived(ACTIONS, _tools)


def build_browsergym_action_str(tool_name: str, arguments: dict[str, Any]) -> str:
    """The BrowserGym action string for a tool call (OpenEnv's name). KeyError for unknown tools."""
    if tool_name not in ACTION_TOOLS:
        raise KeyError(f"Unsupported BrowserGym tool: {tool_name}")
    return ACTION_TOOLS[tool_name].action_string(arguments)


def action_list(tool_names: tuple[str, ...] | list[str]) -> str:
    """The enabled actions in the syntax the action parser reads, one per line."""
    lines = []
    for name in tool_names:
        tool = ACTION_TOOLS[name]
        required = [(tool.shown(p), kind) for p, kind in tool.params if p not in tool.optional]
        params = ", ".join(f"'{shown}'" if kind == "string" else shown for shown, kind in required)
        lines.append(f"{name}({params}): {tool.description}")
    return "\n".join(lines)
