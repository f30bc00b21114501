"""A number-guessing game that envharness can serve, evaluate and train on, in one short file.

    envharness serve guess:SPEC --port 8000                        # (run from this folder)
    envharness eval --env guess:SPEC --model scripted --episodes 4 --out runs/guess
    envharness train --env guess:SPEC --model tiny --steps 1 --max-turns 4 --out runs/guess-train

Walkthrough: docs/new_environment.md. The same game in the long form: number_guess.py.
"""

import random
import re

from pydantic import Field

from envharness import Action, Environment, Observation, State, define_environment

RANGES = {"guess-10": 10, "guess-100": 100, "guess-1000": 1000}


class GuessAction(Action):
    """Guess the number."""

    number: int = Field(..., description="your guess")


class GuessObservation(Observation):
    text: str = ""


class GuessEnvironment(Environment[GuessAction, GuessObservation]):
    """Guess a secret number in 1..N from higher/lower feedback; reward 1 for finding it."""

    action_type, observation_type = GuessAction, GuessObservation

    def reset(self, seed=None, episode_id=None, task="guess-100", **options) -> GuessObservation:
        if task not in RANGES:
            raise ValueError(f"unknown task {task!r}; choose from {', '.join(RANGES)}")
        self._top, self._state = RANGES[task], State(episode_id=episode_id, step_count=0)
        self._secret = random.Random(seed).randint(1, self._top)  # the same seed, the same game
        return GuessObservation(text=f"I am thinking of a number from 1 to {self._top}. Guess it.")

    def step(self, action: GuessAction) -> GuessObservation:
        self._state.step_count += 1
        won = action.number == self._secret
        answer = "correct" if won else "higher" if action.number < self._secret else "lower"
        done = won or self._state.step_count >= 12
        return GuessObservation(text=f"{action.number}: {answer}", reward=float(won), done=done)

    @property
    def state(self) -> State:
        return self._state


def bisect(messages: list[dict]) -> str:
    """The scripted policy: binary search over what the feedback has ruled out."""
    text = "\n".join(str(m.get("content", "")) for m in messages)
    low, high = 1, int(re.search(r"from 1 to (\d+)", text).group(1))
    for guess, answer in re.findall(r"(\d+): (higher|lower)", text):
        g = int(guess)
        low, high = (max(low, g + 1), high) if answer == "higher" else (low, min(high, g - 1))
    return str((low + high) // 2)


SPEC = define_environment(GuessEnvironment, tasks=RANGES, default_tasks=["guess-100"], scripted_policy=bisect)
