"""`StepEnvSessionAdapter`: any reset/step client seen as a tool session.

Same constructor as OpenEnv's: the caller says which tools exist, how a tool call becomes
an action (`action_builder`), how the first observation becomes prompt messages, and
optionally how step results become tool results and how the episode is verified.

The client may be sync (`EnvClient`: reset happens in the constructor, as in OpenEnv) or
async (`AsyncEnvClient`: reset happens on the first async call, and the session's sync
methods refuse with a clear message). One adapter serves both so that env-specific
factories (BrowserGym's) are written once.
"""

from __future__ import annotations

import hashlib
import inspect
import json
from collections.abc import Callable
from typing import Any

from envharness.core.client import with_state, with_state_async
from envharness.harness.session import ResourceSession
from envharness.harness.tools import RESERVED_TOOL_NAMES, tool_name
from envharness.harness.types import Message, Tool, ToolResult, VerifyResult

ToolResultBuilder = Callable[[str, dict[str, Any], Any, Any], ToolResult]
VerifyBuilder = Callable[[list[Message], Any, Any, Any], VerifyResult]


def to_plain(value: Any) -> Any:
    """Pydantic models (states, observations) as plain data for metrics and records."""
    return value.model_dump() if hasattr(value, "model_dump") else value


ObservationView = Callable[[Any], Any]


def observation_digest(observation: Any, view: ObservationView | None = None) -> str:
    """A short fingerprint of what an observation shows, for replay: `view` picks the part that
    the same task, seed and actions must reproduce (None: the whole observation)."""
    shown = view(observation) if view is not None else to_plain(observation)
    text = json.dumps(shown, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def default_tool_result(name: str, arguments: dict[str, Any], result: Any, state: Any) -> ToolResult:
    """OpenEnv's default: the whole observation, reward and done."""
    return ToolResult(
        data={
            "tool_name": name,
            "arguments": dict(arguments),
            "observation": to_plain(result.observation),
            "reward": result.reward,
            "done": result.done,
        },
        done=bool(result.done),
        metadata={"reward": result.reward, "state": to_plain(state)},
    )


def default_verify(transcript: list[Message], final_state: Any, last_result: Any, state: Any) -> VerifyResult:
    """OpenEnv's default: forward the latest result's reward and done (the last step's, or the reset's
    before any), plus the step count."""
    metrics: dict[str, Any] = {}
    step_count = getattr(state, "step_count", None)
    if step_count is None and isinstance(state, dict):
        step_count = state.get("step_count")
    if step_count is not None:
        metrics["step_count"] = step_count
    return VerifyResult(
        env_reward=None if last_result is None else last_result.reward,
        done=False if last_result is None else bool(last_result.done),
        metrics=metrics,
        artifacts={"final_state": to_plain(state), "transcript_length": len(transcript)},
    )


class StepEnvSessionAdapter(ResourceSession):
    """Expose a reset/step(/state) client as a resource session."""

    def __init__(
        self,
        client: Any,
        *,
        task: Any = None,
        seed: int | None = None,
        episode_id: str | None = None,
        tool_specs: list[Tool],
        action_builder: Callable[[str, dict[str, Any]], Any],
        initial_messages_builder: Callable[[Any, Any], list[Message]],
        tool_result_builder: ToolResultBuilder | None = None,
        verify_builder: VerifyBuilder | None = None,
        reset_kwargs: dict[str, Any] | None = None,
        observation_view: ObservationView | None = None,
    ):
        self._client = client
        self._is_async = inspect.iscoroutinefunction(getattr(client, "reset", None))
        self._task = task
        self._tool_specs = list(tool_specs)
        self._tools_by_name = {tool_name(tool): tool for tool in self._tool_specs}
        reserved = sorted(set(self._tools_by_name) & RESERVED_TOOL_NAMES)
        if reserved:
            raise ValueError("Tool names are reserved for orchestration controls: " + ", ".join(reserved))
        self._action_builder = action_builder
        self._initial_messages_builder = initial_messages_builder
        self._tool_result_builder = tool_result_builder or default_tool_result
        self._verify_builder = verify_builder or default_verify
        self._reset_payload = dict(reset_kwargs or {})
        if seed is not None:
            self._reset_payload.setdefault("seed", seed)
        if episode_id is not None:
            self._reset_payload.setdefault("episode_id", episode_id)
        self._initial_result: Any = None
        self._last_result: Any = None
        self._last_state: Any = None
        self._closed = False
        self._observation_view = observation_view
        #: One fingerprint per observation (the reset's, then each step's): `verify` hands them
        #: to the episode's record, and `envharness replay` compares them.
        self.observation_digests: list[str] = []
        if not self._is_async:
            try:
                self._initial_result, self._last_state = with_state(
                    self._client, "reset", **self._reset_payload
                )
                self._observed(self._initial_result)
            except Exception:
                self.close()
                raise

    @property
    def task(self) -> Any:
        return self._task

    @property
    def client(self) -> Any:
        return self._client

    # -- sync API (sync clients) ------------------------------------------------------
    def _require_sync(self) -> None:
        if self._is_async:
            raise TypeError(
                "this session wraps an async client: call its *_async methods (the harness runtime does), "
                "or make its sessions with a sync client (an environment's SPEC.sync_client; "
                "envharness.core.client.sync_client_class(AsyncClient))"
            )

    def _observed(self, result: Any) -> Any:
        self.observation_digests.append(
            observation_digest(getattr(result, "observation", None), self._observation_view)
        )
        return result

    def _action_for(self, name: str, arguments: dict[str, Any]) -> Any:
        if name in RESERVED_TOOL_NAMES:
            raise KeyError(f"Reserved orchestration tool: {name}")
        if name not in self._tools_by_name:
            raise KeyError(f"Unknown tool: {name}")
        return self._action_builder(name, dict(arguments))

    def initial_messages(self) -> list[Message]:
        self._require_sync()
        return list(self._initial_messages_builder(self._initial_result, self._task))

    @property
    def done_at_start(self) -> bool:
        """The episode ended before the agent's first move (the other seats of a game ended
        it): the harness asks the model nothing."""
        return bool(getattr(self._initial_result, "done", False))

    def list_tools(self) -> list[Tool]:
        return list(self._tool_specs)

    def call_tool(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        self._require_sync()
        action = self._action_for(name, arguments)
        self._last_result, self._last_state = with_state(self._client, "step", action)
        self._observed(self._last_result)
        return self._tool_result_builder(name, dict(arguments), self._last_result, self._last_state)

    def verify(self, transcript: list[Message], final_state: Any | None = None) -> VerifyResult:
        """The verify builder gets the environment's latest result: the reset's when no tool
        reached the environment (every call named an unknown tool, say), so such an episode
        scores the reward the environment gives its first page, not a missing one."""
        latest = self._last_result if self._last_result is not None else self._initial_result
        verdict = self._verify_builder(list(transcript), final_state, latest, self._last_state)
        verdict.artifacts.setdefault("observation_digests", list(self.observation_digests))
        return verdict

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if not self._is_async and callable(getattr(self._client, "close", None)):
            self._client.close()

    # -- async API (async clients natively; sync clients in a worker thread) ----------
    async def _ensure_reset(self) -> None:
        if self._initial_result is None:
            self._initial_result, self._last_state = await with_state_async(
                self._client, "reset", **self._reset_payload
            )
            self._observed(self._initial_result)

    async def initial_messages_async(self) -> list[Message]:
        if not self._is_async:
            return await super().initial_messages_async()
        await self._ensure_reset()
        return list(self._initial_messages_builder(self._initial_result, self._task))

    async def list_tools_async(self) -> list[Tool]:
        return self.list_tools()

    async def call_tool_async(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        if not self._is_async:
            return await super().call_tool_async(name, arguments)
        await self._ensure_reset()
        action = self._action_for(name, arguments)
        self._last_result, self._last_state = await with_state_async(self._client, "step", action)
        self._observed(self._last_result)
        return self._tool_result_builder(name, dict(arguments), self._last_result, self._last_state)

    async def verify_async(self, transcript: list[Message], final_state: Any | None = None) -> VerifyResult:
        return self.verify(transcript, final_state)

    async def close_async(self) -> None:
        if not self._is_async:
            return await super().close_async()
        if not self._closed:
            self._closed = True
            if callable(getattr(self._client, "close", None)):
                await self._client.close()
