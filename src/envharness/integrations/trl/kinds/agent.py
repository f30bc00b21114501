"""The agent run (`--agent MODULE:FUNCTION`): an agent that owns its loop plays through the
environment server's `/mcp` and the policy endpoint, which serves the model being trained
(`integrations/trl/agent_rollout.py`)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from envharness.integrations.trl.agent_rollout import build_agent_rollout_func
from envharness.integrations.trl.config import TrainConfig
from envharness.integrations.trl.errors import TrainSetupError
from envharness.integrations.trl.kinds.base import RunKind, RunParts, RunPlan
from envharness.integrations.trl.kinds.text import one_env_plan
from envharness.integrations.trl.layers import Rollout
from envharness.integrations.trl.servers import agent_env_url
from envharness.policy.agents import load_agent


class AgentRun(RunKind):
    name = "agent"

    @classmethod
    def applies(cls, config: TrainConfig, vision: bool) -> bool:
        return bool(config.agent)

    def resolve(self, config: TrainConfig) -> RunPlan:
        return one_env_plan(config)

    def open(self, plan: RunPlan, client_factory: Callable[[], Any] | None) -> AbstractContextManager[Any]:
        config = plan.config
        return agent_env_url(plan.env, config.env_url, config.env_options)  # the agent needs the server's URL

    def rollout(self, parts: RunParts, clients: Any) -> Rollout:
        """The agent's rollout; its `close()` stops the policy endpoint."""
        try:
            agent = load_agent(parts.config.agent or "")
        except (ValueError, ImportError, AttributeError) as exc:
            raise TrainSetupError(str(exc)) from None
        return build_agent_rollout_func(
            agent,
            env_url=clients,
            backend_factory=parts.backend_factory,
            agent_kwargs={"max_turns": parts.config.max_turns},
            timeout_s=parts.config.agent_timeout_s,
            records=parts.records,
        )
