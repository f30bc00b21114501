"""A Wordle solver: keep the words the feedback allows, guess the one that splits them best.

The candidates are the words textarena draws secrets from before its noun filter (NLTK's
``words`` ``en-basic`` list of that length; for ``hardcore`` games, whose secrets come from
the full ``en`` list, the full list), so the secret is always among them. Each guess is the
candidate whose feedback patterns split the remaining candidates into the most groups (ties:
the smallest largest group), which wins Wordle-v0 within its 6 guesses on almost every seed.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from collections.abc import Iterable

from envharness.envs.textarena.nltk_data import BASIC_ENGLISH

FEEDBACK = re.compile(
    r"You submitted \[(\w+)\]\.?\s*Feedback:\s*\n\s*([A-Za-z](?: [A-Za-z])*)\s*\n\s*([GYX](?: [GYX])*)"
)
REFUSED = re.compile(r"'(\w+)' is not an English word|already guessed '(\w+)'")


def feedback(guess: str, secret: str) -> str:
    """textarena's feedback for `guess` against `secret`: G, Y or X per letter (greens first,
    then yellows left to right, each secret letter used once)."""
    marks = ["X"] * len(guess)
    left: list[str | None] = list(secret)
    for i, (g, s) in enumerate(zip(guess, secret)):
        if g == s:
            marks[i] = "G"
            left[i] = None
    for i, g in enumerate(guess):
        if marks[i] == "G":
            continue
        if g in left:
            marks[i] = "Y"
            left[left.index(g)] = None
    return "".join(marks)


@functools.lru_cache(maxsize=8)
def word_list(length: int, hardcore: bool = False) -> tuple[str, ...]:
    """The candidate secrets of that length (lower case, letters only, sorted)."""
    words: Iterable[str] = BASIC_ENGLISH.read_text(encoding="utf-8").split()
    if hardcore:
        try:
            import nltk

            words = nltk.corpus.words.words("en")
        except LookupError:
            pass
    return tuple(sorted({w.lower() for w in words if len(w) == length and w.isalpha() and w.islower()}))


def consistent(candidates: Iterable[str], history: list[tuple[str, str]]) -> list[str]:
    """The candidates that would have given every (guess, feedback) in `history`."""
    return [w for w in candidates if all(feedback(g, w) == f for g, f in history)]


def best_guess(candidates: list[str], pool: Iterable[str] | None = None) -> str:
    """The word (from `pool`, default the candidates) whose feedback splits the candidates into
    the most groups; ties go to a candidate (it may win now), then the smaller largest group."""
    if len(candidates) <= 2:
        return candidates[0]
    options = list(pool) if pool is not None else candidates
    in_play = set(candidates)

    def score(word: str) -> tuple[int, int, int]:
        groups = Counter(feedback(word, secret) for secret in candidates)
        return len(groups), word in in_play, -max(groups.values())

    return max(options, key=score)


@functools.lru_cache(maxsize=8)
def _opener(length: int, hardcore: bool) -> str:
    words = list(word_list(length, hardcore))
    return best_guess(words) if not hardcore else best_guess(words, words[:400])


def next_guess(
    history: list[tuple[str, str]], *, length: int = 5, hardcore: bool = False, refused: Iterable[str] = ()
) -> str:
    """The next guess after `history` (pairs of guess and its G/Y/X feedback, lower case)."""
    words = [w for w in word_list(length, hardcore) if w not in set(refused)]
    if not history:
        return _opener(length, hardcore)
    guessed = {g for g, _ in history}
    left = [w for w in consistent(words, history) if w not in guessed]
    if not left:  # the secret is outside our list: try any unguessed word of the right length
        left = [w for w in word_list(length, True) if w not in guessed] or [words[0]]
        left = consistent(left, history) or left
    return best_guess(left) if len(left) < 300 else left[0]


def history_from_text(text: str) -> tuple[list[tuple[str, str]], set[str]]:
    """The (guess, feedback) pairs and the refused words in the game's messages."""
    history = [(m.group(1).lower(), m.group(3).replace(" ", "")) for m in FEEDBACK.finditer(text)]
    refused = {(a or b).lower() for a, b in REFUSED.findall(text)}
    return history, refused
