"""TRL's Wordle tutorial's shaped rewards, as reward functions `train --rewards` can pick.

Each is TRL's ``f(completions, **kwargs) -> list[float]``. Like the tutorial's, each first
reads its own rollout key when the rollout computed it (``correct_reward``, ``green_reward``,
``yellow_reward``, ``repetition_reward``, ``format_reward``: one value per completion).
Otherwise it computes the signal from the episode's text: the per-sample conversation in
``kwargs["messages"]`` (a list of chat messages) when the rollout passes it, else the
completion itself (a string, or TRL's conversational list of messages), in which our
multi-turn completions carry the game's feedback between the model's moves.

- ``correct``: 1.0 when the game was won (``env_reward`` >= 1, or the game said so);
- ``greens`` / ``yellows``: the share of G / Y letters in the last feedback (1.0 greens on a win);
- ``repetition``: 1.0 with no repeated guess, less for each repeat (the tutorial's scaling);
- ``format``: the share of moves the game accepted as well formed (no wrong-format,
  wrong-length or not-a-word refusal).

The game's own reward stays the default (``env``, from the generic layer).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from envharness.envs.textarena.wordle import FEEDBACK

RewardFunction = Callable[..., list[float]]
_WON = re.compile(r"Congratulations! You guessed the word correctly")
_BAD_FORMAT = re.compile(r"wrong format|must be exactly \d+ letters|is not an English word")
_REPEAT = re.compile(r"already guessed '(\w+)'")


def _text(sample: Any) -> str:
    if isinstance(sample, str):
        return sample
    if isinstance(sample, dict):
        content = sample.get("content")
        if isinstance(content, list):
            return "\n".join(p.get("text", "") for p in content if isinstance(p, dict))
        return content if isinstance(content, str) else ""
    if isinstance(sample, (list, tuple)):
        return "\n".join(_text(m) for m in sample)
    return ""


def _episodes(completions: list[Any], kwargs: dict[str, Any]) -> list[str]:
    conversations = kwargs.get("messages")
    if isinstance(conversations, (list, tuple)) and len(conversations) == len(completions):
        return [_text(c) for c in conversations]
    return [_text(c) for c in completions]


def _given(key: str, completions: list[Any], kwargs: dict[str, Any]) -> list[float] | None:
    values = kwargs.get(key)
    if isinstance(values, (list, tuple)) and len(values) == len(completions):
        return [float(v) for v in values]
    return None


def _last_feedback(text: str) -> str | None:
    found = FEEDBACK.findall(text)
    return found[-1][2].replace(" ", "") if found else None


def reward_correct(completions: list[Any], **kwargs: Any) -> list[float]:
    given = _given("correct_reward", completions, kwargs)
    if given is not None:
        return given
    env = _given("env_reward", completions, kwargs)
    texts = _episodes(completions, kwargs)
    return [
        1.0 if (env is not None and env[i] >= 1.0) or _WON.search(t) else 0.0 for i, t in enumerate(texts)
    ]


def _share(mark: str) -> RewardFunction:
    key = {"G": "green_reward", "Y": "yellow_reward"}[mark]

    def reward(completions: list[Any], **kwargs: Any) -> list[float]:
        given = _given(key, completions, kwargs)
        if given is not None:
            return given
        out = []
        for text in _episodes(completions, kwargs):
            if mark == "G" and _WON.search(text):
                out.append(1.0)
                continue
            last = _last_feedback(text)
            out.append(last.count(mark) / len(last) if last else 0.0)
        return out

    reward.__name__ = f"reward_{'greens' if mark == 'G' else 'yellows'}"
    return reward


reward_greens = _share("G")
reward_yellows = _share("Y")


def reward_repetition(completions: list[Any], **kwargs: Any) -> list[float]:
    given = _given("repetition_reward", completions, kwargs)
    if given is not None:
        return given
    out = []
    for text in _episodes(completions, kwargs):
        guesses = [g.lower() for g, _, _ in FEEDBACK.findall(text)]
        repeats = len(_REPEAT.findall(text))
        total = len(guesses) + repeats
        out.append(1.0 if total == 0 else (total - repeats) / total)
    return out


def reward_format(completions: list[Any], **kwargs: Any) -> list[float]:
    given = _given("format_reward", completions, kwargs)
    if given is not None:
        return given
    out = []
    for text in _episodes(completions, kwargs):
        good = len(FEEDBACK.findall(text)) + len(_WON.findall(text)) + len(_REPEAT.findall(text))
        bad = len(_BAD_FORMAT.findall(text))
        out.append(0.0 if good + bad == 0 else good / (good + bad))
    return out


#: What `EnvHarness.reward_functions` names: `train --rewards correct,greens,...`.
REWARD_FUNCTIONS: dict[str, RewardFunction] = {
    "correct": reward_correct,
    "greens": reward_greens,
    "yellows": reward_yellows,
    "repetition": reward_repetition,
    "format": reward_format,
}
