"""BrowserGym sessions for vision-language policies: screenshots in every environment turn.

`VisionBrowserGymSessionFactory` is `BrowserGymSessionFactory` with the vision prompt
(`prompts/vision.py`): each episode asks the server for screenshots (`screenshot=True` at
reset), the first prompt shows the goal, the page's elements and the screenshot, and each
action's tool result is content parts (outcome, elements, the new screenshot), so the newest
screenshot is always in the newest message. Used by `envharness train --model <vlm>`.
"""

from __future__ import annotations

import functools
from typing import Any

from envharness.envs.browsergym.sessions import BrowserGymSessionFactory
from envharness.envs.browsergym.vision_text import browser_vision
from envharness.prompts.vision import VisionPromptConfig, vision_prompt, vision_step_parts


class VisionBrowserGymSessionFactory(BrowserGymSessionFactory):
    """A BrowserGym session factory whose prompts and tool results carry screenshots."""

    def __init__(
        self,
        client_factory: Any,
        *,
        vision: VisionPromptConfig | None = None,
        screenshot_format: str = "png",
        **kwargs: Any,
    ):
        self.vision = browser_vision(vision)
        if kwargs.get("prompt_builder") is None:
            kwargs["prompt_builder"] = functools.partial(vision_prompt, config=self.vision)
        reset_kwargs = {
            "screenshot": True,
            "screenshot_format": screenshot_format,
            **dict(kwargs.pop("reset_kwargs", None) or {}),
        }
        super().__init__(client_factory, reset_kwargs=reset_kwargs, **kwargs)

    def _tool_result(self, name: str, arguments: dict[str, Any], result: Any, state: Any) -> Any:
        text_result = super()._tool_result(name, arguments, result, state)
        text_result.data = vision_step_parts(
            result.observation, result.reward, bool(result.done), None, self.vision
        )
        return text_result
