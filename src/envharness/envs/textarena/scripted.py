"""Scripted players for the RL games: the conversation so far -> the next move's text.

`scripted_move(messages)` is `EnvHarness.scripted_policy` for textarena. It reads the game's
own text in the conversation (the prompt, the feedback in tool results or user turns, the
moves in the assistant's replies) and answers with a move in the game's syntax:

- Wordle: `wordle.next_guess` (a candidate filter; 32/32 wins on seeds 0-31 of Wordle-v0);
- Mastermind: the first code consistent with every black/white peg answer;
- GuessTheNumber: bisection on the higher/lower hints;
- TowerOfHanoi: the optimal next move from the board shown last;
- the two-player games with a strong seat player (`opponents.scripted_move`: Kuhn Poker's
  equilibrium, Tic-Tac-Toe minimax, Nim's nim-sum, Connect Four win-or-block), read from the
  seat's own conversation; other games that list their legal moves: the first listed.

Other games raise `NoScriptedMove` (ValueError): the scripted backend answers its fallback.
"""

from __future__ import annotations

import itertools
import random
import re
import zlib
from collections.abc import Callable
from typing import Any

from envharness.envs.textarena import opponents, wordle

Message = dict[str, Any]


class NoScriptedMove(ValueError):
    """The conversation is not a game the scripted players know."""


def _text(message: Message) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "\n".join(p.get("text", "") for p in content if isinstance(p, dict))
    text = content if isinstance(content, str) else ""
    for call in message.get("tool_calls") or []:  # moves sent as tool calls count as moves
        function = call.get("function", call) if isinstance(call, dict) else {}
        args = function.get("arguments") or function.get("args") or {}
        if isinstance(args, dict):
            text += "\n" + " ".join(str(v) for v in args.values())
        elif isinstance(args, str):
            text += "\n" + args
    return text


def game_text(messages: list[Message]) -> str:
    """Everything the game said (user and tool turns), oldest first."""
    return "\n".join(_text(m) for m in messages if m.get("role") != "assistant")


def moves_and_replies(messages: list[Message]) -> list[tuple[str, str]]:
    """(assistant reply, the game's text after it) pairs, in order."""
    pairs: list[tuple[str, str]] = []
    for i, message in enumerate(messages):
        if message.get("role") != "assistant":
            continue
        reply = []
        for later in messages[i + 1 :]:
            if later.get("role") == "assistant":
                break
            reply.append(_text(later))
        pairs.append((_text(message), "\n".join(reply)))
    return pairs


def _wordle(messages: list[Message], text: str) -> str:
    length = int(m.group(1)) if (m := re.search(r"secret (\d+)-letter word", text)) else 5
    history, refused = wordle.history_from_text(text)
    return f"[{wordle.next_guess(history, length=length, refused=refused, hardcore=False)}]"


def _mastermind(messages: list[Message], text: str) -> str:
    m = re.search(r"(\d+) digits long, each digit from (\d+) to (\d+)(, with no duplicates)?", text)
    length, low, high, unique = (
        (int(m.group(1)), int(m.group(2)), int(m.group(3)), bool(m.group(4))) if m else (4, 1, 6, True)
    )
    answers = [
        (tuple(int(d) for d in g.split()), int(b), int(w))
        for g, b, w in re.findall(
            r"Submitted \[([\d ]+)\]\. Feedback: (\d+) black peg\(s\), (\d+) white peg\(s\)", text
        )
    ]
    digits = range(low, high + 1)
    codes = itertools.permutations(digits, length) if unique else itertools.product(digits, repeat=length)
    for code in codes:
        if all(_pegs(guess, code) == (b, w) for guess, b, w in answers) and code not in {
            a[0] for a in answers
        }:
            return "[" + " ".join(map(str, code)) + "]"
    raise NoScriptedMove("no Mastermind code fits the feedback")


def _pegs(guess: tuple[int, ...], code: tuple[int, ...]) -> tuple[int, int]:
    black = sum(g == c for g, c in zip(guess, code))
    common = sum(min(guess.count(d), code.count(d)) for d in set(guess))
    return black, common - black


def _guess_the_number(messages: list[Message], text: str) -> str:
    m = re.search(r"between (\d+) and (\d+)", text)
    low, high = (int(m.group(1)), int(m.group(2))) if m else (1, 20)
    for move, reply in moves_and_replies(messages):
        number = re.search(r"\[(\d+)\]", move)
        if not number:
            continue
        guess = int(number.group(1))
        if "higher" in reply:
            low = max(low, guess + 1)
        elif "lower" in reply:
            high = min(high, guess - 1)
    return f"[{(low + high) // 2}]"


def _hanoi(messages: list[Message], text: str) -> str:
    boards = re.findall(r"A: \[([\d, ]*)\]\s*\nB: \[([\d, ]*)\]\s*\nC: \[([\d, ]*)\]", text)
    if not boards:
        raise NoScriptedMove("no Tower of Hanoi board in the conversation")
    target = m.group(1) if (m := re.search(r"from tower \w to tower (\w)", text)) else "C"
    where = {int(d): peg for peg, stack in zip("ABC", boards[-1]) for d in re.findall(r"\d+", stack)}
    move = _hanoi_move(max(where, default=0), target, where)
    if move is None:
        raise NoScriptedMove("the tower is already built")
    return f"[{move[0]} {move[1]}]"


def _hanoi_move(disk: int, target: str, where: dict[int, str]) -> tuple[str, str] | None:
    """The optimal next move that brings disks 1..disk onto `target`."""
    if disk == 0:
        return None
    if where[disk] == target:
        return _hanoi_move(disk - 1, target, where)
    spare = ({"A", "B", "C"} - {where[disk], target}).pop()
    return _hanoi_move(disk - 1, spare, where) or (where[disk], target)


#: (a phrase of the game's prompt, its scripted player).
PLAYERS: list[tuple[str, Callable[[list[Message], str], str]]] = [
    ("playing wordle", _wordle),
    ("playing mastermind", _mastermind),
    ("playing guess the number", _guess_the_number),
    ("playing tower of hanoi", _hanoi),
]


#: (a phrase of a two-player game's prompt, its id for `opponents.scripted_move`).
SEATED: list[tuple[str, str]] = [
    ("game of kuhn poker", "KuhnPoker-v0"),
    ("in tic tac toe", "TicTacToe-v0"),
    ("welcome to nim", "Nim-v0"),
    ("in connect four", "ConnectFour-v0"),
]
#: Where a game's board starts: the board runs over several paragraphs and is read whole.
_BOARD_HEADINGS = ("Current Board:", "Current Pile:", "Board state:")


def _seat_view(messages: list[Message]) -> dict[str, Any]:
    """The conversation as the seat's observation `opponents` reads: the game's messages (the
    paragraphs of the game's text, as the session joined them), the last board kept whole."""
    text = "\n\n".join(_text(m) for m in messages if m.get("role") != "assistant")
    paragraphs = [p for p in text.split("\n\n") if p.strip()]
    for i in range(len(paragraphs) - 1, -1, -1):
        if paragraphs[i].strip().endswith(_BOARD_HEADINGS):
            paragraphs[i:] = ["\n\n".join(paragraphs[i:])]
            break
    return {"messages": [{"category": "", "content": p} for p in paragraphs]}


def _seated(messages: list[Message], env_id: str, text: str) -> str:
    """The strong player's move; its coin flips (Kuhn Poker's bluffs) seeded by the conversation,
    so a demonstration replays."""
    return opponents.scripted_move(env_id, _seat_view(messages), random.Random(zlib.crc32(text.encode())))


#: A game that lists the legal moves (TicTacToe's "Available Moves: '[0]', ...", Kuhn Poker's
#: "Your available actions are: '[check]', '[bet]'"): its latest listing.
LISTED_MOVES = re.compile(r"(?:available moves|available actions are):\s*((?:'\[[^\]]+\]'(?:,\s*)?)+)", re.I)


def scripted_move(messages: list[Message]) -> str:
    """The next move for the game in `messages` (raises `NoScriptedMove` for other games): a
    solver for the single-player games, the strong seat player for the two-player games that
    have one, else the first of the moves the game lists."""
    text = game_text(messages)
    lowered = text.lower()
    for phrase, player in PLAYERS:
        if phrase in lowered:
            return player(messages, text)
    for phrase, env_id in SEATED:
        if phrase in lowered:
            return _seated(messages, env_id, text)
    listings = LISTED_MOVES.findall(text)
    if listings:
        return re.findall(r"\[[^\]]+\]", listings[-1])[0]
    raise NoScriptedMove(
        "no scripted player for this game (Wordle, Mastermind, GuessTheNumber, TowerOfHanoi have one; "
        "a game that lists its legal moves gets the first)"
    )
