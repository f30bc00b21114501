"""`envharness check ENV`: a checker for environment authors, in the spirit of Gymnasium's `check_env`.

- `check_environment(env, options)`: the contract (the same seed replays the same episode,
  bad actions are answered in words and the session lives on, reset after done, the scripted
  policy wins, the task list is what the server accepts), as a `CheckReport`.
- `run_floor(env, options, tasks=...)`: the adversarial floor (random, noop, hostile and
  repeat policies, N episodes per task), as a `FloorReport`: a task one of them wins can be
  won by chance.

Environments are reached only through the registry (`core/registry.py`), as eval reaches them.
"""

from envharness.check.contract import check_environment, check_environment_async
from envharness.check.floor import POLICIES, CheckSetupError, run_floor, run_floor_async
from envharness.check.report import CheckReport, CheckResult, FloorEpisode, FloorReport

__all__ = [
    "POLICIES",
    "CheckReport",
    "CheckResult",
    "CheckSetupError",
    "FloorEpisode",
    "FloorReport",
    "check_environment",
    "check_environment_async",
    "run_floor",
    "run_floor_async",
]
