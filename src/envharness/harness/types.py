"""The harness's data: tool calls, model steps, tool results, limits, rollout results.

Names and fields follow OpenEnv's `openenv.core.harness` and `openenv.core.llm_client`
so that code written against OpenEnv's tutorial runs with only its imports changed.
Additions (all optional) carry what RL needs and the originals lack: an env mask
and per-turn token records.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

Message = dict[str, Any]
Tool = dict[str, Any]  # MCP form: {"name", "description", "inputSchema"}


@dataclass
class ToolCall:
    """A single tool call emitted by the model."""

    id: str
    name: str
    args: dict[str, Any]
    #: Not sent to the tool: how the call was obtained (e.g. `parse_error` when a parser fell back).
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass
class LLMResponse:
    """A model's reply: text plus the tool calls parsed from it."""

    content: str
    tool_calls: list[ToolCall] = field(default_factory=list)

    def to_message_dict(self) -> Message:
        """The OpenAI-style assistant message for this reply."""
        msg: Message = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            msg["tool_calls"] = [
                {
                    "id": tc.id,
                    "type": "function",
                    "function": {"name": tc.name, "arguments": json.dumps(tc.args)},
                }
                for tc in self.tool_calls
            ]
        return msg


@dataclass
class ModelStepResult:
    """One sampled model turn: the reply and the exact tokens behind it."""

    response: LLMResponse
    prompt_ids: list[int] = field(default_factory=list)
    completion_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    #: Backend extras (finish_reason, timings); kept in episode records.
    metadata: dict[str, Any] = field(default_factory=dict)
    #: Vision models: the images the prompt added since the previous turn, in placeholder
    #: order, their placeholder token counts, and the placeholder token (`Generation`'s).
    images: list[Any] = field(default_factory=list)
    image_token_counts: list[int] = field(default_factory=list)
    image_token_id: int | None = None


@dataclass
class ToolResult:
    """What a session tool returns. `error` is shown to the model; it never aborts the episode."""

    data: Any = None
    done: bool = False
    metadata: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


@dataclass
class VerifyResult:
    """End-of-episode result. `env_reward` forwards the environment's reward, never invents one.

    ``metrics["success"]``, when a session reports it, is the episode's verdict for eval's
    success rate and train's ``success`` reward (an environment whose partial rewards are not
    wins says so here); without it an episode succeeded when its reward is positive."""

    env_reward: float | None = None
    done: bool = False
    metrics: dict[str, Any] = field(default_factory=dict)
    artifacts: dict[str, Any] = field(default_factory=dict)


@dataclass
class HarnessRunLimits:
    """Bounds on one episode. `sampling` is passed to every model step."""

    max_turns: int = 10
    max_tool_calls_per_turn: int | None = None
    max_total_tool_calls: int | None = None
    sampling: dict[str, Any] = field(default_factory=dict)


@dataclass
class ToolTraceEntry:
    """One executed tool call and its result."""

    tool_name: str
    arguments: dict[str, Any]
    result: ToolResult


@dataclass
class RolloutEvent:
    """Something that happened during a rollout (model_response, tool_call, error...)."""

    type: str
    payload: dict[str, Any] = field(default_factory=dict)


@dataclass
class HarnessRolloutResult:
    """A finished episode.

    `prompt_ids` is the first turn's prompt; `completion_ids` is everything after it:
    model tokens (env_mask 1, with `logprobs`) interleaved with the tool/environment
    tokens the model saw between turns (env_mask 0, logprob 0.0). `turns` keeps each
    model step's own token record so the assembly can be audited.
    """

    messages: list[Message] = field(default_factory=list)
    tool_trace: list[ToolTraceEntry] = field(default_factory=list)
    events: list[RolloutEvent] = field(default_factory=list)
    done: bool = False
    metrics: dict[str, Any] = field(default_factory=dict)
    prompt_ids: list[int] = field(default_factory=list)
    completion_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    env_mask: list[int] = field(default_factory=list)
    turns: list[ModelStepResult] = field(default_factory=list)
    #: The images of the assembled sequence, in placeholder order, with their placeholder
    #: counts (what a trainer needs to give the loss pass the pixels the policy saw).
    images: list[Any] = field(default_factory=list)
    image_token_counts: list[int] = field(default_factory=list)
    # Filled by `run_episodes` (absent from OpenEnv's result, which leaves them to the caller):
    task: Any = None
    seed: int | None = None
    episode_id: str | None = None
    env_reward: float | None = None
    verify: VerifyResult | None = None
    #: Why the episode failed ("TypeName: message"); None when it ran to the end.
    error: str | None = None
    timings: dict[str, float] = field(default_factory=dict)
    #: A model in the other seats of a game: its moves in order (`harness/seat_player.py`),
    #: kept apart from the messages (never trained on). None: no model opponent.
    opponent_moves: list[dict[str, Any]] | None = None
