"""The browser's words in the vision prompt (`prompts/vision.py`): its system message, a worked
example, and the page's text views beside the screenshot: the named elements (their bids are
what actions refer to) or the whole accessibility tree."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

from envharness.harness.types import Message
from envharness.prompts.vision import VisionPromptConfig, VisionText, observation_parts

_ELEMENT = re.compile(r"^\s*\[(\w+)\]\s+(\w+)\s+'(.+)'")

EXAMPLE = [
    {
        "role": "user",
        "content": "Goal: Open the \"next\" link.\nElements:\n[4] link 'next'\n[5] button 'Submit'\nScreenshot: (none)",
    },
    {"role": "assistant", "content": "click('4')"},
]


def _tree(observation: Any) -> str:
    get = observation.get if isinstance(observation, dict) else (lambda k: getattr(observation, k, None))
    return get("axtree_txt") or get("text") or ""


def elements(observation: Any, config: VisionPromptConfig) -> str:
    """The page's named elements, bid first, at most `config.max_elements`."""
    found = [f"[{m[1]}] {m[2]} '{m[3]}'" for m in map(_ELEMENT.match, _tree(observation).splitlines()) if m]
    return "\n".join(found[: config.max_elements]) or "(no named elements)"


def axtree(observation: Any, config: VisionPromptConfig) -> str:
    """The whole accessibility tree, cut to `config.max_text_chars`."""
    return _tree(observation)[: config.max_text_chars]


def system_text(tool_names: Iterable[str]) -> str:
    actions = ", ".join(f"{name}()" if name == "noop" else f"{name}(...)" for name in tool_names)
    return (
        "You control a web browser. You see a screenshot of the page and its elements, each with an id in "
        f"square brackets. Reply with exactly one action, e.g. click('13'). Actions: {actions}"
    )


BROWSER_VISION_TEXT = VisionText(
    system=system_text,
    views={"elements": ("Elements:", elements), "axtree": ("Page:", axtree)},
    example=EXAMPLE,
)


def browser_vision(config: VisionPromptConfig | None = None) -> VisionPromptConfig:
    """`config` (default: the defaults) in the browser's words."""
    return (config or VisionPromptConfig()).in_words(BROWSER_VISION_TEXT)


def vision_tool_opening(
    observation: Any, task: Any, tool_names: Sequence[str], config: VisionPromptConfig | None = None
) -> list[Message]:
    """The first prompt for a vision model that acts through tool calls (TRL's
    `environment_factory`): the goal, page text and screenshot, the worked example answered
    with a `click` tool call."""
    config = browser_vision(config)
    goal = (
        observation.get("goal") if isinstance(observation, dict) else getattr(observation, "goal", None)
    ) or (task if isinstance(task, str) else "")
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
