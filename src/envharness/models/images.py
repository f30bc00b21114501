"""Images in chat messages: the one convention every backend and prompt builder shares.

A message's `content` is either a string or a list of parts, in the order the model reads them:

    {"type": "text", "text": "Goal: ..."}
    {"type": "image", "image": <PIL.Image.Image>}

Backends turn image parts into what their model takes (a processor's pixel values, an
OpenAI `image_url` data URL, vLLM `multi_modal_data`). A backend that cannot see refuses a
request with images (`ImagesNotSupportedError`): dropping them silently would train or
evaluate a blind policy without anyone noticing.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Iterable
from typing import Any

Message = dict[str, Any]


class ImagesNotSupportedError(ValueError):
    """A request carries images and the backend has no vision."""


def is_image_part(part: Any) -> bool:
    return isinstance(part, dict) and part.get("type") == "image"


def message_images(message: Message) -> list[Any]:
    """The images of one message, in reading order."""
    content = message.get("content")
    if not isinstance(content, list):
        return []
    return [part["image"] for part in content if is_image_part(part)]


def messages_images(messages: Iterable[Message]) -> list[Any]:
    """The images of a conversation, in reading order (the order of the placeholders)."""
    return [image for message in messages for image in message_images(message)]


def has_images(messages: Iterable[Message]) -> bool:
    return any(message_images(m) for m in messages)


def message_text(message: Message) -> str:
    """The text of a message, parts joined; images left out."""
    content = message.get("content")
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(
        part.get("text", "") for part in content if isinstance(part, dict) and part.get("type") == "text"
    )


def refuse_images(backend_name: str, messages: Iterable[Message]) -> None:
    """Raise `ImagesNotSupportedError` when `messages` hold an image part."""
    if has_images(messages):
        raise ImagesNotSupportedError(
            f"the model backend {backend_name!r} has no vision but the prompt holds images; "
            "use a vision-language model, or a text prompt (no screenshots)"
        )


def encode_image(image: Any, fmt: str = "PNG") -> bytes:
    """PNG (or JPEG) bytes of a PIL image."""
    buffer = io.BytesIO()
    image.save(buffer, format=fmt)
    return buffer.getvalue()


def image_data_url(image: Any, fmt: str = "PNG") -> str:
    """`data:image/png;base64,...` for OpenAI-compatible `image_url` parts."""
    encoded = base64.b64encode(encode_image(image, fmt)).decode("ascii")
    return f"data:image/{fmt.lower()};base64,{encoded}"


def openai_messages(messages: Iterable[Message], fmt: str = "PNG") -> list[Message]:
    """`messages` for an OpenAI-compatible chat API: image parts become `image_url` parts with
    data URLs (text parts and string contents are kept; the input is not modified)."""
    out = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list) and any(is_image_part(p) for p in content):
            parts = [
                {"type": "image_url", "image_url": {"url": image_data_url(p["image"], fmt)}}
                if is_image_part(p)
                else p
                for p in content
            ]
            message = {**message, "content": parts}
        out.append(message)
    return out
