"""TextArena's MCP tools: `reset` (game, seed, game arguments), `send` (the move) and `observation`.

Every result carries the game's text for the model (at reset its prompt and board; after a
move what the game said), and the same facts structured for programs: reward, done, won,
turn, the game id and its seed (which replays the game). An invalid move is not an MCP
error: the game's own message says why, as it does in the game. Calls outside the schema,
before `reset` or after the game ended are errors the caller can read.
"""

from __future__ import annotations

from typing import Any

from mcp import types

from envharness.envs.textarena.sessions import feedback_text, move_of, opening_text
from envharness.mcp.handle import EnvSessionHandle
from envharness.mcp.toolset import EnvToolset

RESET_TOOL = types.Tool(
    name="reset",
    description=(
        "Start a new TextArena game and return its prompt. `task` is a game id: single-player "
        "(Wordle-v0, Mastermind-v0, GuessTheNumber-v0, TowerOfHanoi-v0, Hangman-v0, ...; default: the "
        "server's game) or two-player (KuhnPoker-v0, TicTacToe-v0, Nim-v0, ConnectFour-v0, ...) with "
        "`opponent` for the other seat (random: a legal move; scripted: a strong player) and `seat` "
        "(0, 1, alternate or random); `seed` replays the same game, opponent moves included; "
        '`game_kwargs` are the game\'s arguments (e.g. {"word_length": 6} for Wordle).'
    ),
    inputSchema={
        "type": "object",
        "properties": {
            "task": {"type": "string", "description": "game id, e.g. 'Wordle-v0'"},
            "seed": {"type": "integer", "minimum": 0, "description": "same seed, same game"},
            "game_kwargs": {"type": "object", "description": "the game's keyword arguments"},
            "opponent": {
                "type": "string",
                "enum": ["random", "scripted", "model"],
                "description": "who plays the other seats",
            },
            "seat": {"type": "string", "description": "your seat: 0, 1, alternate (by seed) or random"},
        },
        "additionalProperties": False,
    },
)
SEND_TOOL = types.Tool(
    name="send",
    description="Play one move, in the game's own format (Wordle: '[crane]'); returns what the game said.",
    inputSchema={
        "type": "object",
        "properties": {"message": {"type": "string", "minLength": 1, "maxLength": 4096}},
        "required": ["message"],
        "additionalProperties": False,
    },
)
OBSERVATION_TOOL = types.Tool(
    name="observation",
    description="The whole game so far (prompt, every message), reward and done, without moving.",
    inputSchema={"type": "object", "properties": {}, "additionalProperties": False},
)


class TextArenaToolset(EnvToolset):
    """reset, send, observation."""

    def __init__(self, description: Any = None) -> None:
        self._tools = [RESET_TOOL, SEND_TOOL, OBSERVATION_TOOL]

    def tools(self) -> list[types.Tool]:
        return self._tools

    async def call(
        self, handle: EnvSessionHandle, name: str, arguments: dict[str, Any]
    ) -> types.CallToolResult:
        if name == "reset":
            options: dict[str, Any] = dict(arguments.get("game_kwargs") or {})
            options.update({k: arguments[k] for k in ("task", "seed", "opponent", "seat") if k in arguments})
            observation = await handle.reset(options)
            return await _result(handle, observation, opening_text(observation))
        if handle.last is None:
            raise ValueError("no game yet: call reset first")
        if name == "observation":
            whole = "\n\n".join(m.content for m in handle.last.messages) or handle.last.prompt
            return await _result(handle, handle.last, whole)
        observation = await handle.step({"message": move_of(arguments)})
        return await _result(handle, observation, feedback_text(observation))


async def _result(handle: EnvSessionHandle, obs: Any, text: str) -> types.CallToolResult:
    state = await handle.state()
    info = dict(getattr(obs, "info", {}) or {})
    structured = {
        "env_id": getattr(state, "env_id", None),
        "seed": getattr(state, "seed", None),
        "turn": getattr(state, "turn", 0),
        "step": state.step_count,
        "reward": obs.reward,
        "done": bool(obs.done),
        "won": bool(info.get("won")),
        "info": info,
        "prompt": getattr(obs, "prompt", ""),
    }
    footer = f"\n\nReward: {obs.reward}  Done: {bool(obs.done)}  Step: {state.step_count}"
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text + footer)], structuredContent=structured
    )
