"""Who plays which seat of a multi-player game when the client plays only one.

``reset(task="KuhnPoker-v0", opponent="scripted", seat=1)`` (or the server options
``opponent`` and ``seat``) makes a session single-agent: the environment plays every other
seat with a scripted player (`opponents.POLICIES`) and hands the client only its own seat's
view and reward. Any client then plays two-player games as it plays Wordle: ``eval`` and
``train`` through ``--env-option opponent=scripted``, MCP, ``/web``, TRL's environment_factory.
``opponent="model"`` seats the model the server was started with (``--option opponent_model=SPEC``,
`model_player.py`).

The seat defaults to ``alternate`` (seed modulo the number of players), so a run over
consecutive seeds plays each seat equally and the first mover's edge cancels; ``random``
draws it from the seed. Both depend on the seed alone, and the opponents' own randomness is
seeded from it too: the same seed replays the same game, opponent moves included.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from envharness.core.environment import InvalidOptions
from envharness.envs.textarena import games, opponents

SEAT_CHOICES = ("alternate", "random")
#: The opponent kind that seats the server's model (`model_player.py`).
MODEL = "model"


@dataclass
class Table:
    """One game's seating: the client's seat and the policy playing every other seat."""

    seat: int
    opponent: str
    rng: random.Random
    #: ``opponent="model"``: the server's model, one conversation per seat it plays
    #: (`model_player.ModelSeats`).
    model: Any = None

    def move(self, env_id: str, view: Any, player: int) -> str:
        if self.model is not None:
            return self.model.move(player, view)
        return opponents.POLICIES[self.opponent](env_id, view, self.rng)


def seat_table(
    env_id: str, num_players: int, seed: int, opponent: Any, seat: Any, model: Any = None
) -> Table | None:
    """The seating of one game, or None when the client plays every seat (no opponent).
    Bad values are refused in words (InvalidOptions). `model`: the server's `ModelPlayer`."""
    if opponent in (None, "", "none"):
        if seat not in (None, "", "alternate"):
            raise InvalidOptions("seat needs an opponent for the other seats (opponent=random or scripted)")
        return None
    if opponent == MODEL:
        if model is None:
            raise InvalidOptions(
                "opponent=model: this server seats no model (start it with --option opponent_model=SPEC)"
            )
    elif opponent not in opponents.POLICIES:
        kinds = [*opponents.POLICIES, *([MODEL] if model is not None else [])]
        raise InvalidOptions(f"unknown opponent {opponent!r}: one of {', '.join(kinds)}")
    if num_players < 2:
        raise InvalidOptions(f"opponent={opponent}: {env_id} is a single-player game, there is no other seat")
    family = games.game_of(env_id) or env_id
    if opponent == "scripted" and family not in opponents.SCRIPTED_GAMES:
        raise InvalidOptions(
            f"{env_id} has no scripted player (scripted games: {', '.join(opponents.SCRIPTED_GAMES)}); "
            "opponent=random plays a legal random move where the game lists its moves"
        )
    return Table(
        seat=_seat(seat, num_players, seed),
        opponent=opponent,  # "model", never its spec: a path on the server is none of the client's business
        rng=random.Random(f"opponent-{seed}"),
        model=model.seats() if opponent == MODEL else None,
    )


def _seat(seat: Any, num_players: int, seed: int) -> int:
    if seat in (None, "", "alternate"):
        return seed % num_players
    if seat == "random":
        return random.Random(f"seat-{seed}").randrange(num_players)
    try:
        number = int(seat)
    except (TypeError, ValueError):
        number = -1
    if isinstance(seat, bool) or not 0 <= number < num_players:
        raise InvalidOptions(
            f"seat={seat!r}: a player number from 0 to {num_players - 1}, or {' or '.join(SEAT_CHOICES)}"
        )
    return number


__all__ = ["SEAT_CHOICES", "Table", "seat_table"]
