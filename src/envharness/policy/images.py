"""OpenAI image parts in, the backends' image parts out.

Agents send images as OpenAI `image_url` parts with `data:` URLs; the backends take
`{"type": "image", "image": PIL.Image}` parts (`models/images.py`). Each distinct URL is decoded
once per rollout (an agent re-sends every screenshot of its history at every call). Remote
URLs are refused: the endpoint never fetches anything.
"""

from __future__ import annotations

import base64
import binascii
import io
from typing import Any

from envharness.policy.errors import invalid


def _decode(url: str) -> Any:
    from PIL import Image, UnidentifiedImageError

    if not url.startswith("data:image/") or ";base64," not in url:
        raise invalid(
            "image_url: only data:image/...;base64 URLs are accepted (the endpoint fetches nothing)",
            "messages",
            "invalid_image",
        )
    try:
        image = Image.open(io.BytesIO(base64.b64decode(url.split(";base64,", 1)[1], validate=True)))
        image.load()
    except (binascii.Error, UnidentifiedImageError, OSError, ValueError) as exc:
        raise invalid(f"image_url: not a readable image ({exc})", "messages", "invalid_image") from None
    return image.convert("RGB")


def _has_image_url(message: dict[str, Any]) -> bool:
    content = message.get("content")
    return isinstance(content, list) and any(
        isinstance(p, dict) and p.get("type") == "image_url" for p in content
    )


def backend_messages(messages: list[dict[str, Any]], cache: dict[str, Any]) -> list[dict[str, Any]]:
    """`messages` with `image_url` parts decoded (unchanged objects when there are none)."""
    if not any(_has_image_url(m) for m in messages):
        return messages
    out = []
    for message in messages:
        if not _has_image_url(message):
            out.append(message)
            continue
        parts = []
        for part in message["content"]:
            if isinstance(part, dict) and part.get("type") == "image_url":
                url = (
                    (part.get("image_url") or {}).get("url")
                    if isinstance(part.get("image_url"), dict)
                    else part.get("image_url")
                )
                if not isinstance(url, str):
                    raise invalid("image_url parts need image_url.url", "messages", "invalid_image")
                if url not in cache:
                    cache[url] = _decode(url)
                parts.append({"type": "image", "image": cache[url]})
            else:
                parts.append(part)
        out.append({**message, "content": parts})
    return out
