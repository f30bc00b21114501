"""BrowserGym as a harness session: browser actions as MCP tools, observations as tool results.

`BrowserGymSessionFactory(client_factory=..., default_task=...)` gives every episode a fresh
client (sync `BrowserGymEnv` as in OpenEnv's tutorial, or async `AsyncBrowserGymEnv`) wrapped
in a `StepEnvSessionAdapter`. Each tool call runs the equivalent BrowserGym action string;
the tool result carries the observation as text (goal, url, error, AXTree) plus reward and
done, and `verify` forwards the environment's reward.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

from envharness.envs.browsergym.action_text import (
    ACTION_TOOLS,
    DEFAULT_TOOL_NAMES,
    build_browsergym_action_str,
    build_browsergym_action_tool_call,
)
from envharness.harness.session import ClientSessionFactory
from envharness.harness.step_session import StepEnvSessionAdapter, to_plain
from envharness.harness.types import Message, ToolResult, VerifyResult

_TASK_NAME = re.compile(r"^[\w./-]+$")


def _field(observation: Any, name: str) -> Any:
    if isinstance(observation, dict):
        return observation.get(name)
    return getattr(observation, name, None)


def format_observation(
    observation: Any, *, task: Any = None, max_chars: int | None = None, with_error: bool = True
) -> str:
    """The page as the model reads it: goal, URL, the last action's error, the AXTree.
    (Tool results pass `with_error=False`: their error travels in `ToolResult.error`.)"""
    goal = _field(observation, "goal") or (task if isinstance(task, str) else "")
    page = _field(observation, "axtree_txt") or _field(observation, "text") or ""
    if max_chars is not None and len(page) > max_chars:
        page = page[:max_chars] + f"\n... [{len(page) - max_chars} more characters cut]"
    parts = [f"Goal: {goal}"] if goal else []
    if _field(observation, "url"):
        parts.append(f"URL: {_field(observation, 'url')}")
    if with_error and _field(observation, "last_action_error"):
        parts.append(f"Previous action error: {_field(observation, 'last_action_error')}")
    parts.append(f"Page (accessibility tree):\n{page}")
    return "\n\n".join(parts)


def action_instructions(tool_names: Iterable[str]) -> str:
    """How to act, listing the enabled actions in the syntax the parser reads."""
    lines = []
    for name in tool_names:
        tool = ACTION_TOOLS[name]
        params = ", ".join(tool.shown(p) if p not in tool.optional else f"{p}=..." for p, _ in tool.params)
        lines.append(f"- {name}({params}): {tool.description}")
    return (
        "You control a web browser to complete the goal below. Page elements are named by the\n"
        "id in square brackets before them, e.g. [13]. Reply with exactly one action, for\n"
        "example:\nAction: click('13')\n\nAvailable actions:\n" + "\n".join(lines)
    )


def resolve_task(task: Any, default_task: str | None) -> str | None:
    """The MiniWoB task of an episode: a task name (`'click-test'`), a dict with `task`/
    `task_name`, or anything else (a chat prompt from a dataset) -> `default_task`."""
    if isinstance(task, dict):
        task = task.get("task") or task.get("task_name")
    if isinstance(task, str) and _TASK_NAME.match(task.strip()):
        return task.strip()
    return default_task


class BrowserGymSessionFactory(ClientSessionFactory[StepEnvSessionAdapter]):
    """Makes one BrowserGym session (and client) per episode.

    `tools`: which actions the model may call (default the seed's five); `extra_tools` adds
    opt-in ones (`dblclick`, `select_option`, `press`, ...). `max_observation_chars` bounds
    the page text in each message (None: no bound). `prompt_builder(observation, task,
    tool_names) -> messages` replaces the first prompt (e.g. a compact one for small models);
    `observation_text(observation) -> str` replaces the page text of later turns' tool results.
    """

    def __init__(
        self,
        client_factory: Callable[[], Any],
        *,
        default_task: str | None = None,
        tools: Iterable[str] = DEFAULT_TOOL_NAMES,
        extra_tools: Iterable[str] = (),
        reset_kwargs: dict[str, Any] | None = None,
        max_observation_chars: int | None = 12000,
        prompt_builder: Callable[[Any, Any, list[str]], list[Message]] | None = None,
        observation_text: Callable[[Any], str] | None = None,
    ):
        names = list(dict.fromkeys([*tools, *extra_tools]))
        unknown = [n for n in names if n not in ACTION_TOOLS]
        if unknown:
            raise ValueError(f"unknown BrowserGym tool(s) {unknown}; known: {', '.join(ACTION_TOOLS)}")
        super().__init__(client_factory)
        self.default_task = default_task
        self.tool_names = names
        self._tool_specs = [ACTION_TOOLS[n].spec() for n in names]
        #: The tools every session offers (known without a session: TRL's environment_factory reads them).
        self.tool_specs = self._tool_specs
        self._reset_kwargs = dict(reset_kwargs or {})
        self._max_chars = max_observation_chars
        self._prompt_builder = prompt_builder
        self._observation_text = observation_text

    def session_for(
        self, client: Any, task: Any, seed: int | None, episode_id: str | None
    ) -> StepEnvSessionAdapter:
        task_name = resolve_task(task, self.default_task)
        reset_kwargs = dict(self._reset_kwargs)
        if task_name is not None:
            reset_kwargs["task"] = task_name
        return StepEnvSessionAdapter(
            client,
            task=task_name,
            seed=seed,
            episode_id=episode_id,
            tool_specs=self._tool_specs,
            action_builder=self._action,
            initial_messages_builder=self._initial_messages,
            tool_result_builder=self._tool_result,
            verify_builder=_verify,
            reset_kwargs=reset_kwargs,
            observation_view=replay_view,
        )

    @staticmethod
    def _action(name: str, arguments: dict[str, Any]) -> Any:
        from envharness.envs.browsergym.models import BrowserGymAction  # the env's wire model

        return BrowserGymAction(action_str=build_browsergym_action_str(name, arguments))

    def _initial_messages(self, result: Any, task: Any) -> list[Message]:
        if self._prompt_builder is not None:
            return list(self._prompt_builder(result.observation, task, list(self.tool_names)))
        text = format_observation(result.observation, task=task, max_chars=self._max_chars)
        return [{"role": "user", "content": action_instructions(self.tool_names) + "\n\n" + text}]

    def _tool_result(self, name: str, arguments: dict[str, Any], result: Any, state: Any) -> ToolResult:
        obs = result.observation
        error = _field(obs, "last_action_error") or None
        if self._observation_text is not None:
            text = self._observation_text(obs)
        else:
            text = format_observation(obs, max_chars=self._max_chars, with_error=False)
            text += f"\n\nReward: {result.reward}  Done: {bool(result.done)}"
        return ToolResult(
            data=text,
            done=bool(result.done),
            error=error,
            metadata={
                "action": build_browsergym_action_str(name, arguments),
                "reward": result.reward,
                "done": bool(result.done),
                "url": _field(obs, "url"),
                "last_action_error": error,
                "state": to_plain(state),
            },
        )


def replay_view(observation: Any) -> dict[str, Any]:
    """What the same task, seed and actions must show again: the page's text, not its pixels
    (anti-aliasing and the caret blink) or its timings."""
    return {
        name: _field(observation, name)
        for name in (
            "goal",
            "url",
            "axtree_txt",
            "last_action_error",
            "focused_element_bid",
            "open_pages_urls",
        )
    }


def _verify(transcript: list[Message], final_state: Any, last_result: Any, state: Any) -> VerifyResult:
    """Forward the latest result's reward (the last step's, or the reset's before any); metrics from the env's state.

    The reward is BrowserGym's (MiniWoB: 1.0 when the task's raw reward is above 0). Success is
    stricter: the raw reward reaching the task's full score (1). A partial answer (find-greatest's
    wrong card: raw 0.1, BrowserGym's reward 1.0) is `partial_credit`, not a success."""
    reward = None if last_result is None else last_result.reward
    metrics = {
        "step_count": _field(state, "step_count") or 0,
        "task_name": _field(state, "task_name") or _field(state, "task") or "",
        "cum_reward": _field(state, "cum_reward")
        if _field(state, "cum_reward") is not None
        else (reward or 0.0),
    }
    raw = raw_reward(last_result)
    if raw is not None:
        metrics.update(raw_reward=raw, success=raw >= 1.0, partial_credit=0.0 < raw < 1.0)
    return VerifyResult(
        env_reward=reward,
        done=False if last_result is None else bool(last_result.done),
        metrics=metrics,
        artifacts={
            "final_state": to_plain(state),
            "final_rollout": final_state,
            "transcript_length": len(transcript),
        },
    )


def raw_reward(result: Any) -> float | None:
    """MiniWoB's raw reward (`RAW_REWARD_GLOBAL`) from an observation's task info; None where
    the task reports none (web tasks)."""
    metadata = _field(getattr(result, "observation", None), "metadata") or {}
    info = (metadata.get("browsergym_info") or {}).get("task_info") or {}
    value = info.get("RAW_REWARD_GLOBAL")
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


__all__ = [
    "BrowserGymSessionFactory",
    "action_instructions",
    "build_browsergym_action_str",
    "build_browsergym_action_tool_call",
    "format_observation",
    "resolve_task",
]
