"""The vision prompt: what a vision-language policy sees of an observation, for eval and train.

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
- `page_text`: which of the environment's text views goes beside the screenshot (`""`: its
  first; `"none"`: none). The environment supplies its words (`VisionText`: the system
  message, the text views, a worked example) with its "vision" prompt style; the browser's
  are its named elements and its accessibility tree.

`vision_prompt(observation, task, tool_names)` has the signature of a session's
`prompt_builder`; `vision_step_parts` is what an environment turn shows after an action;
`vision_messages(...)` builds a whole per-step prompt from explicit pieces (for eval).
"""

from __future__ import annotations

import base64
import dataclasses
import io
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from envharness.models.images import is_image_part

Message = dict[str, Any]
OMITTED = "(earlier screenshot omitted)"


#: A text view: (the label shown before it, (observation, config) -> its text).
TextView = tuple[str, Callable[[Any, "VisionPromptConfig"], str]]


@dataclass(frozen=True)
class VisionText:
    """What an environment shows beside a screenshot, in its own words."""

    #: The tool names -> the system message.
    system: Callable[[Iterable[str]], str]
    #: The observation's text views by name, the default first.
    views: Mapping[str, TextView]
    #: A worked example (earlier turns, text only), shown when `VisionPromptConfig.example`.
    example: Sequence[Message] = ()


def _generic_system(tool_names: Iterable[str]) -> str:
    actions = ", ".join(f"{name}(...)" for name in tool_names)
    return (
        f"You see a screenshot and the observation's text. Reply with exactly one action. Actions: {actions}"
    )


#: For environments that supply no words of their own: the observation's `text` field.
GENERIC_TEXT = VisionText(
    system=_generic_system,
    views={
        "text": (
            "Observation:",
            lambda observation, config: (_field(observation, "text") or "")[: config.max_text_chars],
        )
    },
)


@dataclass
class VisionPromptConfig:
    #: Longest side of a screenshot as shown to the model, in pixels (None: as captured).
    max_side: int | None = 448
    #: How many of the latest screenshots stay in the context (None: all; needed for exact multi-turn training).
    keep_screenshots: int | None = None
    #: Which text view goes beside the screenshot: one of the environment's, "none", or "" (its first).
    page_text: str = ""
    #: Bounds on the text: items listed (a view that lists), characters (a view that cuts).
    max_elements: int = 40
    max_text_chars: int = 4000
    #: Show one worked example (text only) as an earlier turn: small models answer in the
    #: action format only when they have seen it once.
    example: bool = True
    #: The environment's words (its "vision" prompt style supplies them; None: `GENERIC_TEXT`).
    text: VisionText | None = None

    def __post_init__(self) -> None:
        views = self.words.views  # checked once the environment's words are known (`in_words`)
        if self.text is not None and self.page_text not in ("", "none", *views):
            raise ValueError(
                f"page_text must be one of {', '.join(repr(v) for v in (*views, 'none'))}, got {self.page_text!r}"
            )
        if self.max_side is not None and self.max_side < 28:
            raise ValueError(f"max_side must be at least 28 pixels, got {self.max_side}")
        if self.keep_screenshots is not None and self.keep_screenshots < 1:
            raise ValueError(
                f"keep_screenshots must be at least 1 (or None for all), got {self.keep_screenshots}"
            )

    @property
    def words(self) -> VisionText:
        return self.text or GENERIC_TEXT

    def in_words(self, text: VisionText) -> VisionPromptConfig:
        """This configuration in an environment's words (unless it has words already); the view
        asked for is checked against that environment's."""
        return self if self.text is not None else dataclasses.replace(self, text=text)


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


def page_text(observation: Any, config: VisionPromptConfig) -> tuple[str, str]:
    """(label, text) of the text view `config.page_text` asks for ("" and "" for none)."""
    views = config.words.views
    if config.page_text == "none":
        return "", ""
    label, view = views[config.page_text] if config.page_text else next(iter(views.values()))
    return label, view(observation, config)


def observation_parts(
    observation: Any, config: VisionPromptConfig, *, header: str = ""
) -> list[dict[str, Any]]:
    """One observation as content parts: header and page text, then the screenshot (if any)."""
    text = header
    label, listing = page_text(observation, config)
    if listing:
        text += ("\n" if text else "") + f"{label}\n" + listing
    parts: list[dict[str, Any]] = [
        {"type": "text", "text": text + ("\nScreenshot:" if text else "Screenshot:")}
    ]
    image = fit_image(to_image(_field(observation, "screenshot")), config.max_side)
    if image is not None:
        parts.append({"type": "image", "image": image})
    else:
        parts[0]["text"] += " (none)"
    return parts


def vision_prompt(
    observation: Any, task: Any, tool_names: Sequence[str], config: VisionPromptConfig | None = None
) -> list[Message]:
    """The first prompt of an episode: system text, (a worked example,) then the goal, page
    text and screenshot."""
    config = config or VisionPromptConfig()
    goal = _field(observation, "goal") or (task if isinstance(task, str) else "")
    return [
        {"role": "system", "content": config.words.system(tool_names)},
        *(config.words.example if config.example else []),
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
