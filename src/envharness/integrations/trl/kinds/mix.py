"""The mix run (`--mix ENV:TASKS ...`): one server, prompt and rollout per environment, one
batch drawn across them (`integrations/trl/mix.py`); tasks are named ``env:task``.

`--opponent` seats the environments of the mix whose tasks are multi-player games (`seat`):
an opponent their server plays (`random`, `scripted`) rides on that server's options alone; a
model in the other seats (`self`, a model spec) makes that environment's share of the batch
play through the self-play or model-opponent rollout. The other environments play as ever."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from envharness.core.registry import ResolvedEnv, resolve_environment
from envharness.harness.opponents import SeatPlan, plan_mix_seats
from envharness.integrations.trl.config import TrainConfig
from envharness.integrations.trl.errors import TrainSetupError
from envharness.integrations.trl.evaluate import evaluate_in_env
from envharness.integrations.trl.held_out import EvaluateTask
from envharness.integrations.trl.kinds.base import RunKind, RunParts
from envharness.integrations.trl.kinds.opponent import build_opponent_rollout
from envharness.integrations.trl.kinds.self_play import build_self_play_rollout
from envharness.integrations.trl.mix import mix_key, mix_prompt, mixed_rollout, split_key
from envharness.integrations.trl.prompting import prompt_options, train_prompt
from envharness.integrations.trl.rewards import REWARD_FUNCS
from envharness.integrations.trl.rollout import RolloutFunc, build_env_rollout_func
from envharness.integrations.trl.servers import mix_clients


class MixRun(RunKind):
    name = "mix"
    evaluates_held_out = True
    prompt_for = staticmethod(mix_prompt)
    seats_models = True

    def __init__(self) -> None:
        self.envs: dict[str, ResolvedEnv] = {}
        #: The seating of each environment `--opponent` applies to (`seat`).
        self.plans: dict[str, SeatPlan] = {}

    @classmethod
    def applies(cls, config: TrainConfig, vision: bool) -> bool:
        return bool(config.mix)

    def resolve(self, config: TrainConfig) -> tuple[TrainConfig, ResolvedEnv]:
        """Each environment resolved once; tasks and eval tasks become env:task names, and the
        first environment stands for the run where one is needed (train_config.json's `env`)."""
        for name in config.mix:
            try:
                self.envs[name] = resolve_environment(name, {})
                self.envs[name].require_harness()
            except (KeyError, ImportError, AttributeError, ValueError) as exc:
                raise TrainSetupError(f"--mix {name}: {exc}") from None
        _refuse_single_env_options(config)
        keys = [
            key for name, tasks in config.mix.items() for key in self._expand(name, tasks, f"--mix {name}")
        ]
        transfer = []
        for key in config.eval_tasks:  # env:task, of an environment of the mix (its server is there)
            name, task = split_key(key)
            if name not in config.mix or not task:
                raise TrainSetupError(
                    f"--eval-tasks {key!r}: with --mix, name ENV:TASK of one of {', '.join(config.mix)}"
                )
            transfer += self._expand(name, [task], f"--eval-tasks {key}")
        first = next(iter(self.envs))  # its training prompt is recorded; each environment plays its own
        config = dataclasses.replace(
            config, env=first, tasks=keys, eval_tasks=transfer, prompt=train_prompt(self.envs[first])
        )
        return config, self.envs[first]

    def _expand(self, name: str, tasks: list[str], what: str) -> list[str]:
        harness = self.envs[name].require_harness()
        try:
            return [mix_key(name, t) for t in harness.task_list().expand(tasks, harness.check_task)]
        except (ValueError, KeyError) as exc:
            raise TrainSetupError(f"{what}: {exc}") from None

    def seat(self, config: TrainConfig) -> dict[str, SeatPlan]:
        """`--opponent` / `--seat` for each environment of the mix with multi-player tasks
        (`plan_mix_seats`); ValueError in words where no environment has one."""
        tasks: dict[str, list[str]] = {name: [] for name in self.envs}
        for key in config.tasks:
            name, task = split_key(key)
            tasks[name].append(task)
        harnesses = {name: env.require_harness() for name, env in self.envs.items()}
        self.plans = plan_mix_seats(harnesses, tasks, config.opponent, config.seat)
        return self.plans

    def open(
        self, config: TrainConfig, env: ResolvedEnv, client_factory: Callable[[], Any] | None
    ) -> AbstractContextManager[Any]:
        return mix_clients(self.envs, {name: dict(p.server_options) for name, p in self.plans.items()})

    def rollout(self, parts: RunParts, clients: Any) -> RolloutFunc:
        """Each environment's own rollout, prompt and parser, one batch across them."""
        rollouts = {}
        for name, tasks in parts.config.mix.items():
            env, seated = self.envs[name], self.plans.get(name, SeatPlan()).client_opponent
            if seated is not None:  # a model in the other seats: its game's rollout
                build = build_self_play_rollout if seated == "self" else build_opponent_rollout
                game = next(t for n, t in map(split_key, parts.config.tasks) if n == name)
                rollouts[name] = build(parts, env, clients[name], default_task=game, prompt=train_prompt(env))
                continue
            rollouts[name] = build_env_rollout_func(
                env,
                clients[name],
                default_task=tasks[0],
                records=parts.records,
                session_factory_kwargs=prompt_options(train_prompt(env), parts.tokenizer, env),
                limits=parts.limits,
                backend_factory=parts.backend_factory,
            )
        rollout = mixed_rollout(rollouts)
        rollout.records = parts.records  # type: ignore[attr-defined]
        return rollout

    def reward_funcs(self, config: TrainConfig, env: ResolvedEnv) -> list[Callable[..., Any]]:
        return [REWARD_FUNCS[name] for name in config.rewards]

    def evaluate_task(self, config: TrainConfig, tokenizer: Any, clients: Any) -> EvaluateTask | None:
        def evaluate_task(model: Any, key: str, seeds: list[int]) -> float:
            name, task = split_key(key)  # its environment's server, prompt and tasks
            return evaluate_in_env(
                model, tokenizer, clients[name], config, name, seeds=seeds, task=task, temperature=0.0
            )

        return evaluate_task


def _refuse_single_env_options(config: TrainConfig) -> None:
    refused = {
        "--tasks": config.tasks,
        "--agent": config.agent,
        "--env-url": config.env_url,
        "--env-urls/--servers": config.env_urls or config.servers,
        "--prompt": config.prompt,
        "--env-option": config.env_options,
    }
    given = [name for name, value in refused.items() if value]
    if given:
        raise TrainSetupError(
            f"--mix trains with each environment's own server and prompt; leave out {', '.join(given)}"
        )
    unknown = [r for r in config.rewards if r not in REWARD_FUNCS]
    if unknown:
        raise TrainSetupError(
            f"--mix: reward(s) {', '.join(unknown)} are one environment's; a mix takes {', '.join(REWARD_FUNCS)}"
        )
