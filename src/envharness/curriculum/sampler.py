"""Task samplers for training on many tasks: uniform, or weighted by how much a task can teach now.

GRPO learns from a group only when its episodes disagree: a group that all succeed or all fail
has zero advantage everywhere and moves nothing. For a task solved with probability p, the
chance that a group of n disagrees is 1 - p^n - (1-p)^n, and the expected variance of its
rewards is p(1-p). `SignalSampler` weights each task by p(1-p) of its recent success rate
(the last `window` episodes), so the tasks that give signal now are practised most; a `floor`
keeps every task in the mix, so that what was learned is rehearsed and what is not yet within
reach is tried again. A task never played has the largest weight (p unknown: 1/4), so each is
tried early. `UniformSampler` cycles through the tasks in order: the baseline.

Both are deterministic given their seed and the results they are fed, and `plan()` says what
the next draw will be based on (logged at every training step).
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

#: A never-played task's weight: p(1-p) at its largest (p = 1/2).
UNKNOWN_WEIGHT = 0.25


class TaskSampler(Protocol):
    """Chooses the task of each of a step's groups, and learns from their results."""

    tasks: tuple[str, ...]

    def choose(self, groups: int) -> list[str]:
        """The tasks of the next `groups` groups."""

    def update(self, task: str, successes: Sequence[bool]) -> None:
        """One group's episodes of `task` ended; `successes` says which succeeded."""

    def plan(self) -> dict[str, Any]:
        """What the next draw is based on, per task (for the training log)."""


@dataclass
class _History:
    window: int
    results: deque[bool] = field(init=False)
    episodes: int = 0

    def __post_init__(self) -> None:
        self.results = deque(maxlen=self.window)

    def rate(self) -> float | None:
        return sum(self.results) / len(self.results) if self.results else None


class _Sampler:
    def __init__(self, tasks: Sequence[str], *, window: int = 32, seed: int = 0) -> None:
        if not tasks:
            raise ValueError("a sampler needs at least one task")
        if not isinstance(window, int) or isinstance(window, bool) or window < 1:
            raise ValueError(f"window must be an integer >= 1, got {window!r}")
        self.tasks = tuple(dict.fromkeys(tasks))
        self.window = window
        self._rng = random.Random(seed)
        self._history = {task: _History(window) for task in self.tasks}

    def update(self, task: str, successes: Sequence[bool]) -> None:
        history = self._history.get(task)
        if history is None:
            raise ValueError(f"unknown task {task!r}; the sampler's tasks are {', '.join(self.tasks)}")
        history.results.extend(bool(s) for s in successes)
        history.episodes += len(successes)

    def success_rates(self) -> dict[str, float | None]:
        """Each task's success rate over its last `window` episodes (None: never played)."""
        return {task: h.rate() for task, h in self._history.items()}

    def weights(self) -> dict[str, float]:
        """Each task's share of the next draw (sums to 1)."""
        raise NotImplementedError

    def plan(self) -> dict[str, Any]:
        rates, weights = self.success_rates(), self.weights()
        return {
            task: {
                "weight": round(weights[task], 4),
                "success": None if rates[task] is None else round(rates[task], 4),
                "episodes": self._history[task].episodes,
            }
            for task in self.tasks
        }


class UniformSampler(_Sampler):
    """The tasks in turn, whatever happens: the baseline (and what a dataset cycling through its
    tasks gives)."""

    def __init__(self, tasks: Sequence[str], *, window: int = 32, seed: int = 0) -> None:
        super().__init__(tasks, window=window, seed=seed)
        self._next = 0

    def weights(self) -> dict[str, float]:
        return {task: 1 / len(self.tasks) for task in self.tasks}

    def choose(self, groups: int) -> list[str]:
        chosen = [self.tasks[(self._next + i) % len(self.tasks)] for i in range(groups)]
        self._next = (self._next + groups) % len(self.tasks)
        return chosen


class SignalSampler(_Sampler):
    """Tasks drawn in proportion to max(floor, p(1-p)) of their recent success rate p."""

    def __init__(self, tasks: Sequence[str], *, window: int = 32, floor: float = 0.02, seed: int = 0) -> None:
        super().__init__(tasks, window=window, seed=seed)
        if not 0 < floor <= UNKNOWN_WEIGHT:
            raise ValueError(f"floor must be in (0, {UNKNOWN_WEIGHT}], got {floor!r}")
        self.floor = floor

    def weights(self) -> dict[str, float]:
        raw = {
            task: UNKNOWN_WEIGHT if p is None else max(self.floor, p * (1 - p))
            for task, p in self.success_rates().items()
        }
        total = sum(raw.values())
        return {task: w / total for task, w in raw.items()}

    def choose(self, groups: int) -> list[str]:
        weights = self.weights()
        return self._rng.choices(self.tasks, weights=[weights[t] for t in self.tasks], k=groups)


#: ``--curriculum`` choices.
SAMPLERS = {"uniform": UniformSampler, "signal": SignalSampler}


def make_sampler(name: str, tasks: Sequence[str], *, seed: int = 0, **options: Any) -> TaskSampler:
    """The sampler called `name` (`SAMPLERS`) over `tasks`."""
    if name not in SAMPLERS:
        raise ValueError(f"unknown curriculum {name!r}; choose one of {', '.join(SAMPLERS)}")
    return SAMPLERS[name](tasks, seed=seed, **options)
