"""The mix run (`--mix ENV:TASKS ...`): one server, prompt and rollout per environment, one
batch drawn across them (`integrations/trl/mix.py`); tasks are named ``env:task``.

`--opponent` seats the environments of the mix whose tasks are multi-player games (`resolve_mix`):
an opponent their server plays (`random`, `scripted`) rides on that server's options alone; a
model in the other seats (`self`, a model spec) makes that environment's share of the batch
play through the self-play or model-opponent rollout. The other environments play as ever."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from envharness.core.registry import ResolvedEnv
from envharness.harness.plan import PlanError, expand_tasks, resolve_mix
from envharness.integrations.trl.config import TrainConfig
from envharness.integrations.trl.errors import TrainSetupError
from envharness.integrations.trl.evaluate import evaluate_in_env
from envharness.integrations.trl.kinds.base import RunKind, RunParts, RunPlan
from envharness.integrations.trl.kinds.text import play_row
from envharness.integrations.trl.layers import Rollout
from envharness.integrations.trl.mix import MixedRollout, mix_key, mix_prompt, split_key
from envharness.integrations.trl.rewards import REWARD_FUNCS
from envharness.integrations.trl.servers import mix_clients

if TYPE_CHECKING:  # held_out.py loads transformers: the checks before a launch do without it
    from envharness.integrations.trl.held_out import EvaluateTask


class MixRun(RunKind):
    name = "mix"
    evaluates_held_out = True
    prompt_for = staticmethod(mix_prompt)
    seats_models = True

    @classmethod
    def applies(cls, config: TrainConfig, vision: bool) -> bool:
        return bool(config.mix)

    def resolve(self, config: TrainConfig) -> RunPlan:
        """The plan of the mix (`harness.plan.resolve_mix`: each environment a row with its own
        tasks, prompt and seats); the configuration's tasks and eval tasks become env:task
        names, and the first environment stands for the run where one is needed
        (train_config.json's `env`). Each server's options stay its own row's."""
        _refuse_single_env_options(config)
        try:
            play = resolve_mix(config.mix, config.opponent, config.seat)
            transfer = _transfer(config, {row.name: row.env for row in play.rows})
        except PlanError as exc:
            raise TrainSetupError(str(exc)) from None
        first = play.rows[0]  # its training prompt is recorded; each environment plays its own
        keys = [mix_key(row.name, task) for row in play.rows for task in row.tasks]
        config = dataclasses.replace(
            config, env=first.name, tasks=keys, eval_tasks=transfer, prompt=first.prompt
        )
        return RunPlan(config, play)

    def open(self, plan: RunPlan, client_factory: Callable[[], Any] | None) -> AbstractContextManager[Any]:
        envs = {row.name: row.env for row in plan.rows}
        return mix_clients(envs, {row.name: row.server_options for row in plan.rows})

    def rollout(self, parts: RunParts, clients: Any) -> Rollout:
        """Each environment's own rollout (`play_row`), prompt and parser, one batch across them."""
        return MixedRollout({row.name: play_row(parts, row, clients[row.name]) for row in parts.plan.rows})

    def reward_funcs(self, plan: RunPlan) -> list[Callable[..., Any]]:
        return [REWARD_FUNCS[name] for name in plan.config.rewards]

    def why_no_held_out(self, plan: RunPlan) -> str | None:
        """Held-out evaluation plays one agent alone: not where a model sits in other seats."""
        if plan.model_seats:
            return (
                f"--eval-every with --opponent {plan.model_seats[0].seats.client_opponent} in a mix: "
                "held-out evaluation plays one agent alone; leave out --eval-every"
            )
        return super().why_no_held_out(plan)

    def play_held_out(self, plan: RunPlan, tokenizer: Any, clients: Any) -> EvaluateTask:
        config = plan.config

        def evaluate_task(model: Any, key: str, seeds: list[int]) -> float:
            name, task = split_key(key)  # its environment's server, prompt and tasks
            return evaluate_in_env(
                model, tokenizer, clients[name], config, name, seeds=seeds, task=task, temperature=0.0
            )

        return evaluate_task


def _transfer(config: TrainConfig, envs: dict[str, ResolvedEnv]) -> list[str]:
    """`--eval-tasks` of a mix: env:task names of its environments (their servers are there)."""
    transfer = []
    for key in config.eval_tasks:
        name, task = split_key(key)
        if name not in envs or not task:
            raise TrainSetupError(
                f"--eval-tasks {key!r}: with --mix, name ENV:TASK of one of {', '.join(config.mix)}"
            )
        transfer += [mix_key(name, t) for t in expand_tasks(envs[name], [task], f"--eval-tasks {key}")]
    return transfer


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
