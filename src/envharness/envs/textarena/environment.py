"""`TextArenaEnvironment`: one textarena game per session, behind OpenEnv's observation.

``reset(seed=7, task="Mastermind-v0", code_length=5)`` picks the game and its keyword
arguments per episode (both default to the server's); the same seed replays the same game,
moves included (`randomness.SessionRandom`). Every reset without a seed draws one and reports it
in ``state.seed``. Moves go through textarena's own wrappers (its ``ActionFormattingWrapper``
adds the square brackets a bare ``crane`` lacks); observations are built from the game's typed
messages, so ``messages`` keeps each message's sender and category, and the outcome (which
textarena keeps in ``game_info``) is added as a last GAME_ADMIN message and ``info["reason"]``.

The reward is the game's reward for the player (0 until the game ends; Wordle pays the share
of letters found when guesses run out); ``info["won"]`` is reward >= 1. A move after the end,
an empty move and a move over `MAX_MESSAGE_CHARS` raise ValueError: the server answers with the
message and the session stays usable.

Multi-player games (``reset(task="KuhnPoker-v0")``, `games.PLAYER_COUNTS`): one session is one
game and a step acts for the player to move. Each observation is what that player sees
(``current_player_id``, its own prompt and messages: never another player's private card or
word); an action may name its ``player_id`` and is refused when it is not that player's turn.
The last observation is the view of the player who made the last move, with every seat's
reward in ``info["rewards"]`` (index = player id) and ``reward`` the mover's own.
"""

from __future__ import annotations

import secrets
import uuid
from dataclasses import dataclass, field
from typing import Any

from envharness.core.environment import Environment, InvalidOptions
from envharness.core.option_bounds import ResetOptions
from envharness.core.types import EnvironmentMetadata
from envharness.envs.textarena import games, seats
from envharness.envs.textarena.models import (
    GAME_SENDER,
    TextArenaAction,
    TextArenaMessage,
    TextArenaObservation,
    TextArenaState,
)
from envharness.envs.textarena.options import RESET_OPTIONS
from envharness.envs.textarena.randomness import SessionRandom

#: Longer moves are refused before they reach the game (no textarena move is near this).
MAX_MESSAGE_CHARS = 4096
#: A bound on scripted seats moving in a row (a game that never hands the turn back).
MAX_OPPONENT_MOVES = 10_000


@dataclass
class TextArenaConfig:
    """A session's defaults; `reset` options override `env_id` and `game_kwargs` per episode."""

    env_id: str = "Wordle-v0"
    num_players: int = 1
    max_turns: int | None = None
    game_kwargs: dict[str, Any] = field(default_factory=dict)
    #: Multi-player games: who plays the seats the client does not (`seats.py`); None: the
    #: client plays every seat.
    opponent: str | None = None
    seat: int | str | None = None
    #: The server's model for ``opponent="model"`` (`model_player.ModelPlayer`), shared.
    model_player: Any = None


class TextArenaEnvironment(Environment[TextArenaAction, TextArenaObservation]):
    """A textarena game, one or more players; sync (the server runs resets in a worker thread)."""

    action_type = TextArenaAction
    observation_type = TextArenaObservation
    state_type = TextArenaState
    supports_concurrent_sessions = True

    @property
    def reset_options(self) -> ResetOptions:  # type: ignore[override]
        """The options a client's reset may set, bounded (`options.py`); the server checks them."""
        return RESET_OPTIONS.with_default_task(self.config.env_id)

    def __init__(self, config: TextArenaConfig | None = None) -> None:
        self.config = config or TextArenaConfig()
        self._game: Any = None
        self._rng = SessionRandom()
        self._logs: dict[int, list[TextArenaMessage]] = {0: []}
        #: How much of each player's log that player has been shown (``new_messages_from``).
        self._seen: dict[int, int] = {}
        self._table: seats.Table | None = None
        self._state = TextArenaState(
            env_id=self.config.env_id,
            num_players=self.config.num_players,
            max_turns=self.config.max_turns,
            game_kwargs=dict(self.config.game_kwargs),
        )

    # -- episode ----------------------------------------------------------------------
    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        task: str | None = None,
        env_id: str | None = None,
        num_players: int | None = None,
        opponent: str | None = None,
        seat: int | str | None = None,
        **game_kwargs: Any,
    ) -> TextArenaObservation:
        """`task` (or `env_id`): the game of this episode; `num_players`: its number of players
        (default: the server's, or the fewest the game takes); `opponent` and `seat`: who plays
        the other seats (`seats.py`); other options: the game's keyword arguments."""
        chosen = games.check_env_id(task or env_id or self.config.env_id)
        if chosen == self.config.env_id and not game_kwargs:
            game_kwargs = dict(self.config.game_kwargs)
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool) or seed < 0):
            raise InvalidOptions(f"seed must be a non-negative integer, got {seed!r}")
        players = self._players_for(chosen, num_players)
        seed = secrets.randbits(31) if seed is None else seed
        if players > 1:  # the server's seating applies to its multi-player games only
            opponent = self.config.opponent if opponent is None else opponent
            seat = self.config.seat if seat is None else seat
        table = seats.seat_table(chosen, players, seed, opponent, seat, self.config.model_player)
        game = games.make_game(chosen, game_kwargs)
        try:
            with games.one_at_a_time(chosen):
                self._rng.run(seed, lambda: game.reset(num_players=players, seed=seed))
        except Exception as exc:
            raise InvalidOptions(
                f"{chosen} could not start with {game_kwargs or 'its defaults'}: {type(exc).__name__}: {exc}"
            ) from exc
        self._game = game
        self._table = table
        self._logs = {player: [] for player in range(players)}
        self._seen = {}
        self._state = TextArenaState(
            episode_id=episode_id or str(uuid.uuid4()),
            step_count=0,
            env_id=chosen,
            num_players=players,
            max_turns=self.config.max_turns,
            seed=seed,
            game_kwargs=dict(game_kwargs),
            seat=table.seat if table else None,
            opponent=table.opponent if table else None,
        )
        done, info = self._play_opponents(False, {})
        return self._observe(
            done=done, viewer=table.seat if table else self._current(), scored=done, info=info
        )

    def _players_for(self, env_id: str, asked: int | None) -> int:
        """The number of players of this episode: asked, the server's setting, or the game's fewest."""
        if asked is not None and (not isinstance(asked, int) or isinstance(asked, bool)):
            raise InvalidOptions(f"num_players must be a whole number, got {asked!r}")
        low, _ = games.player_counts(env_id)
        chosen = asked if asked is not None else self.config.num_players
        if asked is None and chosen < low:
            chosen = low  # the server's default of 1 means "as few as the game takes"
        return games.check_players(env_id, chosen)

    def step(self, action: TextArenaAction) -> TextArenaObservation:
        if self._game is None:
            raise ValueError("no game yet: call reset first")
        if self._state.done:
            raise ValueError(
                f"the {self._state.env_id} game is over (reward {self._state.last_reward}); "
                "call reset to play again"
            )
        message = action.message
        if not message.strip():
            raise ValueError("empty move: send the move as text, e.g. '[crane]' for Wordle")
        if len(message) > MAX_MESSAGE_CHARS:
            raise ValueError(f"move of {len(message)} characters refused: at most {MAX_MESSAGE_CHARS}")
        mover = self._current()
        if action.player_id is not None and action.player_id != mover:
            raise ValueError(
                f"it is player {mover}'s turn, not player {action.player_id}'s: "
                f"the move is refused (the observation's current_player_id says who moves)"
            )
        self._state.step_count += 1  # the client's moves; the opponents' are not steps of this session
        done, info = self._play(message)
        done, info = self._play_opponents(done, info)
        viewer = self._table.seat if self._table else (mover if done else self._current())
        return self._observe(done=done, viewer=viewer, scored=True, info=info)

    def _play(self, message: str) -> tuple[bool, dict[str, Any]]:
        """One move for the player to move: (done, the game's step info)."""
        done, info = self._rng.run(None, lambda: self._game.step(message))
        base = games.unwrap(self._game).state
        games.repair_swapped_invalid_move(base)
        self._state.turn = int(getattr(base, "turn", self._state.turn + 1))
        info = dict(info or {})
        if not done and self.config.max_turns is not None and self._state.step_count >= self.config.max_turns:
            done = True
            info["truncated"] = True
            info.setdefault("reason", f"TEXTARENA_MAX_TURNS={self.config.max_turns} moves reached")
        return bool(done), info

    def _play_opponents(self, done: bool, info: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
        """The scripted seats move until it is the client's seat's turn or the game ends."""
        for _ in range(MAX_OPPONENT_MOVES):
            if self._table is None or done or self._current() == self._table.seat:
                return done, info
            player = self._current()
            self._drain(player)
            move = self._table.move(self._state.env_id, {"messages": self._logs[player]}, player)
            done, info = self._play(move)
        raise RuntimeError(
            f"the opponents made {MAX_OPPONENT_MOVES} moves in a row without ending their turn"
        )

    def _current(self) -> int:
        return int(getattr(games.unwrap(self._game).state, "current_player_id", 0) or 0)

    def _drain(self, player: int) -> None:
        """Move what the game queued for `player` into that player's log (the player to move
        through the game's own `get_observation`, which some games extend)."""
        base = games.unwrap(self._game)
        if player == self._current():
            current, new = base.get_observation()
            self._take_messages(int(current if current is not None else player), new)
            return
        pending = getattr(base.state, "observations", None)
        if isinstance(pending, dict):
            self._take_messages(player, pending.get(player))
            pending[player] = []

    # -- observation ------------------------------------------------------------------
    def _rewards(self) -> list[float]:
        """Every seat's reward (0 until the game pays)."""
        rewards = getattr(games.unwrap(self._game).state, "rewards", None)
        paid = rewards if isinstance(rewards, dict) else {}
        if self._state.num_players == 1 and paid and 0 not in paid:
            return [float(next(iter(paid.values())))]
        return [float(paid.get(player, 0.0)) for player in range(self._state.num_players)]

    def _take_messages(self, player: int, entries: Any) -> None:
        log = self._logs.setdefault(player, [])
        for entry in entries or []:
            sender, content, category = games.normalize_message(entry)
            log.append(TextArenaMessage(sender_id=sender, content=content, category=category))

    def _finish(self, base: Any, viewer: int, reward: float, info: dict[str, Any]) -> None:
        """The end of a game: every seat's pending messages and the outcome reach its log."""
        for player in range(self._state.num_players):
            if player != viewer:
                self._drain(player)
        game_info = getattr(base.state, "game_info", {}) or {}
        for player in range(self._state.num_players):
            reason = (game_info.get(player) or {}).get("reason") or info.get("reason")
            if reason:
                self._logs[player].append(
                    TextArenaMessage(sender_id=GAME_SENDER, content=str(reason), category="GAME_ADMIN")
                )
        outcome = game_info.get(viewer) or {}
        if reason := outcome.get("reason") or info.get("reason"):
            info["reason"] = reason
        if outcome.get("invalid_move"):
            info["invalid_move"] = True
        info["won"] = reward >= 1.0
        if self._state.num_players > 1:
            info["rewards"] = self._rewards()

    def _observe(
        self, *, done: bool, viewer: int, scored: bool, info: dict[str, Any]
    ) -> TextArenaObservation:
        """What `viewer` sees now; `scored`: the reward is read (after a move), else 0."""
        base = games.unwrap(self._game)
        self._drain(viewer)
        reward = self._rewards()[viewer] if scored else 0.0
        if done:
            self._finish(base, viewer, reward, info)
        self._state.done = done
        self._state.won = done and reward >= 1.0
        self._state.last_reward = reward
        self._state.last_info = dict(info)
        self._state.current_player_id = self._current()
        self._state.raw_state = self._snapshot(base.state, done)
        log = self._logs[viewer]
        start, self._seen[viewer] = self._seen.get(viewer, 0), len(log)
        prompt = "\n".join(m.content for m in log if m.category == "PROMPT").strip()
        role_mapping = getattr(base.state, "role_mapping", {}) or {}
        return TextArenaObservation(
            prompt=prompt or self._state.env_id,
            messages=list(log),
            current_player_id=viewer,
            legal_players=sorted(p for p in role_mapping if isinstance(p, int) and p >= 0),
            info=info,
            seat=self._state.seat,
            done=done,
            reward=reward,
            metadata={
                "env_id": self._state.env_id,
                "turn": self._state.turn,
                "seed": self._state.seed,
                "new_messages_from": start,
                "num_players": self._state.num_players,
                **({"opponent_moves": self._moves_seen(log[start:], viewer)} if self._table else {}),
            },
        )

    @staticmethod
    def _moves_seen(new: list[Any], viewer: int) -> list[dict[str, Any]]:
        """The other seats' moves among what `viewer` was just shown (what the game told it, no
        more): a report can show the server-played opponent's moves as its own lines."""
        return [
            {"seat": m.sender_id, "move": m.content}
            for m in new
            if m.category == "PLAYER_ACTION" and m.sender_id >= 0 and m.sender_id != viewer
        ]

    @staticmethod
    def _snapshot(state: Any, done: bool) -> dict[str, Any]:
        """The game's state for `state()`; its ``game_state`` (Wordle's secret word) only once
        the game is over, so an agent reading its state mid-game learns nothing it should not."""
        snap: dict[str, Any] = {
            "turn": getattr(state, "turn", 0),
            "done": bool(getattr(state, "done", False)),
            "rewards": getattr(state, "rewards", None),
            "game_info": getattr(state, "game_info", {}),
        }
        if done:
            snap["game_state"] = _plain(getattr(state, "game_state", {}))
        return _plain(snap)

    async def step_async(self, action: TextArenaAction) -> TextArenaObservation:
        """A move runs on the event loop: textarena's single-player steps cost less than a hop
        to a worker thread does. Resets, which may
        build a game (seconds for the word games' dictionaries), stay in a thread."""
        if self._table is not None and self._table.model is not None:  # a model's turn takes seconds
            return await super().step_async(action)  # on the session's thread, as its resets
        return self.step(action)

    @property
    def state(self) -> TextArenaState:
        return self._state

    def close(self) -> None:
        self._game = None

    def metadata(self) -> EnvironmentMetadata:
        return EnvironmentMetadata(
            name="textarena",
            description=f"TextArena's single-player games (this server's default: {self.config.env_id}).",
            documentation_url="https://github.com/LeonGuertler/TextArena",
        )


def _plain(value: Any, depth: int = 0) -> Any:
    """JSON-safe copy of textarena's state (tuples, enums, numpy values, objects -> text)."""
    if depth > 8:
        return repr(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, dict):
        return {str(k): _plain(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [_plain(v, depth + 1) for v in value]
    item = getattr(value, "item", None)
    if callable(item):
        try:
            return _plain(item(), depth + 1)
        except (TypeError, ValueError):
            pass
    tolist = getattr(value, "tolist", None)
    if callable(tolist):
        return _plain(tolist(), depth + 1)
    return repr(value)
