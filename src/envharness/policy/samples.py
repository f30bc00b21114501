"""A recorded rollout as training data: one GRPO sample, or OpenEnv's `TrainingTrace`.

The GRPO sample is assembled by the harness's own `TokenAssembler` (`harness/tokens.py`),
exactly as for episodes the harness plays itself: the first prompt, then each completion
(env_mask 1, its sampling logprobs) and the tokens the agent and its tools added before the
next call (env_mask 0, logprob 0.0), read off that call's own prompt tokens. The first turn
that does not extend the sequence (a fork) stops the sample; the turns after it are counted
in `metrics` (`forks`, `fork_tokens`, `turns_left_out`, `model_tokens_left_out`), never
mixed in. `training_trace_entries` gives every turn separately with its loss mask, the form
OpenEnv 0.10's `TrainingTrace` and TRL's async GRPO worker take (they fork per turn).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from envharness.harness.tokens import TokenAssembler
from envharness.harness.types import LLMResponse, ModelStepResult
from envharness.policy.traces import RolloutTrace, Turn


@dataclass
class TraceSample:
    """One rollout as TRL's rollout_func row, plus what was left out and why."""

    prompt_ids: list[int] = field(default_factory=list)
    completion_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    env_mask: list[int] = field(default_factory=list)
    images: list[Any] = field(default_factory=list)
    image_token_counts: list[int] = field(default_factory=list)
    metrics: dict[str, Any] = field(default_factory=dict)


def turn_step(turn: Turn) -> ModelStepResult:
    """A recorded call in the harness's model-step form (what `TokenAssembler` takes)."""
    return ModelStepResult(
        response=LLMResponse(content=turn.text),
        prompt_ids=turn.prompt_ids,
        completion_ids=turn.completion_ids,
        logprobs=turn.logprobs,
        metadata={"finish_reason": turn.finish_reason},
        images=turn.images,
        image_token_counts=turn.image_token_counts,
        image_token_id=turn.image_token_id,
    )


def trace_sample(trace: RolloutTrace) -> TraceSample:
    """The rollout's exact sequence up to its first fork (see the module docstring)."""
    assembler = TokenAssembler()
    for turn in trace.turns:
        if not assembler.add_turn(turn_step(turn)):
            break
    left = trace.turns[assembler.turns_assembled :]
    metrics = {
        **assembler.metrics(),
        "turns": len(trace.turns),
        "forks": trace.forks,
        "fork_tokens": trace.fork_tokens,
        "turns_left_out": len(left),
        "model_tokens_left_out": sum(len(t.completion_ids) for t in left),
    }
    return TraceSample(
        assembler.prompt_ids,
        assembler.completion_ids,
        assembler.logprobs,
        assembler.env_mask,
        assembler.images,
        assembler.image_token_counts,
        metrics,
    )


def training_trace_entries(trace: RolloutTrace) -> list[dict[str, Any]]:
    """Every turn with its full loss mask (prompt 0, completion 1), OpenEnv's trace-entry form:
    `openenv.core.harness.TrainingTrace.from_entries(training_trace_entries(trace))`."""
    entries = []
    for turn in trace.turns:
        message: dict[str, Any] = {"role": "assistant", "content": turn.text}
        if turn.tool_calls:
            message["tool_calls"] = turn.tool_calls
        entries.append(
            {
                "prompt_token_ids": list(turn.prompt_ids),
                "completion_token_ids": list(turn.completion_ids),
                "per_token_logps": [float(x) for x in turn.logprobs],
                "loss_mask": [0] * len(turn.prompt_ids) + [1] * len(turn.completion_ids),
                "request": {"messages": turn.messages, "tools": turn.tools or []},
                "response": {
                    "choices": [{"index": 0, "message": message, "finish_reason": turn.finish_reason}]
                },
                "metadata": {
                    "node_id": f"{trace.rollout_id}:{turn.index}",
                    "parent": turn.parent,
                    "fork": turn.fork,
                    "fork_tokens": turn.fork_tokens,
                    "sampling": turn.sampling,
                },
            }
        )
    return entries
