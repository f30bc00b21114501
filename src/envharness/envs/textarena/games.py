"""Which TextArena games run here, how one is made per session, and how its randomness is kept apart.

- The catalog: every id textarena 0.7.4 registers for a single-player game (its registry
  says so by its state, ``SinglePlayerState``: 30 games, 219 ids with their ``-raw``/``-train``
  variants), and the multi-player games that run offline (`PLAYER_COUNTS`: 56 games, each
  with the numbers of players it takes). The two single-player games whose game master is an
  LLM behind OpenRouter (GuessWho, TwentyQuestions) need ``OPENROUTER_API_KEY`` and a
  network; the multi-player games that cannot run here are in `MULTI_PLAYER_LEFT_OUT`, each
  with the reason.
- Making a game: ``ta.make`` costs seconds for the word games (Wordle loads two Hunspell
  dictionaries and POS-tags its word list), so each (game id, kwargs) is made once per process
  and every session gets a deep copy that shares the big read-only tables.
- Randomness: textarena's draws from the process-global ``random`` module and from numpy's
  global generator go to the calling session's own generators (`randomness.py`), so
  concurrent sessions neither see nor disturb each other, and the same seed replays the same
  game, moves included. No lock is held, except between two sessions of a game whose code
  keeps its work in module globals (`SHARED_STATE_GAMES`: Sokoban's level generation); other
  games never wait for them.
"""

from __future__ import annotations

import contextlib
import copy
import os
import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from typing import Any

from envharness.core.environment import InvalidOptions
from envharness.envs.textarena.nltk_data import guard_downloads
from envharness.envs.textarena.randomness import route_captured, route_randomness

#: The single-player games of textarena 0.7.4 (class names of their entry points).
SINGLE_PLAYER_GAMES = (
    "Bandit",
    "Blackjack",
    "Countdown",
    "Crosswords",
    "Cryptarithm",
    "FifteenPuzzle",
    "FrozenLake",
    "Game2048",
    "GuessTheNumber",
    "GuessWho",
    "Hangman",
    "Klondike",
    "LightsOut",
    "LogicPuzzle",
    "Mastermind",
    "Minesweeper",
    "PegJump",
    "RushHour",
    "Secretary",
    "Set",
    "Slitherlink",
    "Sokoban",
    "Sudoku",
    "ThreeCardMonte",
    "TowerOfHanoi",
    "TwentyQuestions",
    "UltimateTexasHoldem",
    "WordLadder",
    "WordSearch",
    "Wordle",
)
#: Games whose game master is an LLM reached through OpenRouter.
NEEDS_OPENROUTER = ("GuessWho", "TwentyQuestions")
#: The multi-player games that run offline: (fewest, most) players. The ranges are textarena's
#: registry comments, checked by resetting each game with every count from 2 to 6.
PLAYER_COUNTS: dict[str, tuple[int, int]] = {
    **dict.fromkeys(
        [
            "Alquerque",
            "Battleship",
            "Breakthrough",
            "Chopsticks",
            "ColonelBlotto",
            "ConnectFour",
            "Crusade",
            "DontSayIt",
            "GameOfPureStrategy",
            "GermanWhist",
            "HighSociety",
            "IndianPoker",
            "IteratedMatchingPennies",
            "IteratedPrisonersDilemma",
            "IteratedRockPaperScissors",
            "IteratedTwoThirdsAverage",
            "IteratedUltimatumGame",
            "KuhnPoker",
            "LetterAuction",
            "LinesOfAction",
            "MemoryGame",
            "NewRecruit",
            "Nim",
            "Othello",
            "PigDice",
            "QuantumTicTacToe",
            "SimpleBlindAuction",
            "SimpleNegotiation",
            "SimpleTak",
            "SpellingBee",
            "SpiteAndMalice",
            "Stratego",
            "Tak",
            "TicTacToe",
            "TruthAndDeception",
            "TwoDollar",
            "UltimateTicTacToe",
            "WildTicTacToe",
            "WordChains",
        ],
        (2, 2),
    ),
    "Briscola": (2, 4),
    "Golf": (2, 4),
    "Santorini": (2, 3),
    "LiarsDice": (2, 15),
    "MarketEntryGame": (2, 15),
    "Poker": (2, 15),
    "PublicGoodsGame": (2, 15),
    "Snake": (2, 15),
    "Surround": (2, 15),
    "CharacterConclave": (3, 15),
    "ThreePlayerGOPS": (3, 3),
    "ThreePlayerIPD": (3, 3),
    "ThreePlayerTicTacToe": (3, 3),
    "Codenames": (4, 4),
    "SettlersOfCatan": (4, 4),
    "Taboo": (4, 6),
    "SecretMafia": (6, 15),
}
#: Games played by an even number of players only (two teams of equal size).
EVEN_PLAYERS = frozenset({"Taboo"})
#: The multi-player games of textarena 0.7.4 that cannot run here, and why.
MULTI_PLAYER_LEFT_OUT = {
    "Debate": "its judges are LLMs reached through OpenRouter (OPENROUTER_API_KEY and a network)",
    "ScenarioPlanning": "its judge is an LLM reached through OpenRouter (OPENROUTER_API_KEY and a network)",
    "BabyAiText": "it needs the `gym` package, which textarena does not install",
    "ScorableGames": "its game configuration files are missing from textarena 0.7.4's wheel",
    "UsedCarNegotiation": "its data files are missing from textarena 0.7.4's wheel",
    "UsedCar": "its module is missing from textarena 0.7.4's wheel",
    **{
        name: "its module has a syntax error in textarena 0.7.4 (an f-string Python 3.11 rejects)"
        for name in ("Checkers", "Chess", "IteratedStagHunt", "ReverseTicTacToe")
    },
}
#: Objects this large (or dictionaries) are shared between sessions instead of copied.
_SHARE_AT = 256


class GameRefused(InvalidOptions):
    """A game id this server will not run (unknown, multi-player, or needing a network)."""


def textarena() -> Any:
    """The textarena module, imported with `nltk.download` made offline-only."""
    guard_downloads()
    import textarena as ta

    return ta


def _registry() -> Mapping[str, Any]:
    from textarena.envs.registration import ENV_REGISTRY

    textarena()
    return ENV_REGISTRY


def game_of(env_id: str) -> str | None:
    """The game family of a registered id (``Wordle`` for ``Wordle-v0-long``), None if unknown."""
    spec = _registry().get(env_id)
    if spec is None:
        return None
    entry = (
        spec.entry_point
        if isinstance(spec.entry_point, str)
        else f"{spec.entry_point.__module__}:{spec.entry_point.__name__}"
    )
    module = entry.split(":")[0]
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[:2] == ["textarena", "envs"] else None


def single_player_ids() -> list[str]:
    """Every registered id of a single-player game, in textarena's registry order."""
    return [env_id for env_id in _registry() if game_of(env_id) in SINGLE_PLAYER_GAMES]


def offline_ids() -> list[str]:
    """The single-player ids that run without a network (all but the LLM-mastered ones)."""
    return [env_id for env_id in single_player_ids() if game_of(env_id) not in (*NEEDS_OPENROUTER, *BROKEN)]


def multi_player_ids() -> list[str]:
    """Every registered id of a multi-player game that runs offline, in registry order."""
    return [env_id for env_id in _registry() if game_of(env_id) in PLAYER_COUNTS]


def player_counts(env_id: str) -> tuple[int, int]:
    """(fewest, most) players of a game id; (1, 1) for a single-player game."""
    return PLAYER_COUNTS.get(game_of(env_id) or "", (1, 1))


def takes_players(env_id: str, num_players: int) -> bool:
    """Whether `env_id` can be played by `num_players`."""
    low, high = player_counts(env_id)
    return low <= num_players <= high and (num_players % 2 == 0 or game_of(env_id) not in EVEN_PLAYERS)


def check_players(env_id: str, num_players: int) -> int:
    """`num_players` when `env_id` takes that many players; `GameRefused` naming the counts."""
    if not takes_players(env_id, num_players):
        low, high = player_counts(env_id)
        wanted = str(low) if low == high else f"{low} to {high}"
        if game_of(env_id) in EVEN_PLAYERS:
            wanted = f"an even number of players, {wanted}"
        else:
            wanted += " player" if high == 1 else " players"
        raise GameRefused(f"{env_id} is played by {wanted}, not {num_players} (option num_players)")
    return num_players


def check_env_id(env_id: str) -> str:
    """`env_id` when this server runs it; `GameRefused` saying why not otherwise."""
    env_id = (env_id or "").strip()
    game = game_of(env_id)
    if game is None:
        known = single_player_ids() + multi_player_ids()
        close = sorted(i for i in known if i.lower().startswith(env_id.lower()[:4]))[:8]
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise GameRefused(
            f"unknown TextArena game {env_id!r}{hint} (Wordle-v0, Mastermind-v0, KuhnPoker-v0, "
            "TicTacToe-v0, ...; the server's task list has them all)"
        )
    if game in MULTI_PLAYER_LEFT_OUT:
        raise GameRefused(f"{env_id} cannot run here: {MULTI_PLAYER_LEFT_OUT[game]}")
    if game not in SINGLE_PLAYER_GAMES and game not in PLAYER_COUNTS:
        raise GameRefused(f"{env_id} is not a game this server knows how to run")
    if game in BROKEN:
        raise GameRefused(f"{env_id} cannot run: {BROKEN[game]}")
    if game in NEEDS_OPENROUTER and not os.environ.get("OPENROUTER_API_KEY"):
        raise GameRefused(
            f"{env_id}'s game master is an LLM reached through OpenRouter: it needs "
            "OPENROUTER_API_KEY and a network, and cannot run offline"
        )
    return env_id


# -- making games: one prototype per (game class, kwargs), a copy per session ---------------
#: The prototypes kept, least recently used out first: each set of options a client sends makes
#: one (Wordle's holds its dictionaries), so an unbounded store grew with every new set.
MAX_PROTOTYPES = 32
_PROTOTYPES: OrderedDict[tuple[str, str], Any] = OrderedDict()
_PROTOTYPES_LOCK = threading.Lock()  # the store's order and size (held for microseconds)
_MAKE_LOCK = threading.Lock()  # one game built at a time (the patches of textarena's modules)
#: Ids whose module textarena 0.7.4 cannot import (a syntax error in the released file).
BROKEN = {
    "Klondike": "its module has a syntax error in textarena 0.7.4 (envs/Klondike/env.py line 119)",
    "UltimateTexasHoldem": "its module has a syntax error in textarena 0.7.4 (envs/UltimateTexasHoldem/env.py line 228)",
}


def _shared(obj: Any, memo: dict[int, Any], depth: int = 0) -> None:
    """Mark the big read-only tables inside a game (word lists, dictionaries) as shared."""
    for value in list(getattr(obj, "__dict__", {}).values()):
        if isinstance(value, (list, set, frozenset, dict, tuple)) and len(value) >= _SHARE_AT:
            memo[id(value)] = value
        elif hasattr(value, "__dict__") and not isinstance(value, type):
            if type(value).__module__.startswith("textarena.envs.utils"):
                memo[id(value)] = value
            elif depth < 2:
                _shared(value, memo, depth + 1)


def _entry_class(entry_point: Any) -> Any:
    if not isinstance(entry_point, str):
        return entry_point
    module_name, _, name = entry_point.partition(":")
    import importlib

    return getattr(importlib.import_module(module_name), name)


def _kept(key: tuple[str, str]) -> Any:
    with _PROTOTYPES_LOCK:
        proto = _PROTOTYPES.get(key)
        if proto is not None:
            _PROTOTYPES.move_to_end(key)
        return proto


def _keep(key: tuple[str, str], proto: Any) -> None:
    with _PROTOTYPES_LOCK:
        _PROTOTYPES[key] = proto
        while len(_PROTOTYPES) > MAX_PROTOTYPES:
            _PROTOTYPES.popitem(last=False)


def make_game(env_id: str, kwargs: Mapping[str, Any]) -> Any:
    """A fresh game for one session, as ``ta.make(env_id, **kwargs)`` makes it (the game class
    with the id's kwargs, wrapped in the id's wrappers), but the game's constructor runs once
    per process for each class and kwargs: sessions get deep copies sharing the big tables.
    Bad kwargs raise ValueError naming the game and the argument."""
    spec = _registry()[env_id]
    family = game_of(env_id)
    if family in BROKEN:
        raise GameRefused(f"{env_id} cannot run: {BROKEN[family]}")
    merged = {**spec.kwargs, **dict(kwargs)}
    key = (str(spec.entry_point), repr(sorted(merged.items())))
    proto = _kept(key)
    if proto is None:
        with _MAKE_LOCK:
            proto = _kept(key)
            if proto is None:
                cls = _entry_class(spec.entry_point)
                try:
                    proto = cls(**merged)
                except TypeError as exc:
                    raise InvalidOptions(f"{env_id} does not take these arguments: {exc}") from None
                route_randomness()
                route_captured(unwrap(proto))
                _keep(key, proto)
    memo: dict[int, Any] = {}
    _shared(proto, memo)
    game = copy.deepcopy(proto, memo)
    game.env_id = env_id
    for wrapper in spec.default_wrappers or []:
        game = wrapper(game)
    return game


def normalize_message(entry: Any) -> tuple[int, str, str]:
    """(sender id, text, category) of one textarena message. Some games pass
    ``add_observation`` its arguments in the wrong order (Countdown, Cryptarithm, Slitherlink:
    ``(ObservationType, player id, text)``), so each part is found by its type."""
    items = list(entry) if isinstance(entry, (tuple, list)) else [-1, entry]
    kind = next((x for x in items if type(x).__name__ == "ObservationType"), None)
    rest = [x for x in items if x is not kind]
    sender = next((x for x in rest if isinstance(x, int) and not isinstance(x, bool)), -1)
    text = next((x for x in rest if isinstance(x, str)), None)
    if text is None:
        text = str(next((x for x in rest if x is not sender), ""))
    category = getattr(kind, "name", None) or "GAME_MESSAGE"
    return int(sender), text, category


def unwrap(game: Any) -> Any:
    """The game under textarena's wrappers."""
    while "env" in getattr(game, "__dict__", {}):
        game = game.env
    return game


#: Games whose textarena code keeps its work in module globals, so two sessions of the same
#: game must not run at once (other games are never held up by them).
SHARED_STATE_GAMES = {
    "Sokoban": "level generation (reverse_playing) searches in module-level globals",
}
_FAMILY_LOCKS = {family: threading.Lock() for family in SHARED_STATE_GAMES}


def one_at_a_time(env_id: str) -> contextlib.AbstractContextManager[Any]:
    """Held around a session's reset and step: the game's lock when its code shares module
    state between sessions (`SHARED_STATE_GAMES`), otherwise nothing."""
    lock = _FAMILY_LOCKS.get(game_of(env_id) or "")
    return lock if lock is not None else contextlib.nullcontext()


def iter_games(ids: list[str]) -> Iterator[tuple[str, str]]:
    """(id, family) pairs, for listings."""
    for env_id in ids:
        yield env_id, game_of(env_id) or "?"


def repair_swapped_invalid_move(state: Any) -> None:
    """Undo textarena 0.7.4's swapped `set_invalid_move(reward, reason)` (Countdown, Cryptarithm,
    Slitherlink, ThreeCardMonte; the signature is `(reason, reward)`): the move's reason sits where
    the reward goes and the reward in the reason. Put back, the game ends as the loss it meant
    instead of a reward that is text."""
    rewards = getattr(state, "rewards", None)
    if not isinstance(rewards, dict):
        return
    for player, value in list(rewards.items()):
        if not isinstance(value, str):
            continue
        outcome = (getattr(state, "game_info", None) or {}).setdefault(player, {})
        meant = str(outcome.get("reason", "")).removeprefix("Invalid Move: ").strip()
        try:
            rewards[player] = float(meant)
        except ValueError:
            rewards[player] = -1.0  # textarena's own default for an invalid move
        outcome["reason"] = f"Invalid Move: {value}"
