"""Harness adapters: who drives an episode. `MCPHarnessAdapter` is the white-box loop.

The loop: model step -> assistant message -> each tool call -> tool message, until a
tool reports done, the model stops calling tools, or a limit is hit. A call to an unknown
tool, arguments that do not fit the tool's schema, or a tool raising KeyError/ValueError/
TypeError become a tool *error message* the model sees on its next turn; they never end
the episode. Anything else a session raises (its server died) does end it, and
`run_episodes` records that episode as failed without touching the others.
"""

from __future__ import annotations

import json
import time
from typing import Any

from envharness.core.concurrency import run_coroutine_sync
from envharness.harness.failures import note_failure
from envharness.harness.model_step import ModelStep, call_model_step
from envharness.harness.session import call_session
from envharness.harness.tokens import TokenAssembler
from envharness.harness.tools import tool_name, validate_arguments
from envharness.harness.types import (
    HarnessRolloutResult,
    HarnessRunLimits,
    Message,
    RolloutEvent,
    ToolCall,
    ToolResult,
    ToolTraceEntry,
)

#: Exceptions from `call_tool` that mean "the model asked for something wrong".
TOOL_ERRORS = (KeyError, ValueError, TypeError)


def tool_message_content(result: ToolResult) -> str | list[dict[str, Any]]:
    """What the model reads for a tool result: its data as text, an error first when present.
    Data given as content parts (text and image parts, `models/images.py`) stays parts."""
    data = result.data
    if (
        isinstance(data, list)
        and data
        and all(isinstance(p, dict) and p.get("type") in ("text", "image") for p in data)
    ):
        return ([{"type": "text", "text": f"Error: {result.error}\n"}] if result.error else []) + list(data)
    text = (
        ""
        if data is None
        else data
        if isinstance(data, str)
        else json.dumps(data, sort_keys=True, default=str)
    )
    if result.error:
        return f"Error: {result.error}" + (f"\n{text}" if text else "")
    return text


class HarnessAdapter:
    """Drives one episode. White-box: the trainer owns sampling (`model_step`)."""

    async def run_white_box_async(
        self, model_step: ModelStep, session: Any, limits: HarnessRunLimits | None = None
    ) -> HarnessRolloutResult:
        raise NotImplementedError(f"{type(self).__name__} is not a white-box harness")

    def run_white_box(
        self, model_step: ModelStep, session: Any, limits: HarnessRunLimits | None = None
    ) -> HarnessRolloutResult:
        """Sync form of `run_white_box_async` (OpenEnv's name)."""
        return run_coroutine_sync(self.run_white_box_async(model_step, session, limits))

    def run_black_box(self, session: Any, limits: HarnessRunLimits | None = None) -> HarnessRolloutResult:
        raise NotImplementedError(f"{type(self).__name__} does not run opaque (black-box) harnesses")


class MCPHarnessAdapter(HarnessAdapter):
    """White-box harness following an MCP tool-calling loop."""

    async def run_white_box_async(
        self, model_step: ModelStep, session: Any, limits: HarnessRunLimits | None = None
    ) -> HarnessRolloutResult:
        """Run one episode. If the session or model step fails mid-episode, the partial
        result comes back with `error` set (messages and exact tokens up to the failure)."""
        limits = limits or HarnessRunLimits()
        result = HarnessRolloutResult()
        tokens = TokenAssembler()
        messages: list[Message] = []
        timings = {"model_s": 0.0, "tools_s": 0.0}
        try:
            stop_reason = await self._loop(model_step, session, limits, result, tokens, messages, timings)
        except Exception as exc:
            result.error = f"{type(exc).__name__}: {exc}"
            note_failure(result.metrics, exc)  # a lost server is not the policy's reward 0
            stop_reason = "error"
        result.messages = list(messages)
        result.prompt_ids, result.completion_ids = tokens.prompt_ids, tokens.completion_ids
        result.logprobs, result.env_mask = tokens.logprobs, tokens.env_mask
        result.images, result.image_token_counts = tokens.images, tokens.image_token_counts
        result.metrics.setdefault("turns", len(result.turns))
        result.metrics.setdefault("tool_calls", len(result.tool_trace))
        result.metrics["tool_errors"] = sum(1 for e in result.tool_trace if e.result.error)
        result.metrics["stop_reason"] = stop_reason
        result.metrics.update(tokens.metrics())
        result.timings.update(timings)
        return result

    async def _loop(
        self,
        model_step: ModelStep,
        session: Any,
        limits: HarnessRunLimits,
        result: HarnessRolloutResult,
        tokens: TokenAssembler,
        messages: list[Message],
        timings: dict[str, float],
    ) -> str:
        """The episode itself; fills `result`, `tokens` and `messages` as it goes. Returns why it stopped."""
        messages.extend(await call_session(session, "initial_messages"))
        tools = list(await call_session(session, "list_tools"))
        tools_by_name = {tool_name(t): t for t in tools}
        stop_reason = "max_turns"
        total_calls = 0
        if getattr(session, "done_at_start", False) is True:
            result.done = True
            return "done"

        for turn in range(limits.max_turns):
            started = time.perf_counter()
            step = await call_model_step(model_step, list(messages), tools, dict(limits.sampling))
            timings["model_s"] += time.perf_counter() - started
            tokens.add_turn(step)
            result.turns.append(step)
            messages.append(step.response.to_message_dict())
            calls = list(step.response.tool_calls)
            result.events.append(
                RolloutEvent(
                    type="model_response",
                    payload={
                        "turn": turn,
                        "content": step.response.content,
                        "tool_calls": [
                            {
                                "id": c.id,
                                "name": c.name,
                                "arguments": dict(c.args),
                                **({"metadata": c.metadata} if c.metadata else {}),
                            }
                            for c in calls
                        ],
                    },
                )
            )
            if not calls:
                result.done, stop_reason = True, "no_tool_calls"
                break
            if limits.max_tool_calls_per_turn is not None:
                calls = calls[: limits.max_tool_calls_per_turn]
            for call in calls:
                if limits.max_total_tool_calls is not None and total_calls >= limits.max_total_tool_calls:
                    stop_reason = "max_total_tool_calls"
                    result.metrics["truncated"] = True
                    break
                started = time.perf_counter()
                tool_result = await self._call_tool(session, tools_by_name, call)
                elapsed = time.perf_counter() - started
                timings["tools_s"] += elapsed
                total_calls += 1
                self._record_tool(result, messages, call, tool_result, turn, elapsed)
                if tool_result.done:
                    result.done, stop_reason = True, "done"
                    break
            if result.done or stop_reason == "max_total_tool_calls":
                break
        return stop_reason

    async def _call_tool(self, session: Any, tools_by_name: dict[str, Any], call: ToolCall) -> ToolResult:
        return await call_tool_checked(session, tools_by_name, call.name, call.args)

    @staticmethod
    def _record_tool(
        result: HarnessRolloutResult,
        messages: list[Message],
        call: ToolCall,
        tool_result: ToolResult,
        turn: int,
        elapsed: float,
    ) -> None:
        result.tool_trace.append(
            ToolTraceEntry(tool_name=call.name, arguments=dict(call.args), result=tool_result)
        )
        result.events.append(
            RolloutEvent(
                type="tool_call",
                payload={
                    "turn": turn,
                    "tool_name": call.name,
                    "arguments": dict(call.args),
                    "done": tool_result.done,
                    "error": tool_result.error,
                    "elapsed_s": round(elapsed, 6),
                    **(
                        {"parse_error": call.metadata["parse_error"]}
                        if "parse_error" in call.metadata
                        else {}
                    ),
                },
            )
        )
        messages.append(
            {
                "role": "tool",
                "tool_call_id": call.id,
                "name": call.name,
                "content": tool_message_content(tool_result),
            }
        )


async def call_tool_checked(
    session: Any, tools_by_name: dict[str, Any], name: str, arguments: dict[str, Any]
) -> ToolResult:
    """One tool call as an episode makes it: an unknown tool or bad arguments come back as the
    model's error without reaching the session, and so does a tool's own failure."""
    tool = tools_by_name.get(name)
    if tool is None:
        known = ", ".join(tools_by_name) or "none"
        return ToolResult(
            error=f"unknown tool {name!r}; available tools: {known}", metadata={"error_type": "unknown_tool"}
        )
    problem = validate_arguments(tool, arguments)
    if problem is not None:
        return ToolResult(
            error=f"bad arguments for {name}: {problem}", metadata={"error_type": "invalid_arguments"}
        )
    try:
        return await call_session(session, "call_tool", name, dict(arguments))
    except TOOL_ERRORS as exc:
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
        return ToolResult(error=f"{name} failed: {message}", metadata={"error_type": type(exc).__name__})
