"""A model in the server's seats: ``serve textarena --option opponent_model=SPEC`` lets sessions
ask for ``opponent="model"``, so a person on `/web`, an MCP client or any OpenEnv client plays
against a model (the embedded one, a run's checkpoint, an OpenAI-compatible endpoint).

Only the server's operator names the model (a server option); a client names the seat kind
``model`` and nothing else, so no request can make the server load a file of its choosing.
The model is loaded once per server and shared by its sessions; it runs on an event loop of
its own in a daemon thread, so the games' synchronous steps can wait on it (the session's step
hops to a worker thread for a model's turn, never blocking the server's loop). Each seat the
model plays keeps its own conversation: the game's opening for that seat, then only what that
seat was told since, never another seat's view; its reply's last bracketed move is played, and
a reply without one goes to the game as it is, which rules on it as on any invalid move.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field
from typing import Any

#: Seconds a model's move may take before the game gives up on it.
MOVE_TIMEOUT_S = 300.0
MAX_NEW_TOKENS = 64


class ModelPlayer:
    """One loaded model answering moves for any session of the server."""

    def __init__(self, spec: str, *, max_new_tokens: int = MAX_NEW_TOKENS) -> None:
        from envharness.models import load_backend

        self.spec = spec
        self.max_new_tokens = max_new_tokens
        self._backend = load_backend(spec)
        self._loop = asyncio.new_event_loop()
        threading.Thread(target=self._loop.run_forever, name="textarena-model-player", daemon=True).start()

    def reply(self, conversation: list[dict[str, Any]]) -> str:
        """The model's greedy reply to `conversation` (blocks the calling thread, not the server)."""
        from envharness.models.base import GenerationRequest, SamplingParams

        request = GenerationRequest(
            messages=conversation,
            sampling=SamplingParams.from_dict({"temperature": 0.0, "max_tokens": self.max_new_tokens}),
        )
        future = asyncio.run_coroutine_threadsafe(self._backend.generate([request]), self._loop)
        return future.result(MOVE_TIMEOUT_S)[0].text

    def seats(self) -> ModelSeats:
        """The model-played seats of one new game."""
        return ModelSeats(self)

    def close(self) -> None:
        async def shut() -> None:
            await self._backend.aclose()

        try:
            asyncio.run_coroutine_threadsafe(shut(), self._loop).result(30)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)


@dataclass
class ModelSeats:
    """The conversations of one game's model-played seats."""

    player: ModelPlayer
    conversations: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    shown: dict[int, int] = field(default_factory=dict)

    def move(self, seat: int, view: Any) -> str:
        """`seat`'s move, shown what it has not seen of its own log (`view`: its observation)."""
        from envharness.envs.textarena.environment import MAX_MESSAGE_CHARS
        from envharness.envs.textarena.parsing import parse_move
        from envharness.envs.textarena.sessions import REPLY_HINT, opening_text

        messages = list(view["messages"])
        conversation = self.conversations.setdefault(seat, [])
        start = self.shown.get(seat)
        self.shown[seat] = len(messages)
        if start is None:
            text = opening_text({"messages": messages}) + "\n\n" + REPLY_HINT
        else:
            new = [m for m in messages[start:] if not (m.category == "PLAYER_ACTION" and m.sender_id == seat)]
            text = "\n\n".join(str(m.content).strip() for m in new if str(m.content).strip()) or "(your turn)"
        conversation.append({"role": "user", "content": text})
        reply = self.player.reply(list(conversation))
        conversation.append({"role": "assistant", "content": reply})
        call = parse_move(reply)
        call = call[0] if isinstance(call, list) else call
        move = call.args.get("message") if call is not None else None
        return str(move or reply.strip() or "(no move)")[:MAX_MESSAGE_CHARS]


__all__ = ["MOVE_TIMEOUT_S", "ModelPlayer", "ModelSeats"]
