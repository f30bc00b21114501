"""TextArena's action, observation and state, with the field names of OpenEnv's textarena_env.

OpenEnv's client parses our observations into its own ``TextArenaObservation`` and ours
parses OpenEnv's: ``prompt``, ``messages`` (``sender_id``, ``content``, ``category``),
``current_player_id``, ``legal_players``, ``info``, plus ``reward`` and ``done``.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from envharness.core.types import Action, Observation, State

#: textarena's sender id for the game itself (its ``GAME_ID``).
GAME_SENDER = -1


class TextArenaMessage(BaseModel):
    """One message a player saw: from the game (``sender_id`` -1) or a player."""

    sender_id: int
    content: str
    #: textarena's ``ObservationType`` name: PROMPT, PLAYER_ACTION, GAME_MESSAGE, GAME_BOARD,
    #: GAME_ACTION_DESCRIPTION, GAME_ADMIN (invalid moves, the outcome).
    category: str


class TextArenaAction(Action):
    """The player's move as text, e.g. ``"[crane]"`` for Wordle."""

    message: str = Field(..., description="The move, in the game's own syntax (Wordle: '[crane]')")
    player_id: int | None = Field(
        default=None,
        description="Multi-player games: the player this move is for; refused when it is not their turn",
    )


class TextArenaObservation(Observation):
    """What the player sees after reset and after each move."""

    prompt: str = Field(default="", description="The game's instructions (its PROMPT messages)")
    messages: list[TextArenaMessage] = Field(
        default_factory=list, description="The episode's messages so far, oldest first"
    )
    current_player_id: int = 0
    legal_players: list[int] = Field(default_factory=list)
    info: dict[str, Any] = Field(
        default_factory=dict, description="The game's step info; at the end its outcome"
    )
    seat: int | None = Field(
        default=None, description="With an opponent playing the other seats: the client's own seat"
    )


class TextArenaState(State):
    """Episode bookkeeping; ``seed`` replays the episode (``reset(seed=..., task=env_id)``)."""

    env_id: str = "Wordle-v0"
    num_players: int = 1
    max_turns: int | None = None
    turn: int = 0
    last_reward: float = 0.0
    last_info: dict[str, Any] = Field(default_factory=dict)
    raw_state: dict[str, Any] = Field(default_factory=dict)
    seed: int | None = None
    game_kwargs: dict[str, Any] = Field(default_factory=dict)
    done: bool = False
    won: bool = False
    current_player_id: int = 0
    #: With an opponent: the client's seat and who plays the others (None: every seat is the client's).
    seat: int | None = None
    opponent: str | None = None


__all__ = ["GAME_SENDER", "TextArenaAction", "TextArenaMessage", "TextArenaObservation", "TextArenaState"]
