"""The agent run (`--agent MODULE:FUNCTION`): an agent that owns its loop plays through the
environment server's `/mcp` and the policy endpoint, which serves the model being trained
(`integrations/trl/agent_rollout.py`)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from envharness.core.registry import ResolvedEnv
from envharness.integrations.trl.agent_rollout import build_agent_rollout_func
from envharness.integrations.trl.config import TrainConfig
from envharness.integrations.trl.errors import TrainSetupError
from envharness.integrations.trl.kinds.base import RunKind, RunParts
from envharness.integrations.trl.kinds.text import expand_tasks, resolve_env
from envharness.integrations.trl.prompting import train_prompt
from envharness.integrations.trl.rollout import RolloutFunc
from envharness.integrations.trl.servers import agent_env_url
from envharness.policy.agents import load_agent


class AgentRun(RunKind):
    name = "agent"

    @classmethod
    def applies(cls, config: TrainConfig, vision: bool) -> bool:
        return bool(config.agent)

    def resolve(self, config: TrainConfig) -> tuple[TrainConfig, ResolvedEnv]:
        env = resolve_env(config)
        return expand_tasks(config, env, config.prompt or train_prompt(env)), env

    def open(
        self, config: TrainConfig, env: ResolvedEnv, client_factory: Callable[[], Any] | None
    ) -> AbstractContextManager[Any]:
        return agent_env_url(env, config.env_url, config.env_options)  # the agent needs the server's URL

    def rollout(self, parts: RunParts, clients: Any) -> RolloutFunc:
        try:
            agent = load_agent(parts.config.agent or "")
        except (ValueError, ImportError, AttributeError) as exc:
            raise TrainSetupError(str(exc)) from None
        rollout = build_agent_rollout_func(
            agent,
            env_url=clients,
            backend_factory=parts.backend_factory,
            agent_kwargs={"max_turns": parts.config.max_turns},
            timeout_s=parts.config.agent_timeout_s,
            records=parts.records,
        )
        parts.stack.callback(rollout.close)  # type: ignore[attr-defined]  # the policy endpoint
        return rollout
