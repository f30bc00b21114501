"""Does a request continue the rollout, and which exact tokens does it continue?

An agent re-sends its whole history at every call. When that history is an earlier turn's
messages followed by that turn's own reply (as we returned it), the new prompt is that
turn's exact tokens plus the tokens of the messages added since: the backend gets them as
`prefix_ids` and tokenizes only the new part, so nothing sampled is ever re-tokenised.
Anything else (the agent trimmed, summarised or re-templated its history) is tokenised from
scratch, and `fork_size` then says how many tokens of the rollout's latest sequence the new
prompt did not keep: the turn is marked a fork and the training data leaves it out of the
sample it cannot extend exactly (`samples.py`), never mixing the two histories.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from envharness.models.images import message_text
from envharness.policy.traces import RolloutTrace, Turn


@dataclass
class Continuation:
    """What to send the backend: the messages and, when an earlier turn is continued, its tokens."""

    messages: list[dict[str, Any]]
    prefix_ids: list[int] | None = None
    parent: Turn | None = None


def _canon(message: dict[str, Any]) -> dict[str, Any]:
    """A message without its None fields (SDKs send `refusal: None`, `tool_calls: None`, ...)."""
    return {k: v for k, v in message.items() if v is not None}


def _echoes(message: dict[str, Any], turn: Turn) -> bool:
    """Is `message` the agent's copy of `turn`'s reply (its text, or the tool calls we issued)?"""
    if message.get("role") != "assistant":
        return False
    calls = message.get("tool_calls") or []
    if calls and turn.tool_call_ids:
        return [c.get("id") for c in calls] == turn.tool_call_ids
    content = message.get("content")
    text = (
        content if isinstance(content, str) else "" if content is None else message_text(message)
    )  # a list of parts
    return text == turn.text


def _continues(messages: list[dict[str, Any]], turn: Turn) -> bool:
    n = len(turn.messages)
    if len(messages) <= n + 1 or not _echoes(messages[n], turn):
        return False
    if any(m.get("role") == "assistant" for m in messages[n + 1 :]):
        return False  # an assistant message the model never wrote: no exact prefix to split at
    return all(a is b or a == b or _canon(a) == _canon(b) for a, b in zip(messages[:n], turn.messages))


def continuation(trace: RolloutTrace, messages: list[dict[str, Any]]) -> Continuation:
    """The latest turn this request continues (newest first), or a fresh tokenization."""
    for turn in reversed(trace.turns):
        if _continues(messages, turn):
            n = len(turn.messages)
            canonical = [*messages[:n], {"role": "assistant", "content": turn.text}, *messages[n + 1 :]]
            return Continuation(canonical, turn.sequence, turn)
    return Continuation(list(messages))


def fork_size(trace: RolloutTrace, prompt_ids: list[int]) -> int:
    """Tokens of the rollout's latest sequence that `prompt_ids` does not start with (0: it extends it)."""
    head = trace.head()
    if head is None:
        return 0
    seq = head.sequence
    if len(prompt_ids) >= len(seq) and prompt_ids[: len(seq)] == seq:
        return 0
    same = next(
        (i for i, (a, b) in enumerate(zip(seq, prompt_ids)) if a != b), min(len(seq), len(prompt_ids))
    )
    return len(seq) - same
