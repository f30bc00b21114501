"""Eval Protocol (PyPI `eval-protocol`) on envharness: a drop-in `OpenEnvRolloutProcessor`.

processor.py  the rollout processor (the seed's keywords, concurrent rows, timeouts)
env.py        connecting to environments without blocking the event loop
model.py      any envharness backend as the row's model
"""

from envharness.integrations.eval_protocol.processor import (
    STEP_REWARDS_SENTINEL,
    OpenEnvRolloutProcessor,
    read_step_rewards,
)

__all__ = ["STEP_REWARDS_SENTINEL", "OpenEnvRolloutProcessor", "read_step_rewards"]
