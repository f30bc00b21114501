"""The text run: a causal LM plays the environment's tasks through the harness's own loop, on
one server started on loopback, a running one, or a fleet."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from envharness.core.registry import ResolvedEnv
from envharness.integrations.trl.config import TrainConfig
from envharness.integrations.trl.errors import TrainSetupError
from envharness.integrations.trl.evaluate import evaluate
from envharness.integrations.trl.held_out import EvaluateTask
from envharness.integrations.trl.kinds.base import PlanRow, RunKind, RunParts, RunPlan
from envharness.integrations.trl.kinds.opponent import OpponentRollout
from envharness.integrations.trl.kinds.self_play import SelfPlayRollout
from envharness.integrations.trl.layers import Rollout
from envharness.integrations.trl.prompting import prompt_options, prompt_style
from envharness.integrations.trl.rollout import build_env_rollout_func
from envharness.integrations.trl.servers import env_clients


def resolve_env(config: TrainConfig) -> ResolvedEnv:
    """The run's environment, looked up once (a `TrainSetupError` in words if it cannot be)."""
    try:
        return config.resolve_env()
    except ValueError as exc:
        raise TrainSetupError(str(exc)) from None


def one_env_plan(config: TrainConfig, env: ResolvedEnv, prompt: str) -> RunPlan:
    """The plan of a run on one environment: its tasks (and `eval_tasks`) expanded from the
    environment's listing, and its prompt style chosen."""
    harness = env.require_harness()
    try:
        tasks = harness.task_list().expand(config.tasks or harness.default_tasks[:1], harness.check_task)
    except (ValueError, KeyError, ImportError) as exc:
        raise TrainSetupError(str(exc)) from None
    try:
        transfer = (
            harness.task_list().expand(config.eval_tasks, harness.check_task) if config.eval_tasks else []
        )
    except (ValueError, KeyError) as exc:
        raise TrainSetupError(f"--eval-tasks: {exc}") from None
    config = dataclasses.replace(config, tasks=tasks, eval_tasks=transfer, prompt=prompt)
    return RunPlan(config, (PlanRow(config.env, env, tuple(tasks), prompt),))


def play_row(parts: RunParts, row: PlanRow, clients: Any) -> Rollout:
    """The rollout of one environment of a plan, chosen by who sits in the other seats of its
    games: nobody or its server (the harness's own loop), the policy itself (self-play), or a
    frozen model. The one place this choice is made, for a single run and for a mix."""
    opponent = row.seats.client_opponent
    if opponent == "self":
        return SelfPlayRollout(parts, row, clients)
    if opponent is not None:
        return OpponentRollout(parts, row, clients)
    return build_env_rollout_func(
        row.env,
        clients,
        default_task=row.tasks[0],
        limits=parts.limits,
        records=parts.records,
        session_factory_kwargs=prompt_options(row.prompt, parts.tokenizer, row.env),
        backend_factory=parts.backend_factory,
    )


class TextRun(RunKind):
    name = "text"
    evaluates_held_out = True

    @classmethod
    def applies(cls, config: TrainConfig, vision: bool) -> bool:
        return not vision

    def resolve(self, config: TrainConfig) -> RunPlan:
        env = resolve_env(config)
        prompt = config.prompt or env.require_harness().train_prompt
        if prompt_style(prompt, env).vision:
            raise TrainSetupError(
                f"--prompt {prompt} shows screenshots: {config.model!r} is not a vision-language model"
            )
        return one_env_plan(config, env, prompt)

    def open(self, plan: RunPlan, client_factory: Callable[[], Any] | None) -> AbstractContextManager[Any]:
        if client_factory is not None:
            return contextlib.nullcontext(client_factory)
        config = plan.config
        return env_clients(
            plan.env,
            config.env_url,
            env_urls=config.env_urls,
            servers=config.servers,
            ray_address=config.ray_address,
            env_options=config.env_options,
        )

    def rollout(self, parts: RunParts, clients: Any) -> Rollout:
        (row,) = parts.plan.rows
        return play_row(parts, row, clients)

    def play_held_out(self, plan: RunPlan, tokenizer: Any, clients: Any) -> EvaluateTask:
        def evaluate_task(model: Any, task: str, seeds: list[int]) -> float:
            return evaluate(model, tokenizer, clients, plan.config, seeds, task=task, temperature=0.0)

        return evaluate_task
