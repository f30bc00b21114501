"""`RunKind`: one kind of training run (text, vision, a mix, an agent's own loop) as one
implementation of one small interface, as httpx's transports are one interface with several
implementations. `train()` asks the kind, never tests for a mode.

A kind says:

- `applies(config, vision)`: whether it is the kind for this configuration (`pick_run` asks
  each of `RUN_KINDS` in order);
- `resolve(config)`: its own checks and defaults, and the environment the run plays (a new,
  frozen configuration; the generic checks are `checks.check_config`'s);
- `load_model(config, placement)`: the model and its tokenizer or processor;
- `open(config, env, client_factory)`: the servers or clients its episodes play on, for the
  duration of a `with` block;
- `rollout(parts, clients)`: TRL's `rollout_func`;
- `trainer_class()`, `reward_funcs(config, env)`, `prompt_for`: the trainer, its rewards, and
  the dataset prompt of one group;
- `evaluate_task(config, tokenizer, clients)`: how `--eval-every` plays a held-out task, or
  None where the kind cannot (the check then refuses `--eval-every` in words).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from trl import GRPOTrainer

from envharness.core.registry import ResolvedEnv
from envharness.harness.records import EpisodeRecordWriter
from envharness.harness.types import HarnessRunLimits
from envharness.integrations.trl.config import TrainConfig
from envharness.integrations.trl.held_out import EvaluateTask
from envharness.integrations.trl.loading import load_model
from envharness.integrations.trl.prompting import reward_functions
from envharness.integrations.trl.rollout import RolloutFunc, task_prompt


@dataclass(frozen=True)
class RunParts:
    """What `train()` hands a kind to build its rollout with."""

    config: TrainConfig
    env: ResolvedEnv
    tokenizer: Any
    #: Every episode of every step goes here (`episodes.jsonl`).
    records: EpisodeRecordWriter
    #: trainer -> the model backend the rollout samples with (timed: `StepTimer`).
    backend_factory: Callable[..., Any]
    #: What the rollout leaves open (an agent's policy endpoint), closed after training.
    stack: contextlib.ExitStack

    @property
    def limits(self) -> HarnessRunLimits:
        return HarnessRunLimits(max_turns=self.config.max_turns)


class RunKind:
    """The interface every kind of run implements; the defaults are the text run's."""

    #: Its name in words (error messages, the docs).
    name = "text"
    #: Whether it trains vision-language models (screenshots in the prompts).
    trains_vision = False
    #: Whether it plays a model in the other seats of a game (`--opponent self|<model>`).
    seats_models = False
    #: Whether `--eval-every` can play its held-out tasks (`evaluate_task`).
    evaluates_held_out = False
    #: The dataset prompt of one group: (task, seed) -> the prompt the rollout parses.
    prompt_for: Callable[[str, int | None], str] = staticmethod(task_prompt)

    @classmethod
    def applies(cls, config: TrainConfig, vision: bool) -> bool:
        raise NotImplementedError

    def resolve(self, config: TrainConfig) -> tuple[TrainConfig, ResolvedEnv]:
        raise NotImplementedError

    def load_model(self, config: TrainConfig, placement: Any) -> tuple[Any, Any]:
        return load_model(config.model, placement)

    def open(
        self, config: TrainConfig, env: ResolvedEnv, client_factory: Callable[[], Any] | None
    ) -> AbstractContextManager[Any]:
        raise NotImplementedError

    def rollout(self, parts: RunParts, clients: Any) -> RolloutFunc:
        raise NotImplementedError

    def trainer_class(self) -> type:
        return GRPOTrainer

    def reward_funcs(self, config: TrainConfig, env: ResolvedEnv) -> list[Callable[..., Any]]:
        known = reward_functions(env)
        return [known[name] for name in config.rewards]

    def evaluate_task(self, config: TrainConfig, tokenizer: Any, clients: Any) -> EvaluateTask | None:
        return None
