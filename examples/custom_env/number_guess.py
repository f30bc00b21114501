"""Your own environment, end to end: a number-guessing game in one file.

Serve it, evaluate a model on it, train on it, play it over MCP, with the commands MiniWoB
uses; nothing in envharness names it. What makes that work is the `EnvSpec` at the bottom:
the server-side environment, its client, and an `EnvHarness` (how an agent plays it).

    envharness serve number_guess:SPEC --port 8000              # (run from this folder)
    envharness eval --env number_guess:SPEC --model scripted --episodes 4 --out runs/guess
    envharness train --env number_guess:SPEC --model tiny --steps 1 --max-turns 4 --out runs/guess-train

Walkthrough: docs/new_environment.md.
"""

from __future__ import annotations

import random
import re
import uuid
from collections.abc import Callable
from typing import Any

from pydantic import Field

from envharness.core.client import AsyncEnvClient
from envharness.core.environment import Environment
from envharness.core.registry import EnvSpec
from envharness.core.types import Action, Observation, State
from envharness.harness import StepEnvSessionAdapter, ToolCall
from envharness.harness.env_harness import EnvHarness, TaskList
from envharness.harness.session import ResourceSessionFactory
from envharness.harness.tools import tool_spec
from envharness.harness.types import ToolResult
from envharness.prompts import PromptStyle

# -- the wire: pydantic models, as every environment has ----------------------------------
RANGES = {"guess-10": 10, "guess-100": 100, "guess-1000": 1000}


class GuessAction(Action):
    guess: int = Field(..., description="your guess")


class GuessObservation(Observation):
    prompt: str = ""
    feedback: str = ""


# -- the environment: reset / step / state, like Gymnasium's Env ---------------------------
class NumberGuessEnvironment(Environment[GuessAction, GuessObservation]):
    """Guess a secret number in 1..N; reward 1 for finding it, `higher`/`lower` otherwise."""

    action_type = GuessAction
    observation_type = GuessObservation

    def __init__(self, max_guesses: int = 12) -> None:
        self.max_guesses = max_guesses
        self._state = State(episode_id=None, step_count=0)
        self._secret, self._top = 0, 0

    def reset(
        self, seed: int | None = None, episode_id: str | None = None, task: str = "guess-100", **options: Any
    ) -> GuessObservation:
        if task not in RANGES:
            raise ValueError(f"unknown task {task!r}; choose from {', '.join(RANGES)}")
        if options:
            raise ValueError(f"unknown reset option(s) {', '.join(options)}")
        self._top = RANGES[task]
        self._secret = random.Random(seed).randint(1, self._top)  # the same seed, the same game
        self._state = State(episode_id=episode_id or str(uuid.uuid4()), step_count=0)
        return GuessObservation(
            prompt=f"I am thinking of a number from 1 to {self._top}. Guess it.", done=False, reward=0.0
        )

    def step(self, action: GuessAction) -> GuessObservation:
        self._state.step_count += 1
        won = action.guess == self._secret
        feedback = "correct" if won else ("higher" if action.guess < self._secret else "lower")
        done = won or self._state.step_count >= self.max_guesses
        return GuessObservation(
            prompt="", feedback=f"{action.guess}: {feedback}", done=done, reward=1.0 if won else 0.0
        )

    @property
    def state(self) -> State:
        return self._state


class AsyncNumberGuessEnv(AsyncEnvClient[GuessAction, GuessObservation, State]):
    observation_type = GuessObservation
    env_name = "number_guess:SPEC"


# -- how an agent plays it: one tool, its parser, a prompt, a scripted policy -------------
GUESS_TOOL = tool_spec("guess", "Guess the number.", {"number": {"type": "integer"}}, ["number"])


class GuessSessionFactory(ResourceSessionFactory[StepEnvSessionAdapter]):
    """One client and one session per episode: the `guess` tool becomes a `GuessAction`."""

    def __init__(
        self,
        client_factory: Callable[[], Any],
        *,
        default_task: str | None = "guess-100",
        tools: Any = None,
        reset_kwargs: dict[str, Any] | None = None,
        prompt_builder: Callable[..., list[dict[str, Any]]] | None = None,
        observation_text: Callable[[Any], str] | None = None,
    ) -> None:
        if tools and list(tools) != ["guess"]:
            raise ValueError(f"number_guess has one tool, guess; not {', '.join(tools)}")
        self.client_factory, self.default_task = client_factory, default_task
        self.prompt_builder = prompt_builder or opening
        self.observation_text = observation_text or feedback_text
        self.reset_kwargs = dict(reset_kwargs or {})

    def create(
        self, task: Any = None, seed: int | None = None, episode_id: str | None = None
    ) -> StepEnvSessionAdapter:
        task = task if isinstance(task, str) and task in RANGES else self.default_task
        return StepEnvSessionAdapter(
            self.client_factory(),
            task=task,
            seed=seed,
            episode_id=episode_id,
            tool_specs=[GUESS_TOOL],
            action_builder=lambda name, args: GuessAction(guess=int(args["number"])),
            initial_messages_builder=lambda result, task: self.prompt_builder(
                result.observation, task, ["guess"]
            ),
            tool_result_builder=lambda name, args, result, state: ToolResult(
                data=self.observation_text(result.observation),
                done=bool(result.done),
                metadata={"reward": result.reward, "done": bool(result.done)},
            ),
            reset_kwargs={**self.reset_kwargs, "task": task},
        )


def opening(observation: Any, task: Any, tool_names: list[str]) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": f"{observation.prompt}\nReply with your guess as a number, e.g. `50`."}
    ]


def feedback_text(observation: Any) -> str:
    return f"{observation.feedback}. Guess again." if not observation.done else observation.feedback


def parse_guess(text: str) -> ToolCall:
    """The first integer in the reply is the guess (none: guess 0, with the reason noted)."""
    found = re.search(r"-?\d+", text)
    if found is None:
        return ToolCall(
            id="guess", name="guess", args={"number": 0}, metadata={"parse_error": "no number in the reply"}
        )
    return ToolCall(id="guess", name="guess", args={"number": int(found.group())})


def bisect(messages: list[dict[str, Any]]) -> str:
    """The scripted policy: binary search over what the feedback has ruled out."""
    text = "\n".join(str(m.get("content", "")) for m in messages)
    top = int(re.search(r"from 1 to (\d+)", text).group(1))
    low, high = 1, top
    for guess, answer in re.findall(r"(\d+): (higher|lower)", text):
        if answer == "higher":
            low = max(low, int(guess) + 1)
        else:
            high = min(high, int(guess) - 1)
    return str((low + high) // 2)


def check_task(name: str) -> str:
    if name not in RANGES:
        raise ValueError(f"unknown task {name!r}; choose from {', '.join(RANGES)}")
    return name


STYLES = {
    "default": PromptStyle(
        "default", "the question, then each guess's feedback", opening=opening, observation_text=feedback_text
    )
}

HARNESS = EnvHarness(
    env="number_guess:SPEC",
    session_factory=GuessSessionFactory,
    tool_call_parser=parse_guess,
    task_list=lambda: TaskList(tasks=tuple(RANGES), splits={"easy": ("guess-10",)}),
    check_task=check_task,
    default_tasks=("guess-100",),
    prompt_styles="number_guess:STYLES",
    scripted_policy=bisect,
)

SPEC = EnvSpec(
    name="number_guess:SPEC",
    environment="number_guess:NumberGuessEnvironment",
    client="number_guess:AsyncNumberGuessEnv",
    harness="number_guess:HARNESS",
    summary="guess a number from higher/lower feedback",
)
