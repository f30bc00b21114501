"""`PromptStyle`: what a named prompt style is, defined below the environments so that an
environment can declare its own styles (`EnvHarness.prompt_styles`) without importing the
`prompts/` layer above it. The registry, the browser's styles and `opening_builder` live in
`envharness.prompts`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Message = dict[str, Any]
#: (first observation, task, enabled tool names) -> the episode's opening messages.
OpeningBuilder = Callable[[Any, Any, list[str]], list[Message]]
#: A per-step prompt: a `envharness.prompts.PromptContext` -> the step's messages.
StepBuilder = Callable[[Any], list[Message]]


@dataclass(frozen=True)
class PromptStyle:
    """A named way to prompt: exactly one of `step` (per-step) or `opening` (conversation)."""

    name: str
    description: str
    step: StepBuilder | None = None
    opening: OpeningBuilder | None = None
    #: Conversation styles: how later turns' tool results show the page after an action
    #: (None: the harness's default, the whole page text); eval and train use the same.
    observation_text: Callable[[Any], str] | None = None
    #: The episode shows the model screenshots: the opening and every tool result carry the
    #: page's image (the browser's vision session); only vision models can take it.
    vision: bool = False
    #: Builds the episode's session factory instead of the environment's own (same arguments
    #: as `EnvHarness.session_factory`, plus ``vision_max_side``): a style whose tool results
    #: are more than text (the browser's "vision" style: every result carries a screenshot).
    session_factory: Callable[..., Any] | None = None
    #: Vision styles: the names of the text views shown beside the screenshot
    #: (`prompts/vision.py`; `train --vision-page-text`), the default first.
    text_views: tuple[str, ...] = ()
    #: The opening when the model acts through its chat template's tool calls (TRL's
    #: `environment_factory`): same arguments as `opening`, the goal and state without a
    #: text reply format; an assistant message with `tool_calls` before the last user
    #: message is a worked example (shown in the template's own call form). None: the
    #: style's opening is used, with the generic tool instruction before it.
    tool_opening: OpeningBuilder | None = None

    def __post_init__(self) -> None:
        if (self.step is None) == (self.opening is None):
            raise ValueError(
                f"prompt style {self.name!r} needs exactly one of step= (per-step) or opening= (conversation)"
            )

    @property
    def conversation(self) -> bool:
        return self.opening is not None
