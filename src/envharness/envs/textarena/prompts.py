"""TextArena's prompt styles (`eval --prompt`, `train --prompt`), `EnvHarness.prompt_styles`.

"default" is a conversation: the game's prompt (and board) is the opening user message, each
later turn's tool result is what the game said after the move (feedback, board, an invalid
move's reason, the outcome), so eval and train read the game exactly as the harness session
writes it.
"""

from __future__ import annotations

from typing import Any

from envharness.envs.textarena.sessions import REPLY_HINT, feedback_text, opening_text
from envharness.harness.prompt_style import PromptStyle

Message = dict[str, Any]


def default_opening(observation: Any, task: Any, tool_names: list[str]) -> list[Message]:
    """The game's own prompt, then how to answer."""
    return [{"role": "user", "content": opening_text(observation) + "\n\n" + REPLY_HINT}]


STYLES: dict[str, PromptStyle] = {
    "default": PromptStyle(
        "default",
        "the game's prompt, then its feedback after each move (a conversation)",
        opening=default_opening,
        observation_text=feedback_text,
    ),
}
