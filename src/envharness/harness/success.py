"""What success is: the one verdict eval's table, train's ``success`` reward, the held-out
evaluation during training, the curriculum's p(1-p) and the adversarial floor all count.

An environment declares it. A session's `verify` that reports ``metrics["success"]`` has the
last word (MiniWoB: the raw reward reaching the task's full score; TextArena: a won game; an
environment built with `define_environment(..., success=...)`: the author's rule). Without one,
success is the task's full score: a reward of at least `FULL_SCORE`. A positive reward below
it is partial credit, counted apart, never a success.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

#: The reward that is a task's full score unless the environment declares its own range.
FULL_SCORE = 1.0

#: (the episode's reward, its final observation) -> whether the episode succeeded.
SuccessRule = Callable[[float, Any], bool]


@dataclass(frozen=True)
class Verdict:
    """An episode's outcome in the two words everything counts."""

    success: bool
    partial_credit: bool

    def metrics(self) -> dict[str, bool]:
        return {"success": self.success, "partial_credit": self.partial_credit}


def judge(
    reward: float | None,
    observation: Any = None,
    *,
    full_score: float = FULL_SCORE,
    rule: SuccessRule | None = None,
) -> Verdict:
    """The verdict on an episode's reward (and final observation, for a declared `rule`)."""
    value = float(reward or 0.0)
    won = bool(rule(value, observation)) if rule is not None else value >= full_score
    return Verdict(success=won, partial_credit=not won and value > 0.0)


def episode_success(metrics: Mapping[str, Any] | None, reward: float | None, error: Any = None) -> bool:
    """Whether an episode succeeded: never when it crashed; the session's own verdict when it
    reports one; else the task's full score."""
    if error:
        return False
    verdict = (metrics or {}).get("success")
    if verdict is not None:
        return bool(verdict)
    return judge(reward).success


def partial_credit(metrics: Mapping[str, Any] | None, reward: float | None, error: Any = None) -> bool:
    """Whether an episode earned part of a score without succeeding (counted apart)."""
    metrics = metrics or {}
    if error:
        return False
    if "partial_credit" in metrics or "success" in metrics:
        return bool(metrics.get("partial_credit"))
    return judge(reward).partial_credit


__all__ = ["FULL_SCORE", "SuccessRule", "Verdict", "episode_success", "judge", "partial_credit"]
