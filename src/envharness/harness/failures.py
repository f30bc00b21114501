"""Infrastructure failures: an episode that ended because its server went away is not a
reward of 0.

When an environment server dies, hangs or is taken out mid-episode, the policy did
nothing wrong: scoring that episode as reward 0 teaches it to avoid whatever it was doing
(one public report had 1,172 of 1,280 rollouts land in GRPO that way). Such episodes are
flagged `metrics["infra_failure"] = True`; rollout functions zero their `env_mask` and
count them apart, and eval tables leave them out of the success rate.
"""

from __future__ import annotations

from typing import Any

#: Server error codes that say "the server or the session is gone", not "the action was bad".
INFRA_ERROR_CODES = frozenset(
    {"SHUTTING_DOWN", "SESSION_ERROR", "CAPACITY_REACHED", "FACTORY_ERROR", "IDLE_TIMEOUT"}
)

#: The metrics key (in results, episode records, `verify_metrics`) that flags one.
INFRA_FAILURE_KEY = "infra_failure"


class InfrastructureError(ConnectionError):
    """The environment's infrastructure failed (a server lost mid-episode, none available),
    not the episode: counted apart from a real reward of 0."""


def is_infrastructure_error(exc: BaseException) -> bool:
    """True for a lost connection, a server shutting down or refusing the session, or
    anything marked `infrastructure = True`. A model's own error or a bad action is not."""
    if isinstance(exc, ConnectionError) or getattr(exc, "infrastructure", False):
        return True
    return str(getattr(exc, "code", "")) in INFRA_ERROR_CODES


#: The metrics key that flags an episode ended by the environment's own bug: its `step` raised
#: something other than `InvalidAction` (`core/errors.py`). Not the agent's failure either.
ENV_ERROR_KEY = "env_error"


def note_failure(metrics: dict[str, Any], exc: BaseException) -> None:
    """Flag `metrics` when `exc` is an infrastructure failure or the environment's bug."""
    if is_infrastructure_error(exc):
        metrics[INFRA_FAILURE_KEY] = True
    elif str(getattr(exc, "code", "")) == "EXECUTION_ERROR" and not isinstance(exc, ValueError):
        metrics[ENV_ERROR_KEY] = True


def is_env_error(record: Any) -> bool:
    """Whether an episode (a `HarnessRolloutResult` or a record dict) ended on the environment's bug."""
    metrics = record.get("metrics") if isinstance(record, dict) else getattr(record, "metrics", None)
    return bool((metrics or {}).get(ENV_ERROR_KEY))


def is_infra_failure(record: Any) -> bool:
    """Whether an episode (a `HarnessRolloutResult` or a record dict) failed for infrastructure."""
    metrics = record.get("metrics") if isinstance(record, dict) else getattr(record, "metrics", None)
    return bool((metrics or {}).get(INFRA_FAILURE_KEY))
