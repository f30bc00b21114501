"""How agents play TextArena: the `EnvHarness` that eval, train, the scripted policy, MCP and
`/web` find through the `textarena` `EnvSpec` (core/registry.py).

Tasks are game ids. ``all`` is every single-player id that runs offline (204 of textarena
0.7.4's 219: the LLM-mastered GuessWho/TwentyQuestions and the unimportable Klondike and
UltimateTexasHoldem are left out); ``rl`` is the four chosen for RL (short episodes, dense
feedback, a scripted solver each): Wordle-v0, Mastermind-v0, GuessTheNumber-v0, TowerOfHanoi-v0.
"""

from __future__ import annotations

from typing import Any

from envharness._deprecated import deprecated_names
from envharness.envs.textarena import games
from envharness.envs.textarena.client_seats import model_seated_client
from envharness.envs.textarena.parsing import parse_move
from envharness.envs.textarena.scripted import scripted_move
from envharness.envs.textarena.seat_views import seat_game
from envharness.envs.textarena.sessions import TextArenaSessionFactory, feedback_text
from envharness.harness.env_harness import EnvHarness, TaskList

RL_GAMES = ("Wordle-v0", "Mastermind-v0", "GuessTheNumber-v0", "TowerOfHanoi-v0")
EXAMPLE_MOVES = {
    "Wordle-v0": "[crane]",
    "Mastermind-v0": "[1 2 3 4]",
    "GuessTheNumber-v0": "[10]",
    "TowerOfHanoi-v0": "[A C]",
    "Hangman-v0": "[e]",
    "Sudoku-v0": "[1 1 5]",
    "FrozenLake-v0": "[right]",
}


def task_list() -> TaskList:
    """Every offline single-player game id; splits: ``rl``, ``default`` (Wordle-v0), and one per
    game family's plain ``-v0`` ids (``wordle``: Wordle-v0, Wordle-v0-long, ...)."""
    ids = tuple(games.offline_ids())
    families: dict[str, list[str]] = {}
    for env_id in ids:
        if not env_id.endswith("-raw") and "-train" not in env_id:
            families.setdefault((games.game_of(env_id) or "").lower(), []).append(env_id)
    splits = {"rl": RL_GAMES, "default": ("Wordle-v0",), **{k: tuple(v) for k, v in families.items() if k}}
    return TaskList(tasks=ids, splits=splits)


def game_catalog() -> TaskList:
    """Every game this server plays: `task_list` plus every offline multi-player game id, in splits
    ``multiplayer`` and ``players-N`` (the ids playable by N players, N up to 6)."""
    single = task_list()
    multi = tuple(games.multi_player_ids())
    by_count: dict[str, list[str]] = {}
    for env_id in multi:
        low, high = games.player_counts(env_id)
        for count in range(low, min(high, 6) + 1):
            if games.takes_players(env_id, count):
                by_count.setdefault(f"players-{count}", []).append(env_id)
    splits = {**single.splits, "multiplayer": multi, **{k: tuple(v) for k, v in sorted(by_count.items())}}
    return TaskList(tasks=single.tasks + multi, splits=splits)


def check_task(name: str) -> str:
    """A game id this server runs, or ValueError saying why not. A multi-player game needs the
    server's ``opponent`` option for the seats the agent does not play (the session says so)."""
    return games.check_env_id(name)


def describe_observation(observation: Any) -> tuple[str, str]:
    """(game prompt, the game's latest feedback) for eval's records."""
    prompt = (
        observation.get("prompt", "") if isinstance(observation, dict) else getattr(observation, "prompt", "")
    )
    return prompt or "", feedback_text(observation)


def seating_options(opponent: str, seat: str) -> dict[str, Any]:
    """The server options (`seats.py`) that seat `opponent` in every seat but `seat`."""
    return {"opponent": opponent, "seat": seat}


def web_info() -> dict[str, Any]:
    """What `/web` shows for TextArena: a game picker and example moves."""
    return {
        "tasks": list(games.offline_ids()),
        "default_task": "Wordle-v0",
        "actions": [
            {
                "name": "send",
                "signature": "send(message)",
                "description": f"a move for {game}",
                "example": move,
            }
            for game, move in EXAMPLE_MOVES.items()
        ],
        "action_field": "message",
        "goal_field": "prompt",
        "text_field": "messages",
        "bids": False,
        "screenshots": False,
        "action_note": "Type the move in the game's own format, e.g. [crane] for Wordle; the prompt says which. "
        "A two-player game without an opponent: you play every seat in turn (the prompt says whose turn).",
        "reset_options": [
            {
                "name": "opponent",
                "choices": ["", "random", "scripted", "model"],
                "hint": "who plays the other seats (model: the server's --option opponent_model)",
            },
            {"name": "seat", "choices": ["", "0", "1", "alternate", "random"], "hint": "your seat"},
        ],
    }


HARNESS = EnvHarness(
    env="textarena",
    session_factory=TextArenaSessionFactory,
    tool_call_parser=parse_move,
    task_list=task_list,
    check_task=check_task,
    default_tasks=("Wordle-v0",),
    prompt_styles="envharness.envs.textarena.prompts:STYLES",
    default_prompt="default",
    train_prompt="default",
    default_tools=("send",),
    scripted_policy=scripted_move,
    reward_functions="envharness.envs.textarena.rewards:REWARD_FUNCTIONS",
    describe_observation=describe_observation,
    reward_range=(-1.0, 1.0),  # a lost game pays -1; success is the game's win verdict
    served_tasks=game_catalog,
    players=games.player_counts,
    server_opponents=("random", "scripted"),
    opponent_options=seating_options,
    seat_client=model_seated_client,
    seat_views=seat_game,
)


# Names that moved to `sessions.py`, where code written before it (the seed tutorial:
# `from envharness.envs.textarena.harness import ...`) imports them: they warn (`_deprecated.py`).
__getattr__ = deprecated_names(__name__)
