"""The browser's prompt styles (MiniWoB++ and every BrowserGym page): what `--prompt` names
when the environment is `browsergym`. `EnvHarness.prompt_styles` of envs/browsergym points here.
"""

from __future__ import annotations

from typing import Any

from envharness.prompts import Message, PromptStyle
from envharness.prompts.compact import compact_prompt, compact_tool_result
from envharness.prompts.text import default_prompt
from envharness.prompts.vision import vision_prompt


def harness_prompt(observation: Any, task: Any, tool_names: list[str]) -> list[Message]:
    """The seed tutorial's prompt (`BrowserGymSessionFactory`'s own): instructions, then the page."""
    from envharness.envs.browsergym.harness import action_instructions, format_observation

    return [{"role": "user", "content": action_instructions(tool_names) + "\n\n" + format_observation(observation, task=task, max_chars=12000)}]


def vision_session_factory(client_factory: Any, *, vision_max_side: int | None = 448, vision: Any = None, **options: Any) -> Any:
    """The "vision" style's sessions: every prompt and tool result carries the page's screenshot
    (`vision`: a whole `VisionPromptConfig`, else one that shrinks screenshots to `vision_max_side`)."""
    from envharness.prompts.vision import VisionPromptConfig
    from envharness.prompts.vision_session import VisionBrowserGymSessionFactory

    return VisionBrowserGymSessionFactory(client_factory, vision=vision or VisionPromptConfig(max_side=vision_max_side), **options)


STYLES: dict[str, PromptStyle] = {style.name: style for style in (
    PromptStyle("default", "per-step: goal, URL, AXTree, last steps and error, fresh each step", step=default_prompt),
    PromptStyle("compact", "conversation: goal + named elements, then each action's elements; suits small models",
                opening=compact_prompt, observation_text=compact_tool_result),
    PromptStyle("harness", "conversation: the seed tutorial's instructions + full page, then tool results", opening=harness_prompt),
    PromptStyle("vision", "conversation for vision models: screenshot + named elements, then each action's outcome "
                "with the new screenshot (what `train --model <VLM>` trains on)", opening=vision_prompt, vision=True,
                session_factory=vision_session_factory),
)}
