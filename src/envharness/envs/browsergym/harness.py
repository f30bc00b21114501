"""How agents play the browser: the `EnvHarness` that eval, train, the scripted policy, MCP
and `/web` find through the `browsergym` `EnvSpec` (core/registry.py).

Everything MiniWoB- or BrowserGym-specific that a generic layer needs is reached from here:
the session factory (BrowserGym actions as tools), the action-text parser, the task list,
the prompt styles (`prompts.py`), the scripted solutions and the page info.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from typing import Any

from envharness._deprecated import deprecated_names
from envharness.envs.browsergym import miniwob
from envharness.envs.browsergym.action_set import PARAMS
from envharness.envs.browsergym.action_text import (
    ACTION_TOOLS,
    DEFAULT_TOOL_NAMES,
    build_browsergym_action_tool_call,
)
from envharness.envs.browsergym.scripted import scripted_action
from envharness.envs.browsergym.sessions import BrowserGymSessionFactory
from envharness.envs.browsergym.tasks import MINIWOB_DEFAULT_TASKS, TaskSet, load_task_set
from envharness.harness.env_harness import EnvHarness, TaskList

#: A small MiniWoB++ set: clicking, typing, forms; all solved by the scripted policy.
DEFAULT_TASKS = MINIWOB_DEFAULT_TASKS

#: An example value of each parameter name, for `/web`'s list of actions.
EXAMPLE_VALUES = {name: info.example for name, info in PARAMS.items()}


def task_list() -> TaskList:
    """All 125 MiniWoB++ tasks; `default` is eval's small set."""
    return TaskList(tasks=tuple(miniwob.all_tasks()), splits={"default": DEFAULT_TASKS})


def task_set_list(task_set: TaskSet) -> TaskList:
    """A task set's tasks and splits (web tasks: theirs; `default` is all of them unless named)."""
    return TaskList(
        tasks=task_set.all_tasks(), splits={"default": task_set.default_tasks(), **task_set.splits()}
    )


def benchmark_task_list(benchmark: str) -> TaskList:
    """A BrowserGym benchmark's tasks (its package's gym registry); `default` is the first."""
    from envharness.envs.browsergym.gym_engine import benchmarks

    tasks = benchmarks.benchmark_tasks(benchmarks.check_benchmark(benchmark))
    return TaskList(tasks=tasks, splits={"default": tasks[:1]})


def served_task_list(options: Mapping[str, Any]) -> TaskList:
    """What a server started with `options` serves: a benchmark's tasks, a task set's, or MiniWoB's."""
    benchmark = options.get("benchmark", "miniwob")
    if benchmark != "miniwob":
        return benchmark_task_list(benchmark)
    spec = options.get("tasks")
    return task_list() if spec is None else task_set_list(load_task_set(spec))


def configure(options: Mapping[str, Any]) -> EnvHarness:
    """The harness for a server started with `options`: with ``tasks=`` (web tasks), their task
    list, checks and scripted solutions; with a ``benchmark`` other than miniwob, that
    benchmark's tasks; any other option changes nothing an agent sees."""
    benchmark = options.get("benchmark", "miniwob")
    if benchmark != "miniwob":  # BrowserGym's engine: the benchmark package's own task list
        from envharness.envs.browsergym.gym_engine import benchmarks

        listing = benchmark_task_list(benchmark)
        return dataclasses.replace(
            HARNESS,
            task_list=lambda: listing,
            check_task=functools.partial(benchmarks.check_task, benchmarks.check_benchmark(benchmark)),
            default_tasks=listing.splits["default"],
            clock_driven=None,
            replay_caveat=f"BrowserGym's {benchmark} pages are live sites or their servers' state: the same seed "
            "and actions need not show the same pages",
        )
    spec = options.get("tasks")
    if spec is None:
        return HARNESS
    task_set = load_task_set(spec)  # ValueError saying why when it cannot be loaded
    return dataclasses.replace(
        HARNESS,
        task_list=functools.partial(task_set_list, task_set),
        check_task=task_set.check_task,
        default_tasks=task_set.default_tasks(),
        scripted_policy=functools.partial(scripted_action, solve=task_set.solve),
        clock_driven=None,
    )


def describe_observation(observation: Any) -> tuple[str, str]:
    """(goal, page text) of a browser observation, for eval's records."""
    get = observation.get if isinstance(observation, dict) else (lambda k, d=None: getattr(observation, k, d))
    return get("goal", "") or "", get("axtree_txt", "") or get("text", "") or ""


def browser_actions() -> list[dict[str, str]]:
    """Each BrowserGym action with its signature and an example, the seed's five first."""
    actions = []
    for name, tool in ACTION_TOOLS.items():  # the default tools first
        signature = ", ".join(p if p not in tool.optional else f"{p}?" for p, _ in tool.params)
        example = tool.action_string({p: EXAMPLE_VALUES[p] for p, _ in tool.params if p not in tool.optional})
        actions.append(
            {
                "name": name,
                "signature": f"{name}({signature})",
                "description": tool.description,
                "example": example,
            }
        )
    return actions


def web_info() -> dict[str, Any]:
    """What `/web` shows for the browser: a task picker, screenshots, clickable `[bid]`s."""
    return {
        "tasks": list(miniwob.all_tasks()),
        "default_task": "click-test",
        "actions": browser_actions(),
        "action_field": "action_str",
        "goal_field": "goal",
        "text_field": "axtree_txt",
        "bids": True,
        "screenshots": True,
        "action_note": "Several actions on separate lines run in order. Element ids are the [bid]s of the page text.",
    }


HARNESS = EnvHarness(
    env="browsergym",
    session_factory=BrowserGymSessionFactory,
    tool_call_parser=build_browsergym_action_tool_call,
    task_list=task_list,
    check_task=miniwob.check_task,
    default_tasks=DEFAULT_TASKS,
    prompt_styles="envharness.envs.browsergym.prompts:STYLES",
    default_prompt="default",
    train_prompt="compact",
    default_tools=tuple(DEFAULT_TOOL_NAMES),
    scripted_policy=scripted_action,
    # the prompts read only the accessibility tree, so the pruned HTML and element properties
    # are not computed; a click on a bid that is not on the page fails after 1 s instead of 3 s
    train_server_options={"pruned_html": False, "extra_properties": False, "action_timeout_ms": 1000.0},
    reset_kwargs={"pruned_html": False, "extra_properties": False},
    screenshots=True,
    describe_observation=describe_observation,
    configure=configure,
    clock_driven=miniwob.CLOCK_DRIVEN_TASKS.get,
)


# Names that moved to `sessions.py`, where code written before it (the seed tutorial:
# `from envharness.envs.browsergym.harness import ...`) imports them: they warn (`_deprecated.py`).
__getattr__ = deprecated_names(__name__)
