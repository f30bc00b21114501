"""One multi-player game seen as one single-agent client per seat (self-play training).

The server runs the game with no opponent and hands the client every seat in turn. `SeatGame`
holds that one client; `SeatView`s are its per-seat faces, each an ordinary async client to the
harness: ``reset`` returns its seat's first view once it is that seat's turn, ``step`` sends its
seat's move and returns when it is that seat's turn again or the game is over, with that seat's
own reward. The seats' episodes run concurrently on one event loop and take turns through an
`asyncio.Condition`, so every seat can be played by the policy being trained, each with its
own conversation (its own prompt, moves and rewards: its own trajectory).

A seat whose episode stops before the game ends (its turns ran out, an error) closes its view;
the game is then over for every seat, unfinished (reward 0), so no seat waits for a move that
will never come.
"""

from __future__ import annotations

import asyncio
from typing import Any

from envharness.core.concurrency import call_maybe_async
from envharness.envs.textarena.client_seats import own_final_view
from envharness.envs.textarena.models import TextArenaAction


class SeatGame:
    """One game on one async client, shared by its `views` (one per seat)."""

    def __init__(self, client: Any, players: int, opponent: str = "self") -> None:
        self.client = client
        self.opponent = opponent
        self.views = [SeatView(self, seat) for seat in range(players)]
        self.result: Any = None
        self.last_mover: int | None = None
        self.abandoned_by: int | None = None
        self._reset: asyncio.Future[Any] | None = None
        self._turn = asyncio.Condition()
        self._open = players

    async def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """The client's `method`, awaited (an async client) or in a thread (a sync one)."""
        return await call_maybe_async(getattr(self.client, method), *args, **kwargs)

    async def reset(self, **kwargs: Any) -> Any:
        """The game's one reset, whichever seat asks first (every seat asks with the same game
        and seed)."""
        if self._reset is None:
            self._reset = asyncio.ensure_future(self.call("reset", **kwargs))
        self.result = await self._reset
        players = list(getattr(self.result.observation, "legal_players", None) or [])
        if len(players) != len(self.views):
            raise ValueError(
                f"{kwargs.get('task')} has {len(players)} players here, but {len(self.views)} seats were set"
            )
        return self.result

    async def step(self, seat: int, action: Any) -> None:
        async with self._turn:
            if self._over():
                raise ValueError(f"the game is over: seat {seat} cannot move")
            if self.result.observation.current_player_id != seat:
                raise ValueError(
                    f"it is player {self.result.observation.current_player_id}'s turn, not {seat}'s"
                )
            self.result = await self.call("step", action.model_copy(update={"player_id": seat}))
            self.last_mover = seat
            self._turn.notify_all()

    async def wait_turn(self, seat: int) -> Any:
        """The game when it is `seat`'s turn or over."""
        async with self._turn:
            await self._turn.wait_for(
                lambda: self._over() or self.result.observation.current_player_id == seat
            )
            return self.result

    def _over(self) -> bool:
        return bool(self.result.done) or self.abandoned_by is not None

    async def leave(self, seat: int) -> None:
        """`seat`'s episode is over; the last seat to leave closes the client."""
        async with self._turn:
            if self.result is not None and not self.result.done and self.abandoned_by is None:
                self.abandoned_by = seat
            self._turn.notify_all()
        self._open -= 1
        if self._open == 0:
            await self.call("close")


class SeatView:
    """One seat of a `SeatGame` as the harness's async client."""

    def __init__(self, game: SeatGame, seat: int) -> None:
        self.game = game
        self.seat = seat
        self._closed = False
        self._own: Any = None  # this seat's latest view of its own

    async def reset(self, **kwargs: Any) -> Any:
        await self.game.reset(**kwargs)
        return self._as_seat(await self.game.wait_turn(self.seat))

    async def step(self, action: TextArenaAction) -> Any:
        mover = getattr(action, "player_id", None)
        if mover is not None and mover != self.seat:
            raise ValueError(f"a move for player {mover}, but this view plays seat {self.seat}")
        await self.game.step(self.seat, action)
        return self._as_seat(await self.game.wait_turn(self.seat))

    def _as_seat(self, result: Any) -> Any:
        """`result` as this seat sees it: the seat, and at the end its own reward."""
        obs, reward, game = result.observation, result.reward, self.game
        info = dict(obs.info or {})
        done = bool(result.done) or game.abandoned_by is not None
        if game.abandoned_by is not None and not result.done:
            reward, info = (
                0.0,
                {**info, "truncated": True, "reason": f"seat {game.abandoned_by} stopped playing"},
            )
            obs = obs.model_copy(update={"done": True, "reward": 0.0, "info": info, "messages": []})
        elif done and game.last_mover != self.seat:  # the last view is the last mover's
            rewards = list(info.get("rewards") or [])
            reward = float(rewards[self.seat]) if self.seat < len(rewards) else 0.0
            info.update(
                won=reward >= 1.0, opponent_invalid_move=bool(info.get("invalid_move")), invalid_move=False
            )
            obs = own_final_view(self._own, obs, self.seat).model_copy(
                update={"reward": reward, "info": info}
            )
        obs = obs.model_copy(update={"seat": self.seat})
        self._own = obs
        return result.model_copy(update={"observation": obs, "reward": reward, "done": done})

    async def state(self) -> Any:
        state = await self.game.call("state")
        return state.model_copy(update={"seat": self.seat, "opponent": self.game.opponent})

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            await self.game.leave(self.seat)


def seat_game(client: Any, players: int, opponent: str = "self") -> SeatGame:
    """`EnvHarness.seat_views` for TextArena."""
    return SeatGame(client, players, opponent)


__all__ = ["SeatGame", "SeatView", "seat_game"]
