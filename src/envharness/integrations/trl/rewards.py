"""Reward functions for TRL's `GRPOTrainer(reward_funcs=...)`, read from rollout fields.

The rollout function (`integrations/trl/rollout.py`) hands TRL `step_rewards` (one list per
episode: the reward of each environment step), `env_reward` and `success`; TRL forwards
them to every reward function as keyword arguments. `reward_sum`, `reward_mean` and
`reward_max` are the seed GRPO script's functions; `reward_success` is 1.0 for a solved
episode. An episode that failed for reasons outside the model (a dead server, a crashed
browser) is scored `None`, which TRL leaves out of the group baseline instead of
teaching the model that it did badly.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any


def _per_episode(kwargs: dict[str, Any], key: str, n: int) -> list[Any]:
    values = kwargs.get(key)
    if values is None:
        raise KeyError(
            f"reward functions need the rollout field {key!r}; use envharness's TRL rollout function "
            "(envharness.integrations.trl.build_trl_rollout_func)"
        )
    if len(values) != n:
        raise ValueError(f"{len(values)} values of {key!r} for {n} completions")
    return list(values)


def _failed(kwargs: dict[str, Any], n: int) -> list[bool]:
    metrics = kwargs.get("verify_metrics") or [{}] * n
    return [bool((m or {}).get("error")) for m in metrics]


def _reduce_steps(
    completions: list[Any], kwargs: dict[str, Any], reduce: Callable[[Sequence[float]], float]
) -> list[float | None]:
    steps = _per_episode(kwargs, "step_rewards", len(completions))
    failed = _failed(kwargs, len(completions))
    return [None if bad else (reduce([float(r) for r in s]) if s else 0.0) for s, bad in zip(steps, failed)]


def reward_sum(completions: list[Any], **kwargs: Any) -> list[float | None]:
    """Sum of the episode's step rewards (0.0 when it took no step)."""
    return _reduce_steps(completions, kwargs, sum)


def reward_mean(completions: list[Any], **kwargs: Any) -> list[float | None]:
    """Mean of the episode's step rewards (0.0 when it took no step)."""
    return _reduce_steps(completions, kwargs, lambda rs: sum(rs) / len(rs))


def reward_max(completions: list[Any], **kwargs: Any) -> list[float | None]:
    """Best step reward of the episode (0.0 when it took no step)."""
    return _reduce_steps(completions, kwargs, max)


def reward_success(completions: list[Any], **kwargs: Any) -> list[float | None]:
    """1.0 when the episode solved its task, else 0.0."""
    success = _per_episode(kwargs, "success", len(completions))
    failed = _failed(kwargs, len(completions))
    return [None if bad else float(bool(s)) for s, bad in zip(success, failed)]


REWARD_FUNCS: dict[str, Callable[..., list[float | None]]] = {
    "success": reward_success,
    "sum": reward_sum,
    "mean": reward_mean,
    "max": reward_max,
}

__all__ = ["REWARD_FUNCS", "reward_max", "reward_mean", "reward_success", "reward_sum"]
