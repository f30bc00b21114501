"""Chat templates and exact prompt tokens, shared by every backend that tokenizes locally.

The one subtle part is multi-turn: a training sequence must be the exact tokens the model
saw and produced, so turn N+1's prompt is `prefix_ids` (turn N's prompt + completion) plus
the tokens of the messages added since, never a re-tokenization of the whole history.
The new tokens are found by rendering the template up to the previous assistant turn and
for the whole conversation and tokenizing the difference. A turn that stopped on a stop
string lacks the template's end-of-turn text (e.g. `<|im_end|>\\n`); the part of it that
the completion did not produce is added at the start of the difference.
"""

from __future__ import annotations

import json
import threading
import time
import weakref
from collections import OrderedDict
from typing import Any

from envharness.models.base import Message
from envharness.models.images import refuse_images

_SENTINEL = "\x00ENVHARNESS_TURN\x00"


def to_openai_tools(tools: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
    """MCP tool specs (`name`, `description`, `inputSchema`) in the OpenAI/chat-template form."""
    if not tools:
        return None
    out = []
    for tool in tools:
        if tool.get("type") == "function" and "function" in tool:
            out.append(tool)
            continue
        out.append(
            {
                "type": "function",
                "function": {
                    "name": tool["name"],
                    "description": tool.get("description", ""),
                    "parameters": tool.get("inputSchema")
                    or tool.get("parameters")
                    or {"type": "object", "properties": {}},
                },
            }
        )
    return out


def _template_messages(messages: list[Message]) -> list[Message]:
    """Tool-call arguments as dicts: most templates render them with `tojson`."""
    out = []
    for msg in messages:
        calls = msg.get("tool_calls")
        if calls:
            msg = dict(msg)
            msg["tool_calls"] = [_with_dict_arguments(c) for c in calls]
        out.append(msg)
    return out


def _with_dict_arguments(call: dict[str, Any]) -> dict[str, Any]:
    fn = call.get("function") or {}
    args = fn.get("arguments")
    if isinstance(args, str):
        try:
            parsed = json.loads(args)
        except json.JSONDecodeError:
            return call
        return {**call, "function": {**fn, "arguments": parsed}}
    return call


def render(
    tokenizer: Any,
    messages: list[Message],
    tools: list[dict[str, Any]] | None = None,
    *,
    add_generation_prompt: bool = True,
) -> str:
    """The chat template applied to `messages` (and `tools`, when the template takes them)."""
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError(
            f"tokenizer {getattr(tokenizer, 'name_or_path', '')!r} has no chat template; "
            "use an instruction-tuned model or set `tokenizer.chat_template`"
        )
    kwargs: dict[str, Any] = {"tokenize": False, "add_generation_prompt": add_generation_prompt}
    openai_tools = to_openai_tools(tools)
    if openai_tools:
        kwargs["tools"] = openai_tools
    templated = _template_messages(messages)
    key = _render_key(tokenizer, templated, kwargs)
    text = _RENDERED.get(tokenizer, key)
    if text is None:
        text = tokenizer.apply_chat_template(templated, **kwargs)
        _RENDERED.put(tokenizer, key, text)
    return text


class _RenderCache:
    """The last renders per tokenizer, keyed by the template and the conversation as JSON: the
    episodes of a group render the same first prompt, and every later turn renders the template's
    end-of-turn text again (a template costs milliseconds of Python per render)."""

    def __init__(self, size: int = 64):
        self.size = size
        self._lock = threading.Lock()  # renders run in worker threads
        self._by_tokenizer: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def get(self, tokenizer: Any, key: str | None) -> str | None:
        if key is None:
            return None
        with self._lock:
            entries = self._entries(tokenizer)
            text = entries.get(key) if entries is not None else None
            if text is not None:
                entries.move_to_end(key)
            return text

    def put(self, tokenizer: Any, key: str | None, text: str) -> None:
        with self._lock:
            entries = self._entries(tokenizer)
            if key is None or entries is None:
                return
            entries[key] = text
            while len(entries) > self.size:
                entries.popitem(last=False)

    def _entries(self, tokenizer: Any) -> OrderedDict | None:
        try:
            return self._by_tokenizer.setdefault(tokenizer, OrderedDict())
        except TypeError:  # a tokenizer that takes no weak reference: no cache
            return None


_RENDERED = _RenderCache()
#: Conversations longer than this (as JSON) are rendered each time, not kept in the cache.
_CACHED_AT_MOST_CHARS = 256 * 1024


def _render_key(tokenizer: Any, messages: list[Message], kwargs: dict[str, Any]) -> str | None:
    """What a render depends on, or None when the conversation is not plain JSON (not cached).
    A template that reads the clock (`strftime_now`) is keyed by the day too."""
    template = tokenizer.chat_template
    day = time.strftime("%Y-%m-%d") if "strftime" in str(template) else ""
    try:
        key = json.dumps([str(template), day, messages, kwargs], sort_keys=True)
    except (TypeError, ValueError):
        return None
    return key if len(key) <= _CACHED_AT_MOST_CHARS else None  # a huge prompt is not kept


def encode(tokenizer: Any, text: str) -> list[int]:
    """Token ids of already-templated text (the template supplies any special tokens)."""
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def end_of_turn_text(tokenizer: Any) -> str:
    """What the template writes after an assistant message's content (e.g. `<|im_end|>\\n`)."""
    msgs = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": _SENTINEL}]
    text = render(tokenizer, msgs, add_generation_prompt=False)
    return text.split(_SENTINEL, 1)[1] if _SENTINEL in text else ""


def prompt_ids(
    tokenizer: Any,
    messages: list[Message],
    tools: list[dict[str, Any]] | None = None,
    prefix_ids: list[int] | None = None,
) -> list[int]:
    """Exact prompt tokens for the next assistant turn; they start with `prefix_ids` when given.

    For text models: a conversation with image parts is refused (`ImagesNotSupportedError`);
    vision backends render through `new_prompt_text` with their processor."""
    if not getattr(tokenizer, "accepts_images", False):  # a processor-backed tokenizer renders them itself
        refuse_images(getattr(tokenizer, "name_or_path", None) or type(tokenizer).__name__, messages)
    return list(prefix_ids or []) + encode(tokenizer, new_prompt_text(tokenizer, messages, tools, prefix_ids))


def new_prompt_text(
    tokenizer: Any,
    messages: list[Message],
    tools: list[dict[str, Any]] | None = None,
    prefix_ids: list[int] | None = None,
) -> str:
    """The templated text to tokenize after `prefix_ids` (the whole prompt without them)."""
    full = render(tokenizer, messages, tools)
    if not prefix_ids:
        return full
    last = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=None)
    if last is None:
        raise ValueError("prefix_ids given but the conversation has no previous assistant turn")
    before = render(tokenizer, messages[: last + 1], tools, add_generation_prompt=False)
    if not full.startswith(before):
        raise ValueError(
            "the chat template is not prefix-preserving (rendering more messages changed earlier text); "
            "exact multi-turn tokens are impossible with it"
        )
    return _missing_turn_end(tokenizer, prefix_ids) + full[len(before) :]


def _missing_turn_end(tokenizer: Any, prefix_ids: list[int]) -> str:
    """The part of the end-of-turn text that the previous completion did not produce itself."""
    closing = end_of_turn_text(tokenizer)
    if not closing:
        return ""
    tail = tokenizer.decode(prefix_ids[-16:], skip_special_tokens=False)
    for n in range(len(closing), 0, -1):
        if tail.endswith(closing[:n]):
            return closing[n:]
    return closing
