"""A BrowserGym observation dict -> the fields our browser observation carries (runs in the worker).

The texts are BrowserGym's own (`browsergym.utils.obs`: ``flatten_axtree_to_str``,
``prune_html(flatten_dom_to_str(...))``), with one documented change shared with our engine:
Chromium's ``InlineTextBox`` nodes are dropped before flattening (`observation_text`), so both
engines print the text BrowserGym prints on the Chromium it was built for.
"""

from __future__ import annotations

import base64
import io
from typing import Any


def convert_observation(
    obs: dict[str, Any],
    *,
    axtree: bool = True,
    pruned_html: bool = True,
    extra_properties: bool = True,
    screenshot: bool = False,
    screenshot_format: str = "png",
) -> dict[str, Any]:
    """JSON-ready fields of `BrowserGymObservation` plus ``browsergym_obs`` (BrowserGym's extras)."""
    from browsergym.utils.obs import flatten_axtree_to_str, flatten_dom_to_str, prune_html

    from envharness.envs.browsergym.observation_text import drop_inline_text_boxes

    axtree_txt = ""
    if axtree and obs.get("axtree_object"):
        tree = dict(obs["axtree_object"])
        tree["nodes"] = drop_inline_text_boxes([dict(n) for n in tree.get("nodes", [])])
        axtree_txt = flatten_axtree_to_str(tree)
    html = prune_html(flatten_dom_to_str(obs["dom_object"])) if pruned_html and obs.get("dom_object") else ""
    image = encode_screenshot(obs.get("screenshot"), screenshot_format) if screenshot else None
    extras = {
        "chat_messages": [dict(m) for m in obs.get("chat_messages") or []],
        "goal": obs.get("goal", ""),
        "goal_object": list(obs.get("goal_object") or []),
        "url": obs.get("url", ""),
        "open_pages_urls": list(obs.get("open_pages_urls") or []),
        "open_pages_titles": list(obs.get("open_pages_titles") or []),
        "active_page_index": int(_scalar(obs.get("active_page_index", 0))),
        "last_action": obs.get("last_action", ""),
        "last_action_error": obs.get("last_action_error", ""),
        "elapsed_time": float(_scalar(obs.get("elapsed_time", 0.0))),
        "focused_element_bid": obs.get("focused_element_bid") or "",
    }
    if extra_properties:
        extras["extra_element_properties"] = obs.get("extra_element_properties") or {}
    return {
        "text": axtree_txt or html,
        "url": extras["url"],
        "goal": extras["goal"],
        "axtree_txt": axtree_txt,
        "pruned_html": html,
        "screenshot": image,
        "screenshot_format": screenshot_format if image is not None else None,
        "last_action": extras["last_action"],
        "last_action_error": extras["last_action_error"],
        "focused_element_bid": extras["focused_element_bid"],
        "open_pages_urls": extras["open_pages_urls"],
        "active_page_index": extras["active_page_index"],
        "elapsed_time": extras["elapsed_time"],
        "browsergym_obs": extras,
    }


def encode_screenshot(array: Any, fmt: str = "png") -> str | None:
    """BrowserGym's RGB array as base64 PNG/JPEG (what our wire carries), None without one."""
    if array is None:
        return None
    from PIL import Image

    buffer = io.BytesIO()
    image = Image.fromarray(array).convert("RGB")
    image.save(
        buffer, format="JPEG" if fmt == "jpeg" else "PNG", **({"quality": 85} if fmt == "jpeg" else {})
    )
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _scalar(value: Any) -> Any:
    """numpy arrays of one element (BrowserGym's Box spaces) -> the element."""
    if hasattr(value, "tolist"):
        value = value.tolist()
    while isinstance(value, list) and len(value) == 1:
        value = value[0]
    return value
