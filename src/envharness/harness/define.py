"""`define_environment`: an environment that eval, train, MCP and the fleet can play, from its
`Environment` class and a few facts about it.

Everything else is derived: the tool from the action type (its name from the class, its
arguments and their descriptions from the pydantic fields, its description from the
docstring), or, with `tools=`, one tool per typed method (`core/tool_actions.py`); the client
from the observation type, the session factory, the task checks from the task list, a parser
that reads a JSON tool call (or a plain reply as a one-argument tool's argument), and a
conversation prompt from the observation's text. The long form (an `EnvSpec` naming a
session factory, prompt styles and a parser of your own: `examples/custom_env/`) stays
available for environments that need more.

    SPEC = define_environment(NumberGuessEnvironment, tasks=["guess-10", "guess-100"], scripted_policy=bisect)
    # envharness eval --env my_module:SPEC --model scripted
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from envharness.core.client import AsyncEnvClient
from envharness.core.environment import Environment
from envharness.core.registry import EnvSpec
from envharness.core.tool_actions import ToolCallAction, tool_environment
from envharness.core.types import Action, Observation
from envharness.harness.define_tools import tools_opening, tools_web_info
from envharness.harness.env_harness import EnvHarness, ScriptedPolicy, TaskList
from envharness.harness.prompt_style import Message, PromptStyle
from envharness.harness.session import ClientSessionFactory
from envharness.harness.step_session import StepEnvSessionAdapter, default_verify
from envharness.harness.success import FULL_SCORE, SuccessRule, judge
from envharness.harness.tool_parsing import parse_json_tool_calls
from envharness.harness.tools import tool_spec
from envharness.harness.types import Tool, ToolCall, ToolResult

#: What every observation carries besides what it shows.
_BOOKKEEPING = set(Observation.model_fields)
_JSON_TYPE = {int: "integer", float: "number", bool: "boolean", str: "string"}


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def action_tool(action_type: type[Action]) -> Tool:
    """The tool an action type is: `GuessAction` -> `guess`, its fields the arguments."""
    schema = action_type.model_json_schema()
    properties = {}
    for field_name, field in schema.get("properties", {}).items():
        if field_name in Action.model_fields:
            continue
        properties[field_name] = {
            k: v for k, v in field.items() if k in ("type", "description", "enum", "items")
        }
    required = [r for r in schema.get("required", []) if r in properties]
    name = _snake(action_type.__name__.removesuffix("Action")) or "act"
    description = (action_type.__doc__ or "").strip().splitlines()[0] if action_type.__doc__ else name
    return tool_spec(name, description, properties, required)


def observation_as_text(observation: Any) -> str:
    """What an observation shows, as text: its one text field, or each field on a line."""
    fields = {
        k: v
        for k, v in (
            observation.model_dump() if hasattr(observation, "model_dump") else dict(observation)
        ).items()
        if k not in _BOOKKEEPING
    }
    texts = [v for v in fields.values() if isinstance(v, str)]
    if len(fields) == 1 and len(texts) == 1:
        return texts[0]
    return "\n".join(f"{k}: {v}" for k, v in fields.items())


def action_tools(action_type: type[Action]) -> list[Tool]:
    """The tools an action type offers: each of a `ToolCallAction`'s, else the one it is."""
    if issubclass(action_type, ToolCallAction):
        return action_type.tool_specs()
    return [action_tool(action_type)]


def action_builder(action_type: type[Action]) -> Callable[[str, dict[str, Any]], Action]:
    """(tool name, arguments) -> the wire action that calls it."""
    if issubclass(action_type, ToolCallAction):
        return lambda name, arguments: action_type(tool_name=name, arguments=arguments)
    return lambda name, arguments: action_type(**arguments)


def reply_parser(tools: Tool | Sequence[Tool]) -> Callable[[str], ToolCall | list[ToolCall] | None]:
    """A model's plain reply as tool calls: the JSON tool calls it wrote (the chat template's
    `<tool_call>` form included), else, for an environment whose one tool takes one required
    argument, the reply as that argument (an integer argument takes the first integer)."""
    tools = [tools] if isinstance(tools, dict) else list(tools)
    tool = tools[0] if len(tools) == 1 else None
    required = tool["inputSchema"].get("required", []) if tool is not None else []
    argument = required[0] if len(required) == 1 else None

    def parse(text: str) -> ToolCall | list[ToolCall] | None:
        calls = parse_json_tool_calls(text)
        if calls or argument is None or tool is None:
            return calls
        kind = tool["inputSchema"]["properties"][argument].get("type")
        if kind in ("integer", "number"):
            found = re.search(r"-?\d+(?:\.\d+)?" if kind == "number" else r"-?\d+", text)
            if found is None:
                return ToolCall(
                    id="reply",
                    name=tool["name"],
                    args={},
                    metadata={"parse_error": f"no number in the reply for {argument}"},
                )
            value: Any = float(found.group()) if kind == "number" else int(found.group())
        else:
            value = text.strip().strip("`").strip()
        return ToolCall(id="reply", name=tool["name"], args={argument: value})

    return parse


class ActionSessionFactory(ClientSessionFactory[StepEnvSessionAdapter]):
    """One client and one session per episode; a tool call becomes the action type's action."""

    def __init__(
        self,
        client_factory: Callable[[], Any],
        *,
        action_type: type[Action],
        tasks: Sequence[str] = (),
        default_task: str | None = None,
        tools: Iterable[str] | None = None,
        reset_kwargs: dict[str, Any] | None = None,
        prompt_builder: Callable[[Any, Any, list[str]], list[Message]] | None = None,
        observation_text: Callable[[Any], str] | None = None,
        full_score: float = FULL_SCORE,
        success: SuccessRule | None = None,
        **_ignored: Any,
    ) -> None:
        super().__init__(client_factory)
        self.action_type = action_type
        #: The tools every session offers (known without a session).
        self.tool_specs = action_tools(action_type)
        names = [t["name"] for t in self.tool_specs]
        unknown = [t for t in (tools or ()) if t not in names]
        if unknown:
            raise ValueError(f"unknown tool(s) {unknown}; this environment's: {', '.join(names)}")
        self.tasks, self.default_task = tuple(tasks), default_task
        self.reset_kwargs = dict(reset_kwargs or {})
        self.prompt_builder = prompt_builder or opening_for(self.tool_specs)
        self.observation_text = observation_text or observation_as_text
        self.verify = functools.partial(_verify, full_score=full_score, rule=success)

    def session_for(
        self, client: Any, task: Any, seed: int | None, episode_id: str | None
    ) -> StepEnvSessionAdapter:
        task = task if isinstance(task, str) and task in self.tasks else self.default_task
        names = [t["name"] for t in self.tool_specs]
        return StepEnvSessionAdapter(
            client,
            task=task,
            seed=seed,
            episode_id=episode_id,
            tool_specs=self.tool_specs,
            action_builder=action_builder(self.action_type),
            initial_messages_builder=lambda result, task: self.prompt_builder(
                result.observation, task, names
            ),
            tool_result_builder=lambda name, arguments, result, state: ToolResult(
                data=self.observation_text(result.observation),
                done=bool(result.done),
                metadata={"reward": result.reward, "done": bool(result.done)},
            ),
            verify_builder=self.verify,
            reset_kwargs={**self.reset_kwargs, **({"task": task} if self.tasks and task is not None else {})},
        )


def _verify(
    transcript: list[Message],
    final_state: Any,
    last_result: Any,
    state: Any,
    *,
    full_score: float = FULL_SCORE,
    rule: SuccessRule | None = None,
) -> Any:
    """OpenEnv's default verify, where a first observation's missing reward is 0 (an episode
    whose actions never reached the environment scored nothing, it did not fail), plus the
    declared verdict: success, or partial credit below it."""
    verdict = default_verify(transcript, final_state, last_result, state)
    if verdict.env_reward is None:
        verdict.env_reward = 0.0
    observation = getattr(last_result, "observation", None)
    verdict.metrics.update(judge(verdict.env_reward, observation, full_score=full_score, rule=rule).metrics())
    return verdict


def default_opening(observation: Any, task: Any, tool_names: list[str]) -> list[Message]:
    """The first observation's text and how to answer."""
    return [
        {"role": "user", "content": f"{observation_as_text(observation)}\n\nReply with your {tool_names[0]}."}
    ]


def opening_for(tools: Sequence[Tool]) -> Callable[[Any, Any, list[str]], list[Message]]:
    """The default opening: one tool's, or the tools with their arguments and the call's form."""
    if len(tools) == 1:
        return default_opening
    return functools.partial(tools_opening, tools=tuple(tools), text=observation_as_text)


@dataclass(frozen=True)
class _TaskCheck:
    tasks: tuple[str, ...]

    def __call__(self, name: str) -> str:
        if name not in self.tasks:
            raise ValueError(f"unknown task {name!r}; choose from {', '.join(self.tasks)}")
        return name


def define_environment(
    environment: type[Any],
    *,
    tools: Sequence[str | Callable[..., Any]] | None = None,
    tasks: Iterable[str] | None = None,
    default_tasks: Sequence[str] | None = None,
    splits: dict[str, Sequence[str]] | None = None,
    scripted_policy: ScriptedPolicy | None = None,
    opening: Callable[[Any, Any, list[str]], list[Message]] | None = None,
    observation_text: Callable[[Any], str] | None = None,
    tool_call_parser: Callable[[str], Any] | None = None,
    summary: str = "",
    reward_range: tuple[float, float] = (0.0, FULL_SCORE),
    success: SuccessRule | None = None,
) -> EnvSpec:
    """The `EnvSpec` of an `Environment` subclass: its `observation_type` set, and either an
    `action_type` and `step` (one tool), or `tools`: the names of its typed methods (or functions
    taking the environment first), one tool each (`core/tool_actions.py`). `tasks`: the names
    its `reset(task=...)` takes (None: it takes no task, and plays one named after it).
    `opening` / `observation_text`: how the first observation and each later one read (default:
    the observation's text). `tool_call_parser`: a reply's text -> `ToolCall`(s) or None.
    `reward_range`: every reward lies in it (`check` verifies), its top is the task's full
    score. `success(reward, final_observation)`: what a success is (default: the full score);
    a positive reward short of it is partial credit. Serve it as ``module:ATTRIBUTE``."""
    low, high = reward_range
    if not low < high:
        raise ValueError(
            f"reward_range must be (lowest, full score) with lowest < full score, not {reward_range}"
        )
    if tool_call_parser is not None and not callable(tool_call_parser):
        raise TypeError(
            "tool_call_parser must be a function: reply text -> ToolCall, a list of them, or None"
        )
    served = _served(environment, tools)
    specs = action_tools(served.action_type)
    task_names = tuple(tasks) if tasks is not None else ()
    playable = task_names or (_snake(environment.__name__.removesuffix("Environment")) or "episode",)
    defaults = tuple(default_tasks or playable[:1])
    client = type(
        f"Async{environment.__name__.removesuffix('Environment')}Env",
        (AsyncEnvClient,),
        {"observation_type": served.observation_type, "__module__": environment.__module__},
    )
    opening = opening or opening_for(specs)
    styles = {
        "default": PromptStyle(
            "default",
            "the observation's text, then each step's",
            opening=opening,
            observation_text=observation_text,
        )
    }
    harness = EnvHarness(
        env="",
        session_factory=functools.partial(
            ActionSessionFactory,
            action_type=served.action_type,
            tasks=task_names,
            default_task=defaults[0] if task_names else None,
            prompt_builder=opening,
            observation_text=observation_text,
            full_score=float(high),
            success=success,
        ),
        tool_call_parser=tool_call_parser or reply_parser(specs),
        task_list=lambda: TaskList(
            tasks=playable, splits={"default": defaults, **{k: tuple(v) for k, v in (splits or {}).items()}}
        ),
        check_task=_TaskCheck(playable),
        default_tasks=defaults,
        prompt_styles=styles,
        scripted_policy=scripted_policy,
        reward_range=(float(low), float(high)),
    )
    return EnvSpec(
        name="",
        environment=served,
        client=client,
        harness=harness,
        web_info=functools.partial(tools_web_info, tuple(specs), playable, defaults[0]) if tools else None,
        summary=summary or _first_line(environment),
    )


def _served(environment: type[Any], tools: Sequence[Any] | None) -> type[Environment]:
    """The class the server runs: the environment itself, or with `tools`, its tool-calling form."""
    if not (isinstance(environment, type) and issubclass(environment, Environment)):
        raise TypeError(f"define_environment takes an Environment subclass, not {environment!r}")
    if tools is not None:
        return tool_environment(environment, tools)
    if environment.action_type is Action:
        raise ValueError(
            f"{environment.__name__} has no action_type: set one (and step), or name its tool methods "
            "with tools=[...]"
        )
    return environment


def _first_line(obj: Any) -> str:
    return (obj.__doc__ or "").strip().splitlines()[0] if obj.__doc__ else ""


__all__ = [
    "ActionSessionFactory",
    "action_builder",
    "action_tool",
    "action_tools",
    "define_environment",
    "observation_as_text",
    "reply_parser",
]
