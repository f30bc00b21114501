"""TextArena as a harness session: one tool, `send(message)`, whose argument is the move.

Every game takes its moves as text in its own syntax (Wordle ``[crane]``, Mastermind
``[1 2 3 4]``, TowerOfHanoi ``[A C]``), so one tool serves all 200-odd single-player games
and the game's prompt says what to send. A bare Wordle word (``crane``) gets its brackets
from textarena's own action wrapper. The opening message is the game's prompt (and board);
each tool result is what the game said after the move (feedback, board, an invalid move's
reason, the outcome); `verify` forwards the game's reward and reports ``won`` (reward >= 1).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from envharness.envs.textarena.environment import MAX_MESSAGE_CHARS
from envharness.harness.session import ClientSessionFactory
from envharness.harness.step_session import StepEnvSessionAdapter, to_plain
from envharness.harness.tools import tool_spec
from envharness.harness.types import Message, ToolResult, VerifyResult

SEND_TOOL = tool_spec(
    "send",
    "Send your move to the game, in the game's own format (Wordle: '[crane]').",
    {"message": {"type": "string", "description": "the move, e.g. '[crane]'"}},
    ["message"],
)
TOOL_NAMES = ("send",)
_GAME_ID = re.compile(r"^[A-Za-z0-9]+-v\d+[\w-]*$")

REPLY_HINT = (
    "Reply with your move in the game's format, e.g. [crane] for Wordle; "
    "you may think first, the last bracketed move in your reply is played."
)


def _field(value: Any, name: str, default: Any = None) -> Any:
    if isinstance(value, dict):
        return value.get(name, default)
    return getattr(value, name, default)


def _messages(observation: Any) -> list[Any]:
    return list(_field(observation, "messages") or [])


def feedback_messages(observation: Any) -> list[Any]:
    """What the game said since this player last looked: the messages from the server's
    ``new_messages_from`` mark on, less the raw moves (each move's description stays). In a
    game with other players, more happens after the player's move than the reply to it (a
    showdown, the next round's card, then the opponent's move): all of it is the player's.
    Without the mark, the messages after the last PLAYER_ACTION (all of them at reset)."""
    messages = _messages(observation)
    start = (_field(observation, "metadata") or {}).get("new_messages_from")
    if isinstance(start, int) and 0 <= start <= len(messages):
        return [m for m in messages[start:] if _field(m, "category") != "PLAYER_ACTION"]
    last = max((i for i, m in enumerate(messages) if _field(m, "category") == "PLAYER_ACTION"), default=-1)
    return messages[last + 1 :]


def opening_text(observation: Any) -> str:
    """The game's prompt and anything it showed with it (a board), as the first user turn."""
    parts = [
        str(_field(m, "content", "")).strip()
        for m in _messages(observation)
        if _field(m, "category") != "PLAYER_ACTION"
    ]
    return "\n\n".join(p for p in parts if p) or str(_field(observation, "prompt", "") or "")


def feedback_text(observation: Any) -> str:
    """The game's answer to the latest move, as the tool result the model reads."""
    parts = [str(_field(m, "content", "")).strip() for m in feedback_messages(observation)]
    text = "\n\n".join(p for p in parts if p)
    return text or "(the game said nothing)"


def replay_view(observation: Any) -> dict[str, Any]:
    """What the same game, seed and moves must show again: the game's prompt and messages."""
    return {
        "prompt": _field(observation, "prompt", ""),
        "messages": [to_plain(m) for m in _messages(observation)],
    }


def resolve_task(task: Any, default_task: str | None) -> str | None:
    """The game of an episode: a game id (``'Wordle-v0'``), a dict with ``task``/``env_id``, or
    anything else (a chat prompt from a dataset) -> `default_task`."""
    if isinstance(task, dict):
        task = task.get("task") or task.get("env_id") or task.get("task_name")
    if isinstance(task, str) and _GAME_ID.match(task.strip()):
        return task.strip()
    return default_task


def move_of(arguments: dict[str, Any]) -> str:
    """The move text of a `send` call; ValueError (shown to the model) when it cannot be sent."""
    message = arguments.get("message")
    if not isinstance(message, str) or not message.strip():
        raise ValueError("send needs a non-empty message, e.g. send(message='[crane]')")
    if len(message) > MAX_MESSAGE_CHARS:
        raise ValueError(f"the move has {len(message)} characters; at most {MAX_MESSAGE_CHARS}")
    return message


class TextArenaSessionFactory(ClientSessionFactory[StepEnvSessionAdapter]):
    """Makes one TextArena session (and client) per episode.

    `prompt_builder(observation, task, tool_names) -> messages` replaces the opening (a prompt
    style's); `observation_text(observation) -> str` replaces the tool results' text."""

    def __init__(
        self,
        client_factory: Callable[[], Any],
        *,
        default_task: str | None = None,
        tools: Any = None,
        reset_kwargs: dict[str, Any] | None = None,
        prompt_builder: Callable[[Any, Any, list[str]], list[Message]] | None = None,
        observation_text: Callable[[Any], str] | None = None,
        **_ignored: Any,
    ):
        names = list(tools) if tools else list(TOOL_NAMES)
        unknown = [n for n in names if n not in TOOL_NAMES]
        if unknown:
            raise ValueError(f"unknown TextArena tool(s) {unknown}; the one tool is 'send'")
        super().__init__(client_factory)
        self.default_task = default_task
        self.tool_names = list(TOOL_NAMES)
        #: The tools every session offers (known without a session: TRL's environment_factory reads them).
        self.tool_specs = [SEND_TOOL]
        self._reset_kwargs = dict(reset_kwargs or {})
        self._prompt_builder = prompt_builder
        self._observation_text = observation_text

    def session_for(
        self, client: Any, task: Any, seed: int | None, episode_id: str | None
    ) -> StepEnvSessionAdapter:
        game = resolve_task(task, self.default_task)
        reset_kwargs = dict(self._reset_kwargs)
        if game is not None:
            reset_kwargs["task"] = game
        return StepEnvSessionAdapter(
            client,
            task=game,
            seed=seed,
            episode_id=episode_id,
            tool_specs=[SEND_TOOL],
            action_builder=_action,
            initial_messages_builder=self._initial_messages,
            tool_result_builder=self._tool_result,
            verify_builder=_verify,
            reset_kwargs=reset_kwargs,
            observation_view=replay_view,
        )

    def _initial_messages(self, result: Any, task: Any) -> list[Message]:
        players = _field(result.observation, "legal_players") or []
        if len(players) > 1 and _field(result.observation, "seat") is None:
            raise ValueError(
                f"{task or 'this game'} is a {len(players)}-player game and an agent plays one seat: "
                "give the others an opponent (--env-option opponent=random|scripted, "
                "or the server's --option opponent=...)"
            )
        if self._prompt_builder is not None:
            return list(self._prompt_builder(result.observation, task, list(self.tool_names)))
        return [{"role": "user", "content": opening_text(result.observation) + "\n\n" + REPLY_HINT}]

    def _tool_result(self, name: str, arguments: dict[str, Any], result: Any, state: Any) -> ToolResult:
        obs = result.observation
        text = self._observation_text(obs) if self._observation_text is not None else feedback_text(obs)
        info = dict(_field(obs, "info") or {})
        return ToolResult(
            data=text,
            done=bool(result.done),
            metadata={
                "move": arguments.get("message"),
                "reward": result.reward,
                "done": bool(result.done),
                "won": bool(info.get("won")),
                "info": info,
                "state": to_plain(state),
            },
        )


def _action(name: str, arguments: dict[str, Any]) -> Any:
    from envharness.envs.textarena.models import TextArenaAction

    return TextArenaAction(message=move_of(arguments))


def _verify(transcript: list[Message], final_state: Any, last_result: Any, state: Any) -> VerifyResult:
    """The game's reward; metrics: success and won (reward >= 1: a lost Wordle still pays the
    share of letters found, which is not a win), moves, the game and its seed."""
    reward = None if last_result is None else last_result.reward
    won = bool(reward is not None and reward >= 1.0)
    return VerifyResult(
        env_reward=reward,
        done=False if last_result is None else bool(last_result.done),
        metrics={
            "success": won,
            "won": won,
            "step_count": _field(state, "step_count") or 0,
            "task_name": _field(state, "env_id") or "",
            "seed": _field(state, "seed"),
            **_seat_metrics(state, last_result),
        },
        artifacts={"final_state": to_plain(state), "transcript_length": len(transcript)},
    )


def _seat_metrics(state: Any, last_result: Any) -> dict[str, Any]:
    """Against an opponent: the agent's seat, who played the others, the game's outcome for the
    agent (win / draw / loss by the sign of its reward; unfinished: the turns ran out or the
    game was cut short) and whether the agent's invalid move ended it (eval's games table,
    `eval/games.py`)."""
    seat = _field(state, "seat")
    if seat is None:
        return {}
    observation = getattr(last_result, "observation", None)
    info = _field(observation, "info") or {}
    done, reward = bool(last_result is not None and last_result.done), getattr(last_result, "reward", None)
    outcome = (
        "unfinished"
        if not done or reward is None or info.get("truncated")
        else "win"
        if reward > 0
        else "loss"
        if reward < 0
        else "draw"
    )
    return {
        "seat": seat,
        "opponent": _field(state, "opponent"),
        "outcome": outcome,
        "invalid_move": bool(info.get("invalid_move")),
    }


__all__ = ["SEND_TOOL", "TextArenaSessionFactory", "feedback_text", "move_of", "opening_text", "resolve_task"]
