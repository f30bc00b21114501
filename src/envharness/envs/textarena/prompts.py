"""TextArena's prompt styles (`eval --prompt`, `train --prompt`), `EnvHarness.prompt_styles`.

"default" is a conversation: the game's prompt (and board) is the opening user message, each
later turn's tool result is what the game said after the move (feedback, board, an invalid
move's reason, the outcome), so eval and train read the game exactly as the harness session
writes it.
"""

from __future__ import annotations

from typing import Any

from envharness.envs.textarena.harness import EXAMPLE_MOVES
from envharness.envs.textarena.sessions import REPLY_HINT, feedback_text, opening_text
from envharness.harness.prompt_style import PromptStyle

Message = dict[str, Any]


def default_opening(observation: Any, task: Any, tool_names: list[str]) -> list[Message]:
    """The game's own prompt, then how to answer."""
    return [{"role": "user", "content": opening_text(observation) + "\n\n" + REPLY_HINT}]


def tool_opening(observation: Any, task: Any, tool_names: list[str]) -> list[Message]:
    """The game's own prompt for a model that plays through tool calls (TRL's
    `environment_factory`): each move is a `send` call, shown once with the game's example move."""
    move = EXAMPLE_MOVES.get(task if isinstance(task, str) else "", "[crane]")
    example = [
        {"role": "user", "content": "A game asks for your move in square brackets."},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"type": "function", "function": {"name": "send", "arguments": {"message": move}}}
            ],
        },
    ]
    system = "You play a text game. Send each move with the `send` tool, in the game's own format."
    return [
        {"role": "system", "content": system},
        *example,
        {"role": "user", "content": opening_text(observation)},
    ]


STYLES: dict[str, PromptStyle] = {
    "default": PromptStyle(
        "default",
        "the game's prompt, then its feedback after each move (a conversation)",
        opening=default_opening,
        observation_text=feedback_text,
        tool_opening=tool_opening,
    ),
}
