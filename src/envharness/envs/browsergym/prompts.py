"""The browser's prompts (MiniWoB++ and every BrowserGym page): the per-step prompt eval uses
by default, as BrowserGym/AgentLab agents and the seeds build them, and the styles `--prompt`
names for this environment (`EnvHarness.prompt_styles` points at `STYLES`).

The per-step prompt writes the goal, the URL, the AXTree cut to a token budget, the previous
steps and the last error, and shows one worked example as an earlier turn: small models
(SmolLM2-135M) answer in the action format only when they have seen it once.
"""

from __future__ import annotations

import functools
from typing import Any

from envharness.envs.browsergym.action_tools import DEFAULT_TOOL_NAMES, action_list
from envharness.envs.browsergym.compact_prompt import (
    compact_prompt,
    compact_tool_opening,
    compact_tool_result,
)
from envharness.envs.browsergym.sessions import action_instructions, format_observation
from envharness.envs.browsergym.vision_session import VisionBrowserGymSessionFactory
from envharness.envs.browsergym.vision_text import BROWSER_VISION_TEXT, browser_vision, vision_tool_opening
from envharness.prompts import PromptStyle
from envharness.prompts.text import Message, PromptContext, format_history, truncate_to_tokens
from envharness.prompts.vision import VisionPromptConfig, vision_prompt


def observation_text(goal: str, url: str, axtree: str, history: str, error: str) -> str:
    """One step's user message. The tree sits between its header and a blank line, where
    readers of these prompts (the scripted backend) look for it."""
    return (
        f"Goal: {goal}\n"
        f"URL: {url or '(unknown)'}\n"
        f"Page (accessibility tree):\n{axtree or '(empty page)'}\n\n"
        f"Previous steps:\n{history}\n"
        f"Last action error: {error or 'none'}\n\n"
        "Reply with one action."
    )


# Shaped like a real MiniWoB tree (its root line names the URL too): with a plainer example,
# SmolLM2-135M copies words of the root line into the bid (click('click-test-test-...')).
_EXAMPLE_URL = "http://miniwob.local/miniwob/example.html"
_EXAMPLE_TREE = f"RootWebArea 'Example Task', focused, url='{_EXAMPLE_URL}'\n\t[11] textbox ''\n\t[13] button 'OK'\n\t[14] button 'Cancel'"
EXAMPLE = [
    {
        "role": "user",
        "content": observation_text('Click on the "OK" button.', _EXAMPLE_URL, _EXAMPLE_TREE, "none", ""),
    },
    {"role": "assistant", "content": "click('13')"},
]


def default_prompt(ctx: PromptContext) -> list[Message]:
    """System message with the actions, one worked example, then this step's page."""
    system = (
        "You are a web agent. You act on a web page to complete a goal. Page elements have an id in\n"
        "square brackets, e.g. [13]. Reply with exactly one action and nothing else.\n"
        "Actions:\n" + action_list(ctx.tool_names or DEFAULT_TOOL_NAMES)
    )
    page = truncate_to_tokens(ctx.text, ctx.text_token_budget, ctx.count_tokens)
    user = observation_text(
        ctx.goal, ctx.url, page, format_history(ctx.history, ctx.history_steps), ctx.last_action_error
    )
    return [{"role": "system", "content": system}, *EXAMPLE, {"role": "user", "content": user}]


def harness_prompt(observation: Any, task: Any, tool_names: list[str]) -> list[Message]:
    """The seed tutorial's prompt (`BrowserGymSessionFactory`'s own): instructions, then the page."""
    return [
        {
            "role": "user",
            "content": action_instructions(tool_names)
            + "\n\n"
            + format_observation(observation, task=task, max_chars=12000),
        }
    ]


def vision_session_factory(
    client_factory: Any, *, vision_max_side: int | None = 448, vision: Any = None, **options: Any
) -> Any:
    """The "vision" style's sessions: every prompt and tool result carries the page's screenshot
    (`vision`: a whole `VisionPromptConfig`, else one that shrinks screenshots to `vision_max_side`)."""
    return VisionBrowserGymSessionFactory(
        client_factory, vision=vision or VisionPromptConfig(max_side=vision_max_side), **options
    )


STYLES: dict[str, PromptStyle] = {
    style.name: style
    for style in (
        PromptStyle(
            "default",
            "per-step: goal, URL, AXTree, last steps and error, fresh each step",
            step=default_prompt,
        ),
        PromptStyle(
            "compact",
            "conversation: goal + named elements, then each action's elements; suits small models",
            opening=compact_prompt,
            observation_text=compact_tool_result,
            tool_opening=compact_tool_opening,
        ),
        PromptStyle(
            "harness",
            "conversation: the seed tutorial's instructions + full page, then tool results",
            opening=harness_prompt,
        ),
        PromptStyle(
            "vision",
            "conversation for vision models: screenshot + named elements, then each action's outcome "
            "with the new screenshot (what `train --model <VLM>` trains on)",
            opening=functools.partial(vision_prompt, config=browser_vision()),
            vision=True,
            text_views=(*BROWSER_VISION_TEXT.views, "none"),
            session_factory=vision_session_factory,
            tool_opening=vision_tool_opening,
        ),
    )
}
