"""Scripted players for the multi-player games: what ``--opponent random|scripted`` plays.

Each policy reads only what its seat sees (the observation the server sends to the player to
move: its own prompt and messages) and returns the move as text, so it can sit behind any
client. `random_move` plays a legal move drawn uniformly; `scripted_move` plays a strong one:
an equilibrium strategy for Kuhn Poker (von Neumann's, with bluffing rate 1/3), minimax for
Tic-Tac-Toe, the nim-sum for Nim, and win-or-block for Connect Four. Both take a
`random.Random`, so a seeded game against them replays exactly.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Sequence
from functools import cache
from typing import Any

from envharness.envs.textarena import games

Policy = Callable[[str, Any, random.Random], str]
_BRACKETED = re.compile(r"'(\[[^\]]+\])'")
_TTT_LINES = ((0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6))


class NoScriptedMove(ValueError):
    """The game has no scripted player of the kind asked for."""


def _messages(observation: Any) -> list[tuple[str, str]]:
    items = observation.get("messages", []) if isinstance(observation, dict) else observation.messages
    out = []
    for m in items:
        get = m.get if isinstance(m, dict) else lambda k, m=m: getattr(m, k)
        out.append((str(get("category")), str(get("content"))))
    return out


def _last(observation: Any, needle: str) -> str:
    """The newest message that contains `needle` ('' when none does)."""
    return next((text for _, text in reversed(_messages(observation)) if needle in text), "")


def _listed_moves(observation: Any) -> list[str]:
    """The moves the game last listed for this player ('Available Moves: [0], [1]' and the like)."""
    for _, text in reversed(_messages(observation)):
        lowered = text.lower()
        if "available moves" in lowered or "available actions" in lowered:
            return _BRACKETED.findall(text)
    return []


# -- Tic-Tac-Toe ---------------------------------------------------------------------------------
def _ttt_board(observation: Any) -> tuple[str, ...]:
    board = _last(observation, "Current Board:")
    cells = re.findall(r"^\s*(\S)\s*\|\s*(\S)\s*\|\s*(\S)\s*$", board, flags=re.MULTILINE)
    flat = [c for row in cells for c in row]
    return tuple(c if c in "OX" else "." for c in flat) if len(flat) == 9 else tuple("." * 9)


def _ttt_winner(board: Sequence[str]) -> str | None:
    for a, b, c in _TTT_LINES:
        if board[a] != "." and board[a] == board[b] == board[c]:
            return board[a]
    return None


@cache
def _ttt_value(board: tuple[str, ...], me: str, to_move: str) -> int:
    """+1 when `me` wins with best play from here, -1 when `me` loses, 0 for a draw."""
    winner = _ttt_winner(board)
    if winner:
        return 1 if winner == me else -1
    if "." not in board:
        return 0
    other = "X" if to_move == "O" else "O"
    values = [_ttt_value(_place(board, i, to_move), me, other) for i, c in enumerate(board) if c == "."]
    return max(values) if to_move == me else min(values)


def _place(board: tuple[str, ...], cell: int, mark: str) -> tuple[str, ...]:
    return board[:cell] + (mark,) + board[cell + 1 :]


def _tictactoe(observation: Any, rng: random.Random) -> str:
    board = _ttt_board(observation)
    me = "O" if "you will be 'O'" in _last(observation, "you will be") else "X"
    other = "X" if me == "O" else "O"
    free = [i for i, c in enumerate(board) if c == "."]
    best = max(_ttt_value(_place(board, i, me), me, other) for i in free)
    return f"[{rng.choice([i for i in free if _ttt_value(_place(board, i, me), me, other) == best])}]"


# -- Kuhn Poker ----------------------------------------------------------------------------------
#: P(aggressive move) by card and spot: bet when first to act, bet after a check, call a bet,
#: call a bet after checking. Von Neumann's equilibrium family with alpha = 1/3.
_KUHN = {
    "J": {"open": 1 / 3, "after_check": 1 / 3, "facing_bet": 0.0, "check_then_bet": 0.0},
    "Q": {"open": 0.0, "after_check": 0.0, "facing_bet": 1 / 3, "check_then_bet": 2 / 3},
    "K": {"open": 1.0, "after_check": 1.0, "facing_bet": 1.0, "check_then_bet": 1.0},
}


def _kuhn(observation: Any, rng: random.Random) -> str:
    texts = [text for _, text in _messages(observation)]
    start = max((i for i, t in enumerate(texts) if t.startswith("### Starting round")), default=0)
    card = re.search(r"Your card is: '([JQK])'", texts[start]) if texts else None
    moves_this_round = sum("submitted move" in t for t in texts[start:])
    legal = [m.strip("[]") for m in _listed_moves(observation)]
    if "bet" in legal:
        spot, aggressive, passive = ("open" if moves_this_round == 0 else "after_check"), "bet", "check"
    else:
        spot = "facing_bet" if moves_this_round == 1 else "check_then_bet"
        aggressive, passive = "call", "fold"
    p = _KUHN[card.group(1) if card else "Q"][spot]
    return f"[{aggressive if rng.random() < p else passive}]"


# -- Nim, Connect Four ---------------------------------------------------------------------------
def _nim_piles(observation: Any) -> list[int]:
    return [int(n) for n in re.findall(r"pile \d+: (\d+)", _last(observation, "Current Pile:"))]


def _nim(observation: Any, rng: random.Random, *, optimal: bool) -> str:
    piles = _nim_piles(observation)
    nim_sum = 0
    for n in piles:
        nim_sum ^= n
    if optimal and nim_sum:
        pile = next(i for i, n in enumerate(piles) if n ^ nim_sum < n)
        return f"[{pile} {piles[pile] - (piles[pile] ^ nim_sum)}]"
    pile = rng.choice([i for i, n in enumerate(piles) if n > 0])
    return f"[{pile} {rng.randint(1, piles[pile])}]"


def _c4_rows(observation: Any) -> list[str]:
    board = _last(observation, "Board state:").split("-------------")[-1]
    return [row.replace(" ", "") for row in board.strip().splitlines() if row.strip()]


def _c4_drop(rows: list[str], col: int, mark: str) -> list[str] | None:
    for r in range(len(rows) - 1, -1, -1):
        if rows[r][col] == ".":
            return [row if i != r else row[:col] + mark + row[col + 1 :] for i, row in enumerate(rows)]
    return None


def _c4_wins(rows: list[str], mark: str) -> bool:
    height, width = len(rows), len(rows[0]) if rows else 0
    for r in range(height):
        for c in range(width):
            for dr, dc in ((0, 1), (1, 0), (1, 1), (1, -1)):
                cells = [(r + k * dr, c + k * dc) for k in range(4)]
                if all(0 <= y < height and 0 <= x < width and rows[y][x] == mark for y, x in cells):
                    return True
    return False


def _connect_four(observation: Any, rng: random.Random, *, strong: bool) -> str:
    rows = _c4_rows(observation)
    free = [c for c, cell in enumerate(rows[0] if rows else "") if cell == "."]
    if strong:
        me = "X" if "Your disc symbol: X" in _last(observation, "Your disc symbol") else "O"
        other = "O" if me == "X" else "X"
        for mark in (me, other):  # win if we can, else block
            for c in free:
                dropped = _c4_drop(rows, c, mark)
                if dropped and _c4_wins(dropped, mark):
                    return f"[col {c}]"
        centre = sorted(free, key=lambda c: abs(c - len(rows[0]) // 2))
        return f"[col {centre[0]}]"
    return f"[col {rng.choice(free)}]"


# -- games that list their moves their own way -------------------------------------------------
def _pure_strategy(observation: Any, rng: random.Random) -> str | None:
    """Game of Pure Strategy: a card of the hand the round shows ('Your remaining hand: '[A]' ...')."""
    return _choice(rng, _BRACKETED.findall(_last(observation, "Your remaining hand:")))


def _indian_poker(observation: Any, rng: random.Random) -> str | None:
    """Indian Poker: one of 'Your possible actions', a bet or raise of 1 to 3 chips (the prompt
    shows no chip count before a round ends; 100 to start, so small amounts stay legal)."""
    move = _choice(rng, _BRACKETED.findall(_last(observation, "Your possible actions:")))
    return move.replace(" X]", f" {rng.randint(1, 3)}]") if move else None


_MAFIA_PHASES = ("Valid targets:", "choose one player to", "Voting phase", "Day breaks")


def _secret_mafia(observation: Any, rng: random.Random) -> str | None:
    """Secret Mafia: the game's latest call to this player (its own messages, not what players
    said): a word in the day's discussion, else one of the players it lists ('[0], [2]')."""
    calls = [
        text
        for category, text in _messages(observation)
        if category == "GAME_MESSAGE" and any(phase in text for phase in _MAFIA_PHASES)
    ]
    if not calls:
        return None
    if "Day breaks" in calls[-1]:
        return rng.choice(
            ("I have nothing to report yet.", "Let us hear everyone first.", "I am a villager.")
        )
    return _choice(rng, re.findall(r"\[\d+\]", calls[-1].split(":", 1)[-1]))


def _choice(rng: random.Random, moves: list[str]) -> str | None:
    return rng.choice(moves) if moves else None


#: Games whose legal moves the random player reads from the board or from the game's own list;
#: every other game lists them ('Available Moves: ...').
_RANDOM_PLAYERS: dict[str, Callable[[Any, random.Random], str | None]] = {
    "Nim": lambda observation, rng: _nim(observation, rng, optimal=False),
    "ConnectFour": lambda observation, rng: _connect_four(observation, rng, strong=False),
    "GameOfPureStrategy": _pure_strategy,
    "IndianPoker": _indian_poker,
    "SecretMafia": _secret_mafia,
}


# -- the two kinds -------------------------------------------------------------------------------
def random_move(env_id: str, observation: Any, rng: random.Random) -> str:
    """A legal move drawn uniformly: from the moves the game lists, or from the board."""
    own = _RANDOM_PLAYERS.get(games.game_of(env_id) or "")
    listed = _listed_moves(observation)
    move = own(observation, rng) if own else rng.choice(listed) if listed else None
    if move is None:
        raise NoScriptedMove(
            f"{env_id}: no random legal move known (the game lists no moves; random play covers "
            f"{', '.join(RANDOM_GAMES)} and games that list their moves)"
        )
    return move


def scripted_move(env_id: str, observation: Any, rng: random.Random) -> str:
    """The strong scripted player of the game (see the module docstring for which)."""
    family = games.game_of(env_id)
    if family == "KuhnPoker":
        return _kuhn(observation, rng)
    if family == "TicTacToe":
        return _tictactoe(observation, rng)
    if family == "Nim":
        return _nim(observation, rng, optimal=True)
    if family == "ConnectFour":
        return _connect_four(observation, rng, strong=True)
    raise NoScriptedMove(f"{env_id}: no scripted player (scripted games: {', '.join(SCRIPTED_GAMES)})")


SCRIPTED_GAMES = ("KuhnPoker", "TicTacToe", "Nim", "ConnectFour")
RANDOM_GAMES = tuple(_RANDOM_PLAYERS)
POLICIES: dict[str, Policy] = {"random": random_move, "scripted": scripted_move}

__all__ = ["POLICIES", "NoScriptedMove", "random_move", "scripted_move"]
