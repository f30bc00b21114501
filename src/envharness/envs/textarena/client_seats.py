"""A client that plays one seat of a multi-player game and lets a model play the others
(`--opponent self` or a model spec: `harness/seat_player.py`).

The server runs the game with no opponent, so it hands the client every seat in turn; this
wrapper acts for the agent's seat when the harness steps, and in between asks the opponent
for each other seat's move, showing that seat only its own view (its prompt, then what it has
not seen yet). The harness then sees a seated game, as with the server's own opponents: the
observation's ``seat``, the seat's own reward at the end, and ``seat`` / ``opponent`` in the
state (`sessions._seat_metrics`, eval's games table).
"""

from __future__ import annotations

from typing import Any

from envharness.envs.textarena.environment import MAX_MESSAGE_CHARS
from envharness.envs.textarena.models import GAME_SENDER, TextArenaAction, TextArenaMessage
from envharness.envs.textarena.parsing import parse_move
from envharness.envs.textarena.seats import _seat
from envharness.envs.textarena.sessions import REPLY_HINT, opening_text

#: A bound on opponent moves in a row (a game that never hands the turn back).
MAX_OPPONENT_MOVES = 64


class ModelSeatedClient:
    """Wraps an async TextArena client: `reset`/`step` return the agent's seat's view only."""

    def __init__(self, client: Any, opponent: Any, seat: str = "alternate"):
        self.client = client
        self.opponent = opponent
        self.seat_choice = seat
        self.seat: int | None = None
        self._shown: dict[int, int] = {}
        self._last_mover: int | None = None
        self._own: Any = None  # the agent's seat's latest view of its own
        self._steps = 0

    async def reset(self, **kwargs: Any) -> Any:
        self._shown, self._last_mover, self._own, self._steps = {}, None, None, 0
        result = await self.client.reset(**kwargs)
        if getattr(result.observation, "seat", None) is not None:
            raise ValueError(
                f"--opponent {self.opponent.name}: the server seats its own opponent; "
                "start it without --option opponent=... so the client plays the other seats"
            )
        players = list(getattr(result.observation, "legal_players", None) or [])
        if len(players) < 2:
            raise ValueError(f"--opponent {self.opponent.name}: {kwargs.get('task')} is a single-player game")
        self.seat = _seat(self.seat_choice, len(players), int(kwargs.get("seed") or 0))
        return await self._advance(result)

    async def step(self, action: Any) -> Any:
        mover = getattr(action, "player_id", None)
        if mover is not None and mover != self.seat:
            raise ValueError(f"a move for player {mover}, but the agent plays seat {self.seat}")
        self._last_mover, self._steps = self.seat, self._steps + 1
        return await self._advance(await self.client.step(action.model_copy(update={"player_id": self.seat})))

    async def _advance(self, result: Any) -> Any:
        """The other seats move until it is the agent's turn or the game ends."""
        for _ in range(MAX_OPPONENT_MOVES):
            obs = result.observation
            if result.done or obs.current_player_id == self.seat:
                return self._as_seat(result)
            player = obs.current_player_id
            reply = await self.opponent(player, self._unseen(player, obs))
            move = _move_of(reply)
            self._last_mover = player
            result = await self.client.step(TextArenaAction(message=move, player_id=player))
            # `after_step`: the agent's moves before this one (0: before its first), for the report
            self.opponent.moves[-1].update(move=move, done=bool(result.done), after_step=self._steps)
        raise RuntimeError(f"the opponent made {MAX_OPPONENT_MOVES} moves in a row without ending its turn")

    def _unseen(self, player: int, obs: Any) -> str:
        """What `player` is shown now: the opening at its first turn, then its new messages."""
        messages = list(obs.messages or [])
        start = self._shown.get(player)
        self._shown[player] = len(messages)
        if start is None:
            return opening_text(obs) + "\n\n" + REPLY_HINT
        new = [m for m in messages[start:] if not (m.category == "PLAYER_ACTION" and m.sender_id == player)]
        text = "\n\n".join(str(m.content).strip() for m in new if str(m.content).strip())
        return text or "(the game said nothing)"

    def _as_seat(self, result: Any) -> Any:
        obs = result.observation
        reward = result.reward
        if result.done and self._last_mover != self.seat:
            # the last view is the opponent's: the agent's reward is its own seat's, and an
            # invalid move that ended the game was the opponent's
            info = dict(obs.info or {})
            rewards = list(info.get("rewards") or [])
            reward = rewards[self.seat] if self.seat is not None and self.seat < len(rewards) else reward
            info.update(
                won=reward >= 1.0, opponent_invalid_move=bool(info.get("invalid_move")), invalid_move=False
            )
            obs = own_final_view(self._own, obs, self.seat).model_copy(
                update={"reward": reward, "info": info}
            )
        obs = obs.model_copy(update={"seat": self.seat})
        self._own = obs
        return result.model_copy(update={"observation": obs, "reward": reward})

    async def state(self) -> Any:
        state = await self.client.state()
        return state.model_copy(update={"seat": self.seat, "opponent": self.opponent.name})

    async def close(self) -> None:
        await self.client.close()


def own_final_view(own: Any, last: Any, seat: int | None) -> Any:
    """The end of a game another seat's move ended, as `seat` sees it (`own`: its latest view of
    its own, None before its first turn): its own prompt and messages and how the game ended,
    never the last mover's view (its prompt, its card). Self-play's seats and a seated model
    opponent end games alike, so a self-play record replays against a recorded opponent."""
    messages = list(own.messages) if own is not None else []
    reason = str((last.info or {}).get("reason") or "").strip()
    if reason:
        messages.append(TextArenaMessage(sender_id=GAME_SENDER, content=reason, category="GAME_ADMIN"))
    prompt = own.prompt if own is not None else f"(the game ended before player {seat}'s first turn)"
    metadata = dict(last.metadata or {}) | {"new_messages_from": len(own.messages) if own is not None else 0}
    return last.model_copy(
        update={"prompt": prompt, "messages": messages, "current_player_id": seat, "metadata": metadata}
    )


def _move_of(reply: str) -> str:
    """The move in an opponent's reply; a reply without one goes to the game as it is (cut to
    what a move may hold), and the game rules on it as on any invalid move."""
    call = parse_move(reply)
    call = call[0] if isinstance(call, list) else call
    move = call.args.get("message") if call is not None else None
    return str(move or reply.strip() or "(no move)")[:MAX_MESSAGE_CHARS]


def model_seated_client(client: Any, opponent: Any, seat: str) -> ModelSeatedClient:
    """`EnvHarness.seat_client` for TextArena."""
    return ModelSeatedClient(client, opponent, seat)


__all__ = ["MAX_OPPONENT_MOVES", "ModelSeatedClient", "model_seated_client", "own_final_view"]
