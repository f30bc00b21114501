"""`RunKind`: one kind of training run (text, vision, a mix, an agent's own loop) as one
implementation of one small interface, as httpx's transports are one interface with several
implementations. `train()` asks the kind, never tests for a mode.

A kind says:

- `applies(config, vision)`: whether it is the kind for this configuration (`pick_run` asks
  each of `RUN_KINDS` in order);
- `resolve(config)`: its own checks and defaults, and what the run plays: a frozen `RunPlan`
  (the new configuration, and the plan of play `harness/plan.py` resolves, the one `eval` and
  `sft` run too: a `PlanRow` per environment, seated) that every later call receives; the
  kind itself keeps no state;
- `load_model(config, placement)`: the model and its tokenizer or processor;
- `open(plan, client_factory)`: the servers or clients its episodes play on, for the
  duration of a `with` block;
- `rollout(parts, clients)`: TRL's `rollout_func`, a `Rollout` (`layers.py`);
- `trainer_class()`, `reward_funcs(plan)`, `prompt_for`: the trainer, its rewards, and the
  dataset prompt of one group;
- `why_no_held_out(plan)`: why `--eval-every` cannot play this plan (None: it can), and
  `evaluate_task(plan, tokenizer, clients)`: how it plays a held-out task, None exactly
  where `why_no_held_out` gives a reason.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from envharness.core.registry import ResolvedEnv
from envharness.harness.plan import PlanRow, PlayPlan
from envharness.harness.records import EpisodeRecordWriter
from envharness.harness.types import HarnessRunLimits
from envharness.integrations.trl.config import TrainConfig
from envharness.integrations.trl.layers import Rollout
from envharness.integrations.trl.loading import load_model
from envharness.integrations.trl.prompting import reward_functions
from envharness.integrations.trl.rollout import task_prompt

if TYPE_CHECKING:  # held_out.py loads transformers: the checks before a launch do without it
    from envharness.integrations.trl.held_out import EvaluateTask


@dataclass(frozen=True)
class RunPlan:
    """What a run plays, resolved once (`RunKind.resolve`): the frozen configuration and the
    plan of play (`harness/plan.py`: one row per environment, seated)."""

    config: TrainConfig
    play: PlayPlan

    @property
    def rows(self) -> tuple[PlanRow, ...]:
        return self.play.rows

    @property
    def env(self) -> ResolvedEnv:
        """The run's environment (a mix's first: the one train_config.json names)."""
        return self.play.env

    @property
    def model_seats(self) -> list[PlanRow]:
        """The rows whose other seats a model plays through the run's client (`self`, a spec)."""
        return self.play.model_seats


@dataclass(frozen=True)
class RunParts:
    """What `train()` hands a kind to build its rollout with."""

    plan: RunPlan
    tokenizer: Any
    #: Every episode of every step goes here (`episodes.jsonl`).
    records: EpisodeRecordWriter
    #: trainer -> the model backend the rollout samples with (timed: `StepClock`).
    backend_factory: Callable[..., Any]

    @property
    def config(self) -> TrainConfig:
        return self.plan.config

    @property
    def env(self) -> ResolvedEnv:
        return self.plan.env

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
    #: Whether `--eval-every` can play its held-out tasks (`why_no_held_out`).
    evaluates_held_out = False
    #: The dataset prompt of one group: (task, seed) -> the prompt the rollout parses.
    prompt_for: Callable[[str, int | None], str] = staticmethod(task_prompt)

    @classmethod
    def applies(cls, config: TrainConfig, vision: bool) -> bool:
        raise NotImplementedError

    def resolve(self, config: TrainConfig) -> RunPlan:
        raise NotImplementedError

    def load_model(self, config: TrainConfig, placement: Any) -> tuple[Any, Any]:
        return load_model(config.model, placement)

    def open(self, plan: RunPlan, client_factory: Callable[[], Any] | None) -> AbstractContextManager[Any]:
        raise NotImplementedError

    def rollout(self, parts: RunParts, clients: Any) -> Rollout:
        raise NotImplementedError

    def trainer_class(self) -> type:
        from trl import GRPOTrainer  # loaded when a run starts: the parent of --processes checks without it

        return GRPOTrainer

    def reward_funcs(self, plan: RunPlan) -> list[Callable[..., Any]]:
        known = reward_functions(plan.env)
        return [known[name] for name in plan.config.rewards]

    def why_no_held_out(self, plan: RunPlan) -> str | None:
        """Why `--eval-every` cannot play this plan's held-out tasks, in words (None: it can)."""
        if self.evaluates_held_out:
            return None
        return (
            f"--eval-every is not available for a run of kind '{self.name}': it evaluates text policies "
            "the harness plays alone (not --agent, vision or --opponent with a model)"
        )

    def evaluate_task(self, plan: RunPlan, tokenizer: Any, clients: Any) -> EvaluateTask | None:
        """How `--eval-every` plays one held-out task; None where `why_no_held_out` says why not."""
        if self.why_no_held_out(plan) is not None:
            return None
        return self.play_held_out(plan, tokenizer, clients)

    def play_held_out(self, plan: RunPlan, tokenizer: Any, clients: Any) -> EvaluateTask:
        raise NotImplementedError
