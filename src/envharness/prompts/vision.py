"""The vision prompt: what a vision-language policy sees of a web page, for eval and train.

Each step's screenshot goes into the newest message, next to the text it belongs to (not all
images into the first message, which is what TRL's `prepare_multimodal_messages` does).
Messages use the image-part convention of `models/images.py`.

Knobs (`VisionPromptConfig`):
- `max_side`: screenshots are shrunk (aspect kept) so their longest side is at most this
  many pixels. Fewer pixels, fewer placeholder tokens: the single biggest cost of a VLM step.
- `keep_screenshots`: how many of the latest screenshots stay in the context; older ones
  become the text "(earlier screenshot omitted)". `None` keeps all of them, which is what
  exact multi-turn training needs: dropping an image rewrites earlier tokens, so a trainer
  can no longer extend the previous turn's sequence (the token assembler then stops).
  Per-step prompts (eval builds a fresh prompt each step) can keep just the latest one.
- `page_text`: besides the screenshot, the named elements of the page (`"elements"`, their
  bids are what actions refer to), the whole accessibility tree (`"axtree"`) or nothing.

`vision_prompt(observation, task, tool_names)` has the signature of a BrowserGym session's
`prompt_builder`; `vision_step_parts` is what an environment turn shows after an action;
`vision_messages(...)` builds a whole per-step prompt from explicit pieces (for eval).
"""

from __future__ import annotations

import base64
import io
import re
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from envharness.models.images import is_image_part

Message = dict[str, Any]
OMITTED = "(earlier screenshot omitted)"
_ELEMENT = re.compile(r"^\s*\[(\w+)\]\s+(\w+)\s+'(.+)'")


@dataclass
class VisionPromptConfig:
    #: Longest side of a screenshot as shown to the model, in pixels (None: as captured).
    max_side: int | None = 448
    #: How many of the latest screenshots stay in the context (None: all; needed for exact multi-turn training).
    keep_screenshots: int | None = None
    #: Page text beside the screenshot: "elements" (named elements, bid first), "axtree" or "none".
    page_text: str = "elements"
    #: Bound on the page text: elements listed, or characters of the AXTree.
    max_elements: int = 40
    max_axtree_chars: int = 4000
    #: Show one worked example (text only) as an earlier turn: small models answer in the
    #: action format only when they have seen it once.
    example: bool = True

    def __post_init__(self) -> None:
        if self.page_text not in ("elements", "axtree", "none"):
            raise ValueError(f"page_text must be 'elements', 'axtree' or 'none', got {self.page_text!r}")
        if self.max_side is not None and self.max_side < 28:
            raise ValueError(f"max_side must be at least 28 pixels, got {self.max_side}")
        if self.keep_screenshots is not None and self.keep_screenshots < 1:
            raise ValueError(
                f"keep_screenshots must be at least 1 (or None for all), got {self.keep_screenshots}"
            )


def to_image(screenshot: Any) -> Any:
    """A PIL RGB image from what observations carry: base64 PNG/JPEG text, bytes, an H×W×3
    array (or nested lists, OpenEnv's wire form), or a PIL image. None stays None."""
    from PIL import Image

    if screenshot is None:
        return None
    if isinstance(screenshot, Image.Image):
        return screenshot.convert("RGB")
    if isinstance(screenshot, str):
        screenshot = base64.b64decode(screenshot)
    if isinstance(screenshot, (bytes, bytearray)):
        return Image.open(io.BytesIO(screenshot)).convert("RGB")
    import numpy as np

    array = np.asarray(screenshot, dtype=np.uint8)
    if array.ndim != 3 or array.shape[-1] not in (3, 4):
        raise ValueError(f"a screenshot array must be H×W×3 (or ×4), got shape {array.shape}")
    return Image.fromarray(array[..., :3])


def fit_image(image: Any, max_side: int | None) -> Any:
    """`image` shrunk so its longest side is at most `max_side` (never enlarged)."""
    if image is None or max_side is None or max(image.size) <= max_side:
        return image
    scale = max_side / max(image.size)
    return image.resize((max(1, round(image.width * scale)), max(1, round(image.height * scale))))


def _field(observation: Any, name: str) -> Any:
    return observation.get(name) if isinstance(observation, dict) else getattr(observation, name, None)


def page_text(observation: Any, config: VisionPromptConfig) -> str:
    """The page text shown beside the screenshot, as `config.page_text` asks."""
    tree = _field(observation, "axtree_txt") or _field(observation, "text") or ""
    if config.page_text == "none":
        return ""
    if config.page_text == "axtree":
        return tree[: config.max_axtree_chars]
    elements = [f"[{m[1]}] {m[2]} '{m[3]}'" for m in map(_ELEMENT.match, tree.splitlines()) if m][
        : config.max_elements
    ]
    return "\n".join(elements) or "(no named elements)"


def system_text(tool_names: Iterable[str]) -> str:
    actions = ", ".join(f"{name}()" if name == "noop" else f"{name}(...)" for name in tool_names)
    return (
        "You control a web browser. You see a screenshot of the page and its elements, each with an id in "
        f"square brackets. Reply with exactly one action, e.g. click('13'). Actions: {actions}"
    )


def observation_parts(
    observation: Any, config: VisionPromptConfig, *, header: str = ""
) -> list[dict[str, Any]]:
    """One observation as content parts: header and page text, then the screenshot (if any)."""
    text = header
    listing = page_text(observation, config)
    if listing:
        text += (
            ("\n" if text else "")
            + ("Elements:\n" if config.page_text == "elements" else "Page:\n")
            + listing
        )
    parts: list[dict[str, Any]] = [
        {"type": "text", "text": text + ("\nScreenshot:" if text else "Screenshot:")}
    ]
    image = fit_image(to_image(_field(observation, "screenshot")), config.max_side)
    if image is not None:
        parts.append({"type": "image", "image": image})
    else:
        parts[0]["text"] += " (none)"
    return parts


EXAMPLE = [
    {
        "role": "user",
        "content": "Goal: Open the \"next\" link.\nElements:\n[4] link 'next'\n[5] button 'Submit'\nScreenshot: (none)",
    },
    {"role": "assistant", "content": "click('4')"},
]


def vision_prompt(
    observation: Any, task: Any, tool_names: Sequence[str], config: VisionPromptConfig | None = None
) -> list[Message]:
    """The first prompt of an episode: system text, (a worked example,) then the goal, page
    text and screenshot."""
    config = config or VisionPromptConfig()
    goal = _field(observation, "goal") or (task if isinstance(task, str) else "")
    return [
        {"role": "system", "content": system_text(tool_names)},
        *(EXAMPLE if config.example else []),
        {"role": "user", "content": observation_parts(observation, config, header=f"Goal: {goal}")},
    ]


def vision_tool_opening(
    observation: Any, task: Any, tool_names: Sequence[str], config: VisionPromptConfig | None = None
) -> list[Message]:
    """The first prompt for a vision model that acts through tool calls (TRL's
    `environment_factory`): the goal, page text and screenshot, the worked example answered
    with a `click` tool call."""
    config = config or VisionPromptConfig()
    goal = _field(observation, "goal") or (task if isinstance(task, str) else "")
    system = (
        "You control a web browser. You see a screenshot of the page and its elements, each with an id in "
        "square brackets; tools take that id as `bid`."
    )
    example = [
        EXAMPLE[0],
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"type": "function", "function": {"name": "click", "arguments": {"bid": "4"}}}],
        },
    ]
    return [
        {"role": "system", "content": system},
        *(example if config.example else []),
        {"role": "user", "content": observation_parts(observation, config, header=f"Goal: {goal}")},
    ]


def vision_step_parts(
    observation: Any, reward: Any, done: bool, error: str | None, config: VisionPromptConfig | None = None
) -> list[dict[str, Any]]:
    """What the environment shows after an action: outcome, page text and the new screenshot."""
    config = config or VisionPromptConfig()
    header = f"Reward: {reward}  Done: {bool(done)}" + (f"\nError: {error}" if error else "")
    return observation_parts(observation, config, header=header)


def limit_screenshots(messages: list[Message], keep: int | None) -> list[Message]:
    """`messages` with all but the latest `keep` image parts replaced by `OMITTED` text."""
    if keep is None:
        return list(messages)
    positions = [
        (i, j)
        for i, m in enumerate(messages)
        if isinstance(m.get("content"), list)
        for j, p in enumerate(m["content"])
        if is_image_part(p)
    ]
    drop = set(positions[: max(0, len(positions) - keep)])
    out = []
    for i, message in enumerate(messages):
        if isinstance(message.get("content"), list) and any(
            (i, j) in drop for j in range(len(message["content"]))
        ):
            parts = [
                {"type": "text", "text": OMITTED} if (i, j) in drop else p
                for j, p in enumerate(message["content"])
            ]
            message = {**message, "content": parts}
        out.append(message)
    return out


def vision_messages(
    goal: str,
    observation: Any,
    *,
    tool_names: Sequence[str],
    history: Sequence[tuple[str, Any]] = (),
    config: VisionPromptConfig | None = None,
) -> list[Message]:
    """A whole per-step prompt (eval): the first page, then for each earlier step its action
    (an assistant turn) and the page it led to, the current screenshot in the last message.
    `history`: (action, observation after it) pairs, oldest first; `observation` is the first page."""
    config = config or VisionPromptConfig()
    messages = vision_prompt(observation, goal, tool_names, config)
    for action, after in history:
        messages.append({"role": "assistant", "content": action})
        messages.append(
            {"role": "user", "content": observation_parts(after, config, header=f"After {action}:")}
        )
    return limit_screenshots(messages, config.keep_screenshots)
