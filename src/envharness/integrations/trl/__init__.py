"""TRL (GRPO) on envharness: the rollout function, reward functions, a tool environment for
TRL's `environment_factory`, and the training loop behind `envharness train`.

    rollout.py      `build_env_rollout_func` / `build_trl_rollout_func` (TRL's `rollout_func`)
    layers.py       `Rollout` (a rollout_func with records, metrics, close) and the `Layer`s around it
    rewards.py      reward functions over the episodes' step rewards
    environment.py  `environment_factory(env, ...)`: any environment for `GRPOTrainer(environment_factory=...)`
    training.py     `train()`: what `envharness train` runs, the same steps for every kind of run
    config.py       `TrainConfig`: each field one option of `envharness train`
    checks.py       `check_config`: every setting checked, the kind of run picked
    kinds/          the kinds of run (text, vision, mix, agent), one `RunKind` each
    callbacks.py    progress, time budget, reward curve

The names users import live here; `training` and `environment` load TRL and torch, so
import them from their modules (`training` re-exports what moved out of it).
"""

from envharness.integrations.trl.layers import FunctionRollout, Layer, Rollout
from envharness.integrations.trl.rewards import (
    REWARD_FUNCS,
    reward_max,
    reward_mean,
    reward_success,
    reward_sum,
)
from envharness.integrations.trl.rollout import (
    TaskPromptSessionFactory,
    TRLVLLMGenerationBackend,
    build_env_rollout_func,
    build_trl_rollout_func,
    parse_task_prompt,
    task_dataset,
    task_prompt,
    trainer_backend,
    trainer_sampling,
)

__all__ = [
    "FunctionRollout",
    "Layer",
    "Rollout",
    "REWARD_FUNCS",
    "reward_max",
    "reward_mean",
    "reward_success",
    "reward_sum",
    "TaskPromptSessionFactory",
    "TRLVLLMGenerationBackend",
    "build_env_rollout_func",
    "build_trl_rollout_func",
    "parse_task_prompt",
    "task_dataset",
    "task_prompt",
    "trainer_backend",
    "trainer_sampling",
]


def __getattr__(name: str) -> object:
    """Names from before environments were generic (`compat.py`), still importable from here."""
    import importlib

    return importlib.import_module("envharness.integrations.trl.compat").deprecated(__name__, name)
