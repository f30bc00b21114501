"""`TextArenaEnvironment`: one textarena game per session, behind OpenEnv's observation.

``reset(seed=7, task="Mastermind-v0", code_length=5)`` picks the game and its keyword
arguments per episode (both default to the server's); the same seed replays the same game,
moves included (`games.SessionRandom`). Every reset without a seed draws one and reports it
in ``state.seed``. Moves go through textarena's own wrappers (its ``ActionFormattingWrapper``
adds the square brackets a bare ``crane`` lacks); observations are built from the game's typed
messages, so ``messages`` keeps each message's sender and category, and the outcome (which
textarena keeps in ``game_info``) is added as a last GAME_ADMIN message and ``info["reason"]``.

The reward is the game's reward for the player (0 until the game ends; Wordle pays the share
of letters found when guesses run out); ``info["won"]`` is reward >= 1. A move after the end,
an empty move and a move over `MAX_MESSAGE_CHARS` raise ValueError: the server answers with the
message and the session stays usable.
"""

from __future__ import annotations

import secrets
import uuid
from dataclasses import dataclass, field
from typing import Any

from envharness.core.environment import Environment
from envharness.core.types import EnvironmentMetadata
from envharness.envs.textarena import games
from envharness.envs.textarena.models import (
    GAME_SENDER,
    TextArenaAction,
    TextArenaMessage,
    TextArenaObservation,
    TextArenaState,
)

#: Longer moves are refused before they reach the game (no textarena move is near this).
MAX_MESSAGE_CHARS = 4096


@dataclass
class TextArenaConfig:
    """A session's defaults; `reset` options override `env_id` and `game_kwargs` per episode."""

    env_id: str = "Wordle-v0"
    num_players: int = 1
    max_turns: int | None = None
    game_kwargs: dict[str, Any] = field(default_factory=dict)


class TextArenaEnvironment(Environment[TextArenaAction, TextArenaObservation]):
    """A single-player textarena game; sync (the server runs it in a worker thread)."""

    action_type = TextArenaAction
    observation_type = TextArenaObservation
    state_type = TextArenaState
    supports_concurrent_sessions = True

    def __init__(self, config: TextArenaConfig | None = None) -> None:
        self.config = config or TextArenaConfig()
        self._game: Any = None
        self._rng = games.SessionRandom()
        self._messages: list[TextArenaMessage] = []
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
        **game_kwargs: Any,
    ) -> TextArenaObservation:
        """`task` (or `env_id`): the game of this episode; other options: its keyword arguments."""
        chosen = games.check_env_id(task or env_id or self.config.env_id)
        if chosen == self.config.env_id and not game_kwargs:
            game_kwargs = dict(self.config.game_kwargs)
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool) or seed < 0):
            raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
        seed = secrets.randbits(31) if seed is None else seed
        game = games.make_game(chosen, game_kwargs)
        try:
            self._rng.run(seed, lambda: game.reset(num_players=self.config.num_players, seed=seed))
        except Exception as exc:
            raise ValueError(
                f"{chosen} could not start with {game_kwargs or 'its defaults'}: {type(exc).__name__}: {exc}"
            ) from exc
        self._game = game
        self._messages = []
        self._state = TextArenaState(
            episode_id=episode_id or str(uuid.uuid4()),
            step_count=0,
            env_id=chosen,
            num_players=self.config.num_players,
            max_turns=self.config.max_turns,
            seed=seed,
            game_kwargs=dict(game_kwargs),
        )
        return self._observe(done=False, reward=0.0, info={})

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
        done, info = self._rng.run(None, lambda: self._game.step(message))
        self._state.step_count += 1
        base = games.unwrap(self._game).state
        games.repair_swapped_invalid_move(base)
        self._state.turn = int(getattr(base, "turn", self._state.turn + 1))
        info = dict(info or {})
        if not done and self.config.max_turns is not None and self._state.step_count >= self.config.max_turns:
            done = True
            info["truncated"] = True
            info.setdefault("reason", f"TEXTARENA_MAX_TURNS={self.config.max_turns} moves reached")
        return self._observe(done=bool(done), reward=self._reward(), info=info)

    # -- observation ------------------------------------------------------------------
    def _reward(self) -> float:
        rewards = getattr(games.unwrap(self._game).state, "rewards", None)
        if isinstance(rewards, dict) and rewards:
            return float(rewards.get(0, next(iter(rewards.values()))))
        return 0.0

    def _observe(self, *, done: bool, reward: float, info: dict[str, Any]) -> TextArenaObservation:
        base = games.unwrap(self._game)
        player_id, new = base.get_observation()
        start = len(self._messages)
        for entry in new or []:
            sender, content, category = games.normalize_message(entry)
            self._messages.append(TextArenaMessage(sender_id=sender, content=content, category=category))
        if done:
            outcome = (getattr(base.state, "game_info", {}) or {}).get(0, {})
            reason = outcome.get("reason") or info.get("reason")
            if reason:
                info["reason"] = reason
                self._messages.append(
                    TextArenaMessage(sender_id=GAME_SENDER, content=str(reason), category="GAME_ADMIN")
                )
            if outcome.get("invalid_move"):
                info["invalid_move"] = True
            info["won"] = reward >= 1.0
        self._state.done = done
        self._state.won = done and reward >= 1.0
        self._state.last_reward = reward
        self._state.last_info = dict(info)
        self._state.raw_state = self._snapshot(base.state, done)
        prompt = "\n".join(m.content for m in self._messages if m.category == "PROMPT").strip()
        role_mapping = getattr(base.state, "role_mapping", {}) or {}
        return TextArenaObservation(
            prompt=prompt or self._state.env_id,
            messages=list(self._messages),
            current_player_id=int(player_id if player_id is not None else 0),
            legal_players=sorted(p for p in role_mapping if isinstance(p, int) and p >= 0),
            info=info,
            done=done,
            reward=reward,
            metadata={
                "env_id": self._state.env_id,
                "turn": self._state.turn,
                "seed": self._state.seed,
                "new_messages_from": start,
            },
        )

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
