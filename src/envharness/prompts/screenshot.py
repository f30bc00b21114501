"""Put the page's screenshot into a prompt: the image goes into the latest user turn.

Any text prompt builder (`prompts/text.py`, `--prompt module:function`) becomes a vision
prompt with `add_screenshot(messages, image)`: the last user message's content becomes parts,
the screenshot first, then its text (`models/images.py`'s convention). Only the latest turn
gets the image -- not the first message, where `trl.data_utils.prepare_multimodal_messages`
would put it -- so the model sees the page as it is now, next to the question about it.
`max_side` shrinks large screenshots (MiniWoB's are 498x321) before they cost image tokens.
"""

from __future__ import annotations

from typing import Any

from envharness.models.images import Message


def resize_screenshot(image: Any, max_side: int | None) -> Any:
    """`image` scaled down (aspect kept) so that its longer side is at most `max_side` pixels."""
    if not max_side or max(image.size) <= max_side:
        return image
    if max_side < 1:
        raise ValueError(f"max_side must be positive, got {max_side}")
    scale = max_side / max(image.size)
    return image.resize(
        (max(1, round(image.width * scale)), max(1, round(image.height * scale)))
    )  # PIL's default filter, as training


def add_screenshot(messages: list[Message], image: Any, *, max_side: int | None = None) -> list[Message]:
    """A copy of `messages` whose last user message starts with `image` (resized to `max_side`)."""
    last = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=None)
    if last is None:
        raise ValueError("the prompt has no user message to put the screenshot in")
    content = messages[last].get("content")
    parts = list(content) if isinstance(content, list) else [{"type": "text", "text": content or ""}]
    out = list(messages)
    out[last] = {
        **messages[last],
        "content": [{"type": "image", "image": resize_screenshot(image, max_side)}, *parts],
    }
    return out
