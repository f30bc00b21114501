"""The first message of an episode on TRL's tool loop: call the tools, in the template's form.

TRL appends what `reset()` returns to the last user message and then plays only the tool calls
the model writes in its chat template's form; a reply in plain text ends the episode. So the
opening asks for tool calls and shows one, rendered by the model's own template.

An environment says what its opening holds through its prompt style's `tool_opening`
(`harness/prompt_style.py`): system text, the goal and state, and optionally a worked example
(a user message followed by an assistant message with `tool_calls`). This module turns those
messages into the text (or text and image blocks) `reset()` returns; it knows no environment.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from typing import Any

Message = dict[str, Any]
#: `opening=`: the style's opening messages -> what `reset()` returns.
OpeningFunction = Callable[[list[Message]], "str | list[dict[str, Any]]"]

INSTRUCTION = (
    "Act only by calling the tools ({tools}), one call per reply. A call is written like this:\n{call}"
)
EXAMPLE_INSTRUCTION = (
    "Act only by calling the tools ({tools}), one call per reply. For example, given:\n{example}\n"
    "the reply is:\n{call}"
)
_PLACEHOLDERS = {"string": "...", "integer": 0, "number": 0, "boolean": True, "array": [], "object": {}}


def render_tool_call(tokenizer: Any, name: str, arguments: dict[str, Any]) -> str:
    """One tool call as the tokenizer's chat template writes an assistant's call (the Hermes
    `<tool_call>` JSON form when no tokenizer is given)."""
    if tokenizer is None:
        return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"
    user = [{"role": "user", "content": "."}]
    call = {"role": "assistant", "content": "", "tool_calls": [_call(name, arguments)]}
    prompt = tokenizer.apply_chat_template(user, tokenize=False, add_generation_prompt=True)
    whole = tokenizer.apply_chat_template([*user, call], tokenize=False)
    text = whole[len(os.path.commonprefix([prompt, whole])) :].rstrip()
    for end in (getattr(tokenizer, "eos_token", None), "<|im_end|>", "<|eot_id|>", "<end_of_turn>"):
        if end and text.endswith(end):
            text = text[: -len(end)].rstrip()
    return text.strip()


def _call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "arguments": arguments}}


def placeholder_call(tools: Sequence[dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    """A call of the first tool with a placeholder for each required argument: the form, for
    environments whose opening shows no worked example."""
    if not tools:
        raise ValueError("an environment on TRL's tool loop needs at least one tool")
    schema = tools[0].get("inputSchema") or {}
    properties = schema.get("properties") or {}
    arguments = {
        arg: _PLACEHOLDERS.get(str((properties.get(arg) or {}).get("type")), "...")
        for arg in schema.get("required") or []
    }
    return str(tools[0]["name"]), arguments


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "\n".join(
            p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text"
        )
    return "" if content is None else str(content)


def _parts(messages: list[Message]) -> tuple[list[str], list[tuple[str, dict[str, Any]]], Any]:
    """(system texts, worked examples as (situation, call), the last user message's content).
    An assistant reply in plain text (a text-action style's example) is dropped with its
    user message: it would teach the form TRL does not play."""
    systems = [_text(m.get("content")) for m in messages if m.get("role") == "system"]
    users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
    if not users:
        raise ValueError("an opening needs a user message")
    examples = []
    for i, message in enumerate(messages[: users[-1]]):
        calls = message.get("tool_calls") if message.get("role") == "assistant" else None
        if calls and i > 0 and messages[i - 1].get("role") == "user":
            function = calls[0].get("function", calls[0])
            examples.append((_text(messages[i - 1].get("content")), function))
    return systems, examples, messages[users[-1]].get("content")


def compose_opening(
    messages: list[Message],
    tools: Sequence[dict[str, Any]],
    *,
    tokenizer: Any = None,
    instruction: str | None = None,
) -> str | list[dict[str, Any]]:
    """What `reset()` returns: the system text, the instruction to call the tools with one call
    in the template's form (the style's worked example when it has one), then the goal and
    state. Text, or content blocks when the state carries images (a vision style's)."""
    systems, examples, content = _parts(messages)
    names = ", ".join(str(t["name"]) for t in tools)
    if examples:
        situation, function = examples[0]
        call = render_tool_call(tokenizer, function["name"], dict(function.get("arguments") or {}))
    else:
        situation, (name, arguments) = "", placeholder_call(tools)
        call = render_tool_call(tokenizer, name, arguments)
    template = instruction if instruction is not None else (EXAMPLE_INSTRUCTION if examples else INSTRUCTION)
    head = "\n\n".join(
        p for p in [*systems, template.format(tools=names, call=call, example=situation)] if p.strip()
    )
    if isinstance(content, list):
        blocks = [dict(b) for b in content]
        first_text = next((b for b in blocks if b.get("type") == "text"), None)
        if first_text is None:
            return [{"type": "text", "text": head}, *blocks]
        first_text["text"] = head + "\n\n" + first_text["text"]
        return blocks
    return head + "\n\n" + _text(content)


__all__ = ["EXAMPLE_INSTRUCTION", "INSTRUCTION", "compose_opening", "placeholder_call", "render_tool_call"]
