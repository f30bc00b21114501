"""TRL (GRPO) on envharness: the rollout function, reward functions, a tool environment for
TRL's `environment_factory`, and the training loop behind `envharness train`.

    rollout.py      `build_env_rollout_func` / `build_trl_rollout_func` (TRL's `rollout_func`)
    layers.py       `Rollout` (a rollout_func with records, metrics, close) and the `Layer`s around it
    rewards.py      reward functions over the episodes' step rewards
    environment.py  `environment_factory(env, ...)`: any environment for `GRPOTrainer(environment_factory=...)`
    training.py     `train()`: what `envharness train` runs, the same steps for every kind of run
    config.py       `TrainConfig`: each field one option of `envharness train`
    checks.py       `check_config`: every setting checked, the kind of run picked (without
                    loading transformers or TRL: the parent of `--processes N` runs it)
    kinds/          the kinds of run (text, vision, mix, agent), one `RunKind` each
    callbacks.py    progress, time budget, reward curve, the step boundary a stop saves at

The names users import live here and in their modules; `training` loads TRL and torch, so
import it only to train (it offers `train`, `TrainConfig`, `TrainResult` and `TrainSetupError`;
the names it used to re-export warn and say their module, `envharness/_deprecated.py`).
"""

from envharness._deprecated import deprecated_names
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


# Names from before environments were generic, kept for old callers with a warning.
__getattr__ = deprecated_names(__name__)
