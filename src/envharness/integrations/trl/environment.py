"""Any registered environment as TRL's `environment_factory`: its tools become public methods.

TRL 1.16 (`GRPOTrainer(environment_factory=...)`) builds instances with a zero-argument
factory, calls `reset(**dataset_row)` before each rollout (what it returns is appended to the
last user message), exposes every other public method as a tool (its type hints and
Google-style docstring become the tool schema, its return value the tool message), and adds
`get_reward()` as a reward column of its own, named after the class (`BrowserGymToolEnv`).
TRL owns the generation loop there: the model must write its chat template's tool calls
(`load_model(spec, tools=True)` gives the shipped models a template that has them). For text
actions such as `click('13')`, use the rollout function in `integrations/trl/rollout.py`.

    from envharness.integrations.trl.environment import environment_factory, load_model
    model, tokenizer = load_model("embedded", tools=True)
    factory = environment_factory("textarena", functools.partial(TextArenaEnv, base_url=url),
                                  task="Wordle-v0", tokenizer=tokenizer)
    trainer = GRPOTrainer(model=model, processing_class=tokenizer, environment_factory=factory,
                          args=GRPOConfig(max_steps=50, ...), callbacks=[close_at_train_end(factory)])

- The opening (`reset()`'s text) is the environment's tool opening for the prompt style
  (`PromptStyle.tool_opening`, `train`'s style by default): it asks for tool calls and shows
  one in the template's form (`tool_opening.py`); `opening=` replaces it.
- Seeds: a row's `seed` (`environment_dataset` draws one per row, so per group); rows with
  none share a seed per group of `num_generations` rollouts, or per batch (`GroupSeeds`).
- `reward=`: what `get_reward` returns, `env` (the environment's own) or any name `train
  --reward` takes (`success`, Wordle's `greens`, ...); `reward_funcs` adds more as columns.
- `log=EpisodeLog(folder)`: every episode in `episodes.jsonl`, as `envharness train` writes
  it, for `envharness replay` and the report.

Several environments in one run are TRL's `dict` of factories, with `environment_dataset`
giving each row its `environment`, `task` and `seed`. With ``style="vision"`` the opening and
every tool result are content blocks, ``[{"type": "text", ...}, {"type": "image", "image":
<PIL image>}]``, which TRL passes to a vision-language model as they are.
"""

from __future__ import annotations

import functools
import inspect
import json
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from envharness.core.concurrency import run_coroutine_sync
from envharness.harness.adapter import call_tool_checked, tool_message_content
from envharness.harness.rollout import resolve_env_reward
from envharness.harness.tools import as_mcp_dict, tool_name, tool_schema
from envharness.harness.types import HarnessRolloutResult, RolloutEvent, Tool, ToolTraceEntry
from envharness.integrations.trl.environment_log import EpisodeLog, GroupSeeds, close_at_train_end
from envharness.integrations.trl.environment_rewards import message_text as _text, named_reward, reward_funcs
from envharness.integrations.trl.loading import load_model
from envharness.integrations.trl.rollout import episode_success, parse_task_prompt
from envharness.integrations.trl.tool_opening import OpeningFunction, compose_opening

_JSON_TYPES = {"string": str, "integer": int, "number": float, "boolean": bool, "array": list, "object": dict}


class ToolEnvironment:
    """One environment's episodes, one at a time, through its harness session. Subclasses made
    by `tool_environment_class` add one public method per tool."""

    #: The tools the methods call (set on each generated subclass).
    tools: tuple[Tool, ...] = ()

    def __init__(
        self,
        session_factory: Any,
        *,
        task: str | None = None,
        env: str = "",
        opening: OpeningFunction | None = None,
        seeds: GroupSeeds | None = None,
        reward: Callable[[ToolEnvironment], float] | None = None,
        log: EpisodeLog | None = None,
    ):
        self._factory = session_factory
        self._default_task = task
        self._env = env
        self._opening = opening
        self._seeds = seeds or GroupSeeds()
        self._reward_of = reward
        self._log = log
        self._session: Any = None
        self._reward = 0.0
        self._done = False
        self._episode: HarnessRolloutResult | None = None

    def reset(self, **row: Any) -> str | list[dict[str, Any]]:
        """Start an episode; what it returns opens the conversation. The dataset row may name
        `task` and `seed` (or carry them in a `task_prompt` JSON prompt); otherwise the
        factory's task, with the seed of the rollout's group."""
        self._end_session()
        task, seed = parse_task_prompt(row.get("prompt"))
        task = row.get("task") or (task if isinstance(task, str) else None) or self._default_task
        seed = row.get("seed", seed)
        if seed is None:
            seed = self._seeds.next(self)
        episode_id = uuid.uuid4().hex[:12]
        self._session = self._factory.create(task, seed, episode_id)
        self._reward, self._done = 0.0, False
        messages = list(self._session.initial_messages())
        self._episode = HarnessRolloutResult(
            messages=messages, task=getattr(self._session, "task", task), seed=seed, episode_id=episode_id
        )
        self._episode.timings["started"] = time.time()
        if self._opening is not None:
            return self._opening(messages)
        return compose_opening(messages, self.tools)

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The episode's conversation as the harness holds it: the session's opening messages,
        then each tool call and its result (a property, so TRL does not offer it as a tool)."""
        return list(self._episode.messages) if self._episode is not None else []

    def get_reward(self) -> float:
        """The episode's reward: the environment's own (its last step's) unless the factory
        named another (`reward=`). TRL already adds this as a reward column."""
        if self._reward_of is None or self._episode is None:
            return self._reward
        return self._reward_of(self)

    def _call(self, name: str, arguments: dict[str, Any]) -> str | list[dict[str, Any]]:
        """Run one tool; errors go back to the model as text, as the harness shows them. A result
        with images (a vision style's) comes back as content blocks, the images kept."""
        if self._session is None:
            return "No episode has started: reset first."
        if self._done:
            return "The episode is over; no more actions are needed."
        started = time.perf_counter()
        result = run_coroutine_sync(
            call_tool_checked(self._session, {tool_name(t): t for t in self.tools}, name, arguments)
        )
        reward = result.metadata.get("reward")
        if reward is not None:
            self._reward = float(reward)
        self._done = bool(result.done)
        content = tool_message_content(result)
        if self._done:  # TRL's loop goes on while the model calls tools: say it may stop
            note = f"The episode is over (reward {self._reward}); no more tool calls are needed."
            content = (
                [*content, {"type": "text", "text": note}]
                if isinstance(content, list)
                else f"{content}\n\n{note}"
            )
        self._note_call(name, arguments, result, content, time.perf_counter() - started)
        if isinstance(content, list) and any(p.get("type") == "image" for p in content):
            return content
        return _text([{"content": content}])

    def _note_call(
        self, name: str, arguments: dict[str, Any], result: Any, content: Any, elapsed: float
    ) -> None:
        """The call in the episode's record: the model's tool call, then the tool's message."""
        episode = self._episode
        if episode is None:
            return
        turn = len(episode.tool_trace)
        call = {"type": "function", "function": {"name": name, "arguments": dict(arguments)}}
        episode.messages += [
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "name": name, "content": content},
        ]
        episode.tool_trace.append(ToolTraceEntry(tool_name=name, arguments=dict(arguments), result=result))
        episode.events.append(RolloutEvent("tool_call", {"turn": turn, "elapsed_s": round(elapsed, 4)}))
        episode.done = bool(result.done)

    def _finished_episode(self) -> HarnessRolloutResult | None:
        """The episode so far as `train` records it: verified by the session, with its reward
        and success (None before the first reset)."""
        episode = self._episode
        if episode is None or self._session is None:
            return episode
        verdict = self._session.verify(list(episode.messages), None)
        episode.verify = verdict
        try:
            episode.env_reward = resolve_env_reward(episode, verdict)
        except ValueError:  # no reward from the environment at all: what replay finds too
            episode.env_reward = None
        episode.metrics.update(verdict.metrics)
        episode.metrics.update(env=self._env, turns=len(episode.tool_trace), success=episode_success(episode))
        return episode

    def _end_session(self) -> None:
        session = self._session
        if session is not None and self._log is not None and self._episode is not None:
            episode = self._finished_episode()
            if episode is not None:
                episode.timings["episode_s"] = round(
                    time.time() - episode.timings.pop("started", time.time()), 3
                )
                self._log.write(self._env, episode)
        self._session, self._episode = None, None
        if session is not None:
            session.close()

    def __enter__(self) -> ToolEnvironment:
        return self

    def __exit__(self, *exc: object) -> None:
        self._end_session()


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


class ToolEnvironmentFactory:
    """What `environment_factory` returns: TRL calls it for each new instance. It keeps the
    instances it made so that `close()` (or `close_at_train_end(factory)`, or leaving a `with`
    block) ends their episodes, writes the last records and frees their sessions."""

    def __init__(self, env: str, make: Callable[[], ToolEnvironment]):
        self.env = env
        self._make = make
        self.instances: list[ToolEnvironment] = []

    def __call__(self) -> ToolEnvironment:
        instance = self._make()
        self.instances.append(instance)
        return instance

    def close(self) -> None:
        """Close every instance made so far (each one's episode in play is recorded first)."""
        for instance in self.instances:
            instance.__exit__(None, None, None)  # its episode in play recorded, its session closed

    def __enter__(self) -> ToolEnvironmentFactory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def environment_factory(
    env: str,
    client_factory: Callable[[], Any],
    *,
    task: str | None = None,
    tools: Sequence[str] | None = None,
    style: str | None = None,
    tokenizer: Any = None,
    opening: str | OpeningFunction | None = None,
    reward: str = "env",
    num_generations: int | None = None,
    seed: int = 0,
    log: EpisodeLog | None = None,
    **session_options: Any,
) -> ToolEnvironmentFactory:
    """A zero-argument factory for TRL's `environment_factory`.

    `client_factory` makes one sync client of `env` per episode (e.g.
    `functools.partial(TextArenaEnv, base_url=url)`). `tools` narrows the environment's
    default tools; `style` names its prompt style (default: the one `train` uses; ``"vision"``:
    screenshots in the opening and tool results). `tokenizer`: the policy's, whose chat
    template writes the opening's example call (without it, the Hermes `<tool_call>` form).
    `opening`: your own instruction text (``{tools}``, ``{call}``, ``{example}`` are filled in),
    or a function from the style's opening messages to what `reset()` returns. `reward`: what
    `get_reward` returns (`env`, or a name `train --reward` takes). `num_generations`: TRL's
    group size, so rows without a seed get one seed per group (else one per batch), drawn
    from `seed`. `log`: an `EpisodeLog` every episode is written to. `session_options` go to
    the session factory."""
    from envharness.core.registry import env_harness

    harness = env_harness(env)
    client_factory = sync_clients(env, client_factory)
    task = task or harness.default_tasks[0]
    options, make_sessions = _session_options(env, harness, style, tools, session_options)
    reward_of = None if reward == "env" else named_reward(env, reward)
    seeds = GroupSeeds(num_generations, seed)
    probe = make_sessions(client_factory, default_task=task, **options)
    env_tools = _tools_of(probe)
    cls = tool_environment_class(env, env_tools)
    if log is not None:
        log.register(env, [task], [tool_name(t) for t in env_tools])

    def opening_of(messages: list[dict[str, Any]]) -> str | list[dict[str, Any]]:
        if callable(opening):
            return opening(messages)
        return compose_opening(messages, env_tools, tokenizer=tokenizer, instruction=opening)

    def make() -> ToolEnvironment:
        factory = make_sessions(client_factory, default_task=task, **options)
        return cls(factory, task=task, env=env, opening=opening_of, seeds=seeds, reward=reward_of, log=log)

    return ToolEnvironmentFactory(env, make)


def _async_advice(env: str, what: str) -> str:
    return (
        f"environment_factory needs a synchronous client (TRL calls the tools without an event loop), "
        f"and {what} is async: pass functools.partial(SPEC.sync_client, base_url=...) for {env} "
        "(SPEC: its EnvSpec, e.g. envharness.core.registry.get_spec(name))"
    )


def sync_clients(env: str, client_factory: Callable[[], Any]) -> Callable[[], Any]:
    """`client_factory`, refused at once when it makes async clients (a class or a partial of
    one), and checked on each client it makes (TRL's path cannot await)."""
    made = client_factory.func if isinstance(client_factory, functools.partial) else client_factory
    if inspect.isclass(made) and inspect.iscoroutinefunction(getattr(made, "reset", None)):
        raise TypeError(_async_advice(env, made.__name__))

    def make() -> Any:
        client = client_factory()
        if inspect.iscoroutinefunction(getattr(client, "reset", None)):
            raise TypeError(_async_advice(env, type(client).__name__))
        return client

    return make


def _session_options(
    env: str, harness: Any, style: str | None, tools: Sequence[str] | None, given: dict[str, Any]
) -> tuple[dict[str, Any], Callable[..., Any]]:
    """(session factory options, the session factory builder) for a prompt style of `env`: its
    tool opening (else its opening) as the prompt, its view of later pages, its own sessions."""
    from envharness.prompts import get_prompt_style, opening_builder

    chosen = get_prompt_style(style or harness.train_prompt, env)
    options: dict[str, Any] = {"prompt_builder": chosen.tool_opening or opening_builder(chosen)}
    if chosen.observation_text is not None:
        options["observation_text"] = chosen.observation_text
    options.update(given)
    if tools is not None:
        options["tools"] = list(tools)
    if chosen.session_factory is not None:
        return options, chosen.session_factory
    if style is not None and chosen.vision:
        raise ValueError(f"{env}: prompt style {style!r} has no sessions of its own; leave style out")
    options.setdefault("reset_kwargs", dict(harness.reset_kwargs))
    return options, harness.session_factory


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


__all__ = [
    "EpisodeLog",
    "ToolEnvironment",
    "ToolEnvironmentFactory",
    "close_at_train_end",
    "environment_dataset",
    "environment_factory",
    "load_model",
    "reward_funcs",
    "tool_environment_class",
]
