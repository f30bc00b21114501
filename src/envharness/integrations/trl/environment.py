"""Any registered environment as TRL's `environment_factory`: its tools become public methods.

TRL 1.16 (`GRPOTrainer(environment_factory=...)`) builds instances with a zero-argument
factory, calls `reset(**dataset_row)` before each rollout (the returned text is appended to
the last user message), exposes every other public method as a tool (its type hints and
Google-style docstring become the tool schema, its return value the tool message), and
scores the rollout with `get_reward()`. TRL owns the generation loop there, so the model
must speak its chat template's tool-call format (e.g. Qwen, Hermes); for text actions such
as `click('13')`, use the rollout function in `integrations/trl/rollout.py` instead.

The methods are made from the environment's own tool specs (what eval, train and MCP call),
and each call goes through the session an episode uses, so the tool messages are the ones
the harness shows a model:

    factory = environment_factory("textarena", functools.partial(TextArenaEnv, base_url=url), task="Wordle-v0")
    trainer = GRPOTrainer(model=..., environment_factory=factory, args=GRPOConfig(max_steps=50, ...))

Several environments in one run are TRL's `dict` of factories, with `environment_dataset` giving
each row its `environment`, `task` and `seed`:

    factories = {"browsergym": environment_factory("browsergym", browser_clients),
                 "textarena": environment_factory("textarena", wordle_clients, task="Wordle-v0")}
    dataset = environment_dataset({"browsergym": ["click-test"], "textarena": ["Wordle-v0"]}, 64)
    trainer = GRPOTrainer(model=..., environment_factory=factories, train_dataset=dataset, ...)

With ``style="vision"`` (an environment's prompt style whose tool results carry screenshots, such
as the browser's), a tool returns content blocks, ``[{"type": "image", "image": <PIL image>},
{"type": "text", ...}]``, which TRL passes to a vision-language model as they are.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from envharness.harness.adapter import call_tool_checked, tool_message_content
from envharness.harness.concurrency import run_coroutine_sync
from envharness.harness.tools import as_mcp_dict, tool_name, tool_schema
from envharness.harness.types import Tool
from envharness.integrations.trl.rollout import parse_task_prompt

_JSON_TYPES = {"string": str, "integer": int, "number": float, "boolean": bool, "array": list, "object": dict}


class ToolEnvironment:
    """One environment's episodes, one at a time, through its harness session. Subclasses made
    by `tool_environment_class` add one public method per tool."""

    #: The tools the methods call (set on each generated subclass).
    tools: tuple[Tool, ...] = ()

    def __init__(self, session_factory: Any, *, task: str | None = None):
        self._factory = session_factory
        self._default_task = task
        self._session: Any = None
        self._reward = 0.0
        self._done = False

    def reset(self, **row: Any) -> str:
        """Start an episode. The dataset row may name `task` and `seed` (or carry them in a
        `task_prompt` JSON prompt); otherwise the factory's task with a fresh seed."""
        self._end_session()
        task, seed = parse_task_prompt(row.get("prompt"))
        task = row.get("task") or (task if isinstance(task, str) else None) or self._default_task
        seed = row.get("seed", seed)
        self._session = self._factory.create(task, seed)
        self._reward, self._done = 0.0, False
        return _text([m for m in self._session.initial_messages() if m.get("role") == "user"])

    def get_reward(self) -> float:
        """The environment's reward for the episode so far (its last step's reward)."""
        return self._reward

    def _call(self, name: str, arguments: dict[str, Any]) -> str | list[dict[str, Any]]:
        """Run one tool; errors go back to the model as text, as the harness shows them. A result
        with images (a vision style's) comes back as content blocks, the images kept."""
        if self._session is None:
            return "No episode has started: reset first."
        if self._done:
            return "The episode is over; no more actions are needed."
        result = run_coroutine_sync(
            call_tool_checked(self._session, {tool_name(t): t for t in self.tools}, name, arguments)
        )
        reward = result.metadata.get("reward")
        if reward is not None:
            self._reward = float(reward)
        self._done = bool(result.done)
        content = tool_message_content(result)
        if isinstance(content, list) and any(p.get("type") == "image" for p in content):
            return content
        return _text([{"content": content}])

    def _end_session(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            session.close()

    def __enter__(self) -> ToolEnvironment:
        return self

    def __exit__(self, *exc: object) -> None:
        self._end_session()


def _text(messages: list[dict[str, Any]]) -> str:
    """Messages' text (image parts left out: TRL's tool messages are text)."""
    parts = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            parts += [p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text"]
        elif content:
            parts.append(str(content))
    return "\n\n".join(p for p in parts if p)


def _tool_method(tool: Tool) -> Callable[..., str]:
    """A method whose signature, type hints and docstring say what the tool's JSON schema says
    (TRL reads them with transformers' `get_json_schema`)."""
    name = tool_name(tool)
    schema = tool_schema(tool)
    properties: dict[str, Any] = dict(schema.get("properties") or {})
    required = set(schema.get("required") or [])
    parameters = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    annotations: dict[str, Any] = {}
    for arg in sorted(properties, key=lambda a: a not in required):  # required ones first, as Python wants
        declared = properties[arg].get("type")
        kind = _JSON_TYPES.get(
            declared[0] if isinstance(declared, list) and declared else declared, str
        )  # ["string", "array"]: the first
        annotations[arg] = kind if arg in required else kind | None
        default = inspect.Parameter.empty if arg in required else None
        parameters.append(
            inspect.Parameter(
                arg, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=default, annotation=annotations[arg]
            )
        )
    signature = inspect.Signature(parameters, return_annotation=str)

    def method(self: ToolEnvironment, *args: Any, **kwargs: Any) -> str:
        bound = signature.bind(self, *args, **kwargs)
        return self._call(name, {k: v for k, v in bound.arguments.items() if k != "self" and v is not None})

    lines = [
        (tool.get("description") if isinstance(tool, dict) else getattr(tool, "description", "")) or name
    ]
    if properties:
        lines += ["", "Args:"] + [
            f"    {arg}: {properties[arg].get('description') or arg}"
            for arg in signature.parameters
            if arg != "self"
        ]
    method.__name__ = method.__qualname__ = name
    method.__doc__ = "\n".join(lines)
    method.__signature__ = signature  # type: ignore[attr-defined]
    method.__annotations__ = {**annotations, "return": str}
    return method


def _class_name(env: str) -> str:
    """`AsyncBrowserGymEnv` -> `BrowserGymToolEnv`: TRL names the reward column after the class."""
    from envharness.core.registry import get_spec

    client = get_spec(env).load("client").__name__
    base = client.removeprefix("Async").removesuffix("Env").removesuffix("Client")
    if not base:
        base = "".join(part.title() for part in env.replace("-", "_").split("_"))
    return f"{base}ToolEnv"


_CLASSES: dict[tuple[str, str], type[ToolEnvironment]] = {}


def tool_environment_class(env: str, tools: Sequence[Tool] = ()) -> type[ToolEnvironment]:
    """The `ToolEnvironment` subclass of `env` with one method per tool (one class per
    environment and tool set: TRL tells environments apart by their exact type)."""
    key = (env, json.dumps(list(tools), sort_keys=True, default=str))
    if key not in _CLASSES:
        methods = {tool_name(t): _tool_method(t) for t in tools}
        reserved = sorted(set(methods) & {"reset", "get_reward"})
        if reserved:
            raise ValueError(f"{env}: a tool may not be named {', '.join(reserved)} (TRL's own methods)")
        attributes = {**methods, "tools": tuple(tools), "__module__": __name__}
        _CLASSES[key] = type(_class_name(env), (ToolEnvironment,), attributes)
    return _CLASSES[key]


def _tools_of(factory: Any) -> list[Tool]:
    """The tools a session factory's sessions offer: its `tool_specs` when it declares them,
    else those of one session opened and closed at once."""
    specs = getattr(factory, "tool_specs", None)
    if specs is None:
        session = factory.create(None, None)
        try:
            specs = session.list_tools()
        finally:
            session.close()
    return [as_mcp_dict(t) for t in specs]


def environment_factory(
    env: str,
    client_factory: Callable[[], Any],
    *,
    task: str | None = None,
    tools: Sequence[str] | None = None,
    style: str | None = None,
    **session_options: Any,
) -> Callable[[], ToolEnvironment]:
    """A zero-argument factory for TRL's `environment_factory`: each instance gets its own
    sync client of `env` from `client_factory` (e.g. `functools.partial(TextArenaEnv, base_url=url)`).
    `tools` narrows the environment's default tools; `style` names a prompt style of the
    environment with sessions of its own (``"vision"``: screenshots in the tool results);
    `session_options` go to the session factory."""
    from envharness.core.registry import env_harness
    from envharness.prompts import get_prompt_style

    harness = env_harness(env)
    options = dict(session_options)
    if tools is not None:
        options["tools"] = list(tools)
    task = task or harness.default_tasks[0]
    make_sessions = harness.session_factory
    if style is not None:
        chosen = get_prompt_style(style, env)
        if chosen.session_factory is None:
            raise ValueError(f"{env}: prompt style {style!r} has no sessions of its own; leave style out")
        make_sessions = chosen.session_factory
    else:
        options.setdefault("reset_kwargs", dict(harness.reset_kwargs))

    def make() -> ToolEnvironment:
        factory = make_sessions(client_factory, default_task=task, **options)
        return tool_environment_class(env, _tools_of(factory))(factory, task=task)

    return make


def environment_dataset(
    tasks: Mapping[str, Sequence[str]],
    num_prompts: int,
    *,
    seed: int = 0,
    instruction: str = "Complete the task with the tools.",
) -> Any:
    """A `datasets.Dataset` for a `dict` of environment factories: `num_prompts` rows cycling
    through every (environment, task) of `tasks`, each with its `environment` (the dict's key),
    `task`, a training `seed` drawn from `seed` (as `task_dataset` draws them) and a one-message
    chat `prompt` (`reset` appends the episode's opening to it)."""
    import random

    from datasets import Dataset

    pairs = [(env, task) for env, env_tasks in tasks.items() for task in env_tasks]
    if not pairs:
        raise ValueError("at least one (environment, task) is needed")
    rng = random.Random(seed)
    rows = [pairs[i % len(pairs)] for i in range(num_prompts)]
    return Dataset.from_dict(
        {
            "prompt": [[{"role": "user", "content": instruction}] for _ in rows],
            "environment": [env for env, _ in rows],
            "task": [task for _, task in rows],
            "seed": [rng.randrange(1_000_000, 2_000_000) for _ in rows],
        }
    )


__all__ = ["ToolEnvironment", "environment_dataset", "environment_factory", "tool_environment_class"]
