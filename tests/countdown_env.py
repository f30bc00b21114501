"""An arithmetic puzzle written as an author would from docs/new_environment.md: two seeded
tasks, three attempts, partial credit below success, and `InvalidAction` for bad input.
`tests/test_env_contract.py` checks, evaluates and breaks it.

Reach the target with + - * over the numbers shown. An exact answer scores 1 (success); a
near one scores part of it (1 - distance / target), which is partial credit, not a success.
"""

from __future__ import annotations

import ast
import itertools
import random
import re

from pydantic import Field

from envharness import Action, Environment, InvalidAction, Observation, State, define_environment

TASKS = {"countdown-easy": 10, "countdown-hard": 50}
MAX_CHARS, ATTEMPTS = 200, 3
_OPERATORS = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b}


class CountdownAction(Action):
    """Answer with an arithmetic expression over the numbers shown."""

    expression: str = Field(..., description="e.g. 3 + 4 * 5")


class CountdownObservation(Observation):
    text: str = ""


def value_of(expression: str) -> int:
    """The value of `expression` (integers, + - * and brackets only), read as a syntax tree:
    never `eval`. InvalidAction says what is wrong."""
    if len(expression) > MAX_CHARS:
        raise InvalidAction(f"expression too long ({MAX_CHARS} characters at most)")
    try:
        tree = ast.parse(expression.strip(), mode="eval").body
    except SyntaxError:
        raise InvalidAction(f"not an arithmetic expression: {expression[:40]!r}") from None
    return _value(tree)


def _value(node: ast.AST) -> int:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        return _OPERATORS[type(node.op)](_value(node.left), _value(node.right))
    raise InvalidAction("use integers, + - * and brackets only")


class CountdownEnvironment(Environment[CountdownAction, CountdownObservation]):
    """Reach the target with + - * over three numbers; three attempts; partial credit when close."""

    action_type, observation_type = CountdownAction, CountdownObservation

    def reset(self, seed=None, episode_id=None, task="countdown-easy", **options) -> CountdownObservation:
        if task not in TASKS:
            raise ValueError(f"unknown task {task!r}; choose from {', '.join(TASKS)}")
        rng = random.Random(f"{task}|{seed}")
        self.numbers = [rng.randint(2, TASKS[task]) for _ in range(3)]
        self.target = self.numbers[0] + self.numbers[1] * self.numbers[2]
        self._state = State(episode_id=episode_id, step_count=0)
        return CountdownObservation(text=self._prompt())

    def _prompt(self) -> str:
        return f"numbers: {' '.join(map(str, self.numbers))}; target: {self.target}"

    def step(self, action: CountdownAction) -> CountdownObservation:
        self._state.step_count += 1  # a refused answer uses an attempt too
        value = value_of(action.expression)
        reward = max(0.0, 1.0 - abs(value - self.target) / self.target)
        done = value == self.target or self._state.step_count >= ATTEMPTS
        return CountdownObservation(text=f"{action.expression} = {value}", reward=round(reward, 4), done=done)

    @property
    def state(self) -> State:
        return self._state


def _numbers(messages: list[dict]) -> tuple[list[int], int]:
    text = "\n".join(str(m.get("content", "")) for m in messages)
    found = re.search(r"numbers: ([\d ]+); target: (\d+)", text)
    return [int(n) for n in found.group(1).split()], int(found.group(2))


def solve(messages: list[dict]) -> str:
    """The scripted policy: try each order of the numbers in `a + b * c` and `a * b + c`."""
    numbers, target = _numbers(messages)
    for a, b, c in itertools.permutations(numbers):
        for expression in (f"{a} + {b} * {c}", f"{a} * {b} + {c}"):
            if value_of(expression) == target:
                return expression
    raise ValueError("no expression found")


def near_miss(messages: list[dict]) -> str:
    """Always one too many: partial credit (close), never the target."""
    return solve(messages) + " + 1"


class BuggyCountdownEnvironment(CountdownEnvironment):
    """Rejects a long expression with a KeyError: by the contract, a bug that ends the episode."""

    def step(self, action: CountdownAction) -> CountdownObservation:
        if len(action.expression) > MAX_CHARS:
            raise KeyError("expression")
        return super().step(action)


class ValueErrorCountdownEnvironment(CountdownEnvironment):
    """Rejects a long expression with a plain ValueError, which counts as InvalidAction."""

    def step(self, action: CountdownAction) -> CountdownObservation:
        if len(action.expression) > MAX_CHARS:
            self._state.step_count += 1
            raise ValueError("expression too long")
        return super().step(action)


class OverpayingCountdownEnvironment(CountdownEnvironment):
    """Pays 100 for a right answer: outside its declared reward range."""

    def step(self, action: CountdownAction) -> CountdownObservation:
        observation = super().step(action)
        observation.reward = 100.0 * (observation.reward or 0.0)
        return observation


def _spec(environment: type, **kwargs) -> object:
    return define_environment(environment, tasks=TASKS, scripted_policy=solve, **kwargs)


SPEC = _spec(CountdownEnvironment)
NEAR_MISS = define_environment(CountdownEnvironment, tasks=TASKS, scripted_policy=near_miss)
#: The author's own rule: within 10% of the target is a success.
LENIENT = define_environment(
    CountdownEnvironment, tasks=TASKS, scripted_policy=near_miss, success=lambda reward, obs: reward >= 0.9
)
BUGGY = _spec(BuggyCountdownEnvironment)
VALUE_ERROR = _spec(ValueErrorCountdownEnvironment)
OVERPAYING = _spec(OverpayingCountdownEnvironment)


def too_long_first(messages: list[dict]) -> str:
    """A long expression first (refused), then the solution."""
    if not any(m.get("role") == "tool" for m in messages):
        return "1 + " * 60 + "1"
    return solve(messages)


SECOND_TRY = define_environment(CountdownEnvironment, tasks=TASKS, scripted_policy=too_long_first)
