"""A model in the seats of a multi-player game that the model under test does not play
(`--opponent self` or a model spec), played by the client.

Each seat keeps its own conversation: it is shown only its own view (the text its
environment's seat client hands over) and its own replies, never another seat's. Every move
is noted in `moves`, which the episode's record keeps apart from the model-under-test's
messages: an opponent's tokens are never trained on, and replay reads its moves back instead
of sampling them again.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from envharness.harness.types import Message

Generate = Callable[[list[Message]], Awaitable[str]]


@dataclass
class ModelSeats:
    """The opponent of one episode: `await seats(seat, text)` -> the model's reply for `seat`."""

    name: str
    generate: Generate
    conversations: dict[int, list[Message]] = field(default_factory=dict)
    #: One entry per opponent move, in order: seat, what it was shown, its reply; the seat
    #: client adds the move it sent (``move``) and what the game said about it.
    moves: list[dict[str, Any]] = field(default_factory=list)

    async def __call__(self, seat: int, text: str) -> str:
        conversation = self.conversations.setdefault(seat, [])
        conversation.append({"role": "user", "content": text})
        reply = await self.generate(list(conversation))
        conversation.append({"role": "assistant", "content": reply})
        self.moves.append({"seat": seat, "shown": text, "reply": reply})
        return reply


@dataclass
class RecordedSeats:
    """The opponent of a recorded episode, for `envharness replay`: each move as it was recorded,
    never sampled again. What the game shows it is compared with what it was shown then; a
    game that asks for more moves than were recorded has parted from the record."""

    name: str
    recorded: list[dict[str, Any]]
    moves: list[dict[str, Any]] = field(default_factory=list)
    #: (move number from 1, what differed, recorded, replayed)
    differences: list[tuple[int, str, Any, Any]] = field(default_factory=list)

    async def __call__(self, seat: int, text: str) -> str:
        number = len(self.moves) + 1
        if number > len(self.recorded):
            raise RecordedMovesExhausted(
                f"the replayed game asks the opponent for move {number}; {len(self.recorded)} were recorded"
            )
        move = self.recorded[number - 1]
        if move.get("seat") != seat:
            self.differences.append((number, "the opponent's seat", move.get("seat"), seat))
        if "shown" in move and move["shown"] != text:  # a self-play seat's record keeps its own view
            self.differences.append((number, "what the opponent was shown", move.get("shown"), text))
        reply = str(move.get("reply") or "")
        self.moves.append({"seat": seat, "shown": text, "reply": reply})
        return reply


class RecordedMovesExhausted(RuntimeError):
    """A replayed game wants more opponent moves than the record holds."""


__all__ = ["Generate", "ModelSeats", "RecordedMovesExhausted", "RecordedSeats"]
