"""Agent rollouts as OpenEnv 0.10 harness sessions, for TRL 1.16's async GRPO harness worker.

TRL's `trl.experimental.async_grpo.HarnessRolloutWorker(harness_session_factory=...)` trains
loop-owning agents through OpenEnv's contract: it calls `harness_session_factory(sampling=...)`
once, then per rollout `factory.create(prompt, seed=, episode_id=)`, waits on the session
(`TrainableSession.wait_for_completion`), takes its `TrainingTrace` (`fetch_training_trace`:
every call with its exact tokens and a loss mask over prompt + completion; TRL forks rewritten
histories itself) and its reward (`verify(...)`, forwarded from the environment's tagged
`/mcp`). `AgentSessionFactory` is that factory for any agent `policy/agents.py` runs:

    factory = functools.partial(AgentSessionFactory, agent, backend=load_backend("trl-vllm:http://127.0.0.1:8001"),
                                env_url="http://127.0.0.1:8000")
    worker = HarnessRolloutWorker(harness_session_factory=factory, ...)

Each session runs its agent on a thread of its own (OpenEnv sessions are synchronous).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

from openenv.core.harness import (
    ResourceSession,
    ResourceSessionFactory,
    ToolResult,
    TrainingTrace,
    VerifyResult,
)

from envharness.integrations.trl.rollout import parse_task_prompt
from envharness.policy.agents import AgentResult, run_agent
from envharness.policy.samples import training_trace_entries
from envharness.policy.server import PolicyServer


class AgentSession(ResourceSession):
    """One agent rollout in flight; satisfies OpenEnv's `ResourceSession` and `TrainableSession`."""

    def __init__(self, factory: AgentSessionFactory, task: Any, seed: int | None) -> None:
        self._factory = factory
        self.result: AgentResult | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(
            target=self._run, args=(task, seed), name="envharness-agent", daemon=True
        )
        self._thread.start()

    def _run(self, task: Any, seed: int | None) -> None:
        f = self._factory
        try:
            self.result = asyncio.run(
                run_agent(
                    f.agent,
                    policy=f.policy,
                    env_url=f.env_url,
                    task=task,
                    seed=seed,
                    timeout_s=f.timeout_s,
                    env_token=f.env_token,
                )
            )
        except BaseException as exc:  # re-raised where the worker waits
            self._error = exc

    # -- TrainableSession --
    def wait_for_completion(self, timeout_s: float | None = None) -> int:
        """0 when the agent finished, 1 when it raised (its calls so far stay trainable)."""
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            raise TimeoutError(f"the agent did not finish within {timeout_s} s")
        if self._error is not None:
            raise self._error
        return 0 if self.result is not None and self.result.error is None else 1

    def fetch_training_trace(self) -> TrainingTrace:
        self.wait_for_completion()
        return TrainingTrace.from_entries(training_trace_entries(self.result.trace))

    # -- ResourceSession: the agent brings its own tools and messages --
    def initial_messages(self) -> list[dict[str, Any]]:
        return []

    def list_tools(self) -> list[Any]:
        return []

    def call_tool(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        return ToolResult(error=f"{name}: this agent calls its tools itself, through the environment's /mcp")

    def verify(self, transcript: list[dict[str, Any]], final_state: Any | None = None) -> VerifyResult:
        """The environment's reward for the rollout (what its tagged MCP session earned)."""
        self.wait_for_completion()
        outcome = self.result.outcome
        reward = outcome.get("reward")
        return VerifyResult(
            env_reward=None if reward is None else float(reward),
            done=bool(outcome.get("done")),
            metrics={
                "forks": self.result.trace.forks,
                "fork_tokens": self.result.trace.fork_tokens,
                "error": self.result.error,
            },
        )

    def close(self) -> None:
        if self.result is not None:
            self._factory.policy.store.discard(self.result.trace.rollout_id)


class AgentSessionFactory(ResourceSessionFactory):
    """OpenEnv's `ResourceSessionFactory` over one policy endpoint and one environment server.

    `sampling` (what TRL's worker passes: its training temperature, top-p, ...) is forced on
    every call whatever the agent asks, so the sampled logprobs are the ones TRL's loss uses.
    """

    def __init__(
        self,
        agent: Callable[..., Any],
        *,
        backend: Any,
        env_url: str,
        sampling: Any = None,
        timeout_s: float | None = None,
        env_token: str | None = None,
    ) -> None:
        self.agent, self.env_url, self.timeout_s, self.env_token = agent, env_url, timeout_s, env_token
        self.policy = PolicyServer(backend, sampling=_sampling_dict(sampling))

    def create(self, task: Any, seed: int | None = None, episode_id: str | None = None) -> AgentSession:
        name, prompt_seed = parse_task_prompt(task)
        return AgentSession(self, name, prompt_seed if prompt_seed is not None else seed)

    def close(self) -> None:
        self.policy.close()


def _sampling_dict(sampling: Any) -> dict[str, Any]:
    """OpenEnv's training sampling (a mapping or an object with attributes) as endpoint settings."""
    if sampling is None:
        return {}
    if not isinstance(sampling, dict):
        sampling = {
            k: getattr(sampling, k)
            for k in ("temperature", "top_p", "top_k", "max_tokens")
            if hasattr(sampling, k)
        }
    return {
        k: v
        for k, v in sampling.items()
        if k in ("temperature", "top_p", "top_k", "max_tokens") and v is not None
    }
