"""The text run: a causal LM plays the environment's tasks through the harness's own loop, on
one server started on loopback, a running one, or a fleet."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from envharness.harness.plan import TRAINING, PlanError, PlanRow, expand_tasks, resolve_plan
from envharness.integrations.trl.config import TrainConfig
from envharness.integrations.trl.errors import TrainSetupError
from envharness.integrations.trl.evaluate import evaluate
from envharness.integrations.trl.kinds.base import RunKind, RunParts, RunPlan
from envharness.integrations.trl.kinds.opponent import OpponentRollout
from envharness.integrations.trl.kinds.self_play import SelfPlayRollout
from envharness.integrations.trl.layers import Rollout
from envharness.integrations.trl.prompting import prompt_options, prompt_style
from envharness.integrations.trl.rollout import build_env_rollout_func
from envharness.integrations.trl.servers import env_clients

if TYPE_CHECKING:  # held_out.py loads transformers: the checks before a launch do without it
    from envharness.integrations.trl.held_out import EvaluateTask


def one_env_plan(config: TrainConfig, prompt: str = "") -> RunPlan:
    """The plan of a run on one environment (`harness.plan.resolve_plan`: its tasks expanded,
    its seats planned, `prompt` or the group's or the training prompt style) and the
    configuration it resolves to: tasks and `eval_tasks` expanded, an opponent its server
    plays joined to the server's options."""
    running = bool(config.env_url or config.env_urls)
    try:
        play = resolve_plan(config, TRAINING, running=running, prompt=prompt)
        transfer = expand_tasks(play.env, config.eval_tasks, "--eval-tasks") if config.eval_tasks else []
    except PlanError as exc:
        raise TrainSetupError(str(exc)) from None
    (row,) = play.rows
    config = dataclasses.replace(
        config, tasks=list(row.tasks), eval_tasks=transfer, prompt=row.prompt, env_options=row.server_options
    )
    return RunPlan(config, play)


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
        plan = one_env_plan(config)
        if prompt_style(plan.config.prompt, plan.env).vision:
            raise TrainSetupError(
                f"--prompt {plan.config.prompt} shows screenshots: {config.model!r} is not a vision-language model"
            )
        return plan

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
