"""Rewards of a TRL-native episode by the names `envharness train --reward` takes.

`get_reward` of an `environment_factory(..., reward=NAME)` instance, and `reward_funcs(env,
*names)` for more reward columns, score the finished episode with the same functions `train`
uses (`prompting.reward_functions`: success, sum, mean, max and the environment's shaped ones),
from the fields `train`'s rollout hands them: step rewards, success, the conversation.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from envharness.harness.types import HarnessRolloutResult


def message_text(messages: list[dict[str, Any]]) -> str:
    """Messages' text (image parts left out: TRL's tool messages are text)."""
    parts = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            parts += [p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text"]
        elif content:
            parts.append(str(content))
    return "\n\n".join(p for p in parts if p)


def named_reward(env: str, name: str) -> Callable[[Any], float]:
    """`get_reward` by a name `train --reward` takes: the function scores the finished episode
    from the same fields train's rollout hands it (step rewards, success, the conversation)."""
    from envharness.integrations.trl.prompting import reward_functions

    known = reward_functions(env)
    if name not in known:
        raise ValueError(f"{env}: unknown reward {name!r}; choose from env, {', '.join(known)}")
    function = known[name]

    def score(environment: Any) -> float:
        episode = environment._finished_episode()
        value = function([message_text(episode.messages)], **_reward_fields(episode))[0] if episode else 0.0
        return 0.0 if value is None else float(value)

    score.__name__ = f"reward_{name}"
    return score


def _reward_fields(episode: HarnessRolloutResult) -> dict[str, list[Any]]:
    return {
        "messages": [episode.messages],
        "step_rewards": [
            [r for e in episode.tool_trace if (r := e.result.metadata.get("reward")) is not None]
        ],
        "env_reward": [episode.env_reward],
        "success": [episode.metrics.get("success")],
        "verify_metrics": [episode.verify.metrics if episode.verify is not None else {}],
    }


def reward_funcs(env: str, *names: str) -> list[Callable[..., list[float | None]]]:
    """More reward columns for `GRPOTrainer(reward_funcs=...)`, by the names `train --reward`
    takes: each scores the rollouts of `env`'s instances (None for other environments' rows,
    which TRL leaves out). `get_reward` is already a column: do not add it again here."""
    scorers = {name: named_reward(env, name) for name in names}
    out = []
    for name, scorer in scorers.items():

        def reward(
            completions: list[Any], environments: Sequence[Any] = (), _s: Any = scorer, **_: Any
        ) -> list:
            return [_s(e) if getattr(e, "_env", None) == env else None for e in environments]

        reward.__name__ = f"{env}_{name}"
        out.append(reward)
    return out


__all__ = ["named_reward", "reward_funcs"]
