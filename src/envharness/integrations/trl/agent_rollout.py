"""TRL GRPO for agents that own their loop: `build_agent_rollout_func(agent, env_url=...)`.

    rollout_func = build_agent_rollout_func(load_agent("examples/openai_mcp_agent/agent.py:play"), env_url=env.base_url)
    trainer = GRPOTrainer(model=model, processing_class=tokenizer, rollout_func=rollout_func,
                          reward_funcs=[reward_success], train_dataset=task_dataset(["click-test"], 64), ...)

Each call serves the trainer's model (`trainer_backend`: the model being trained, or TRL's
vLLM) through the policy endpoint (`policy/`), sampling at the trainer's settings whatever the
agent asks, and runs one copy of the agent per prompt, concurrently (`max_concurrency`),
each on its own rollout id against the endpoint and the environment's `/mcp`
(`policy/agents.py`). Each rollout becomes one row (`policy/samples.py`): the exact tokens
(env_mask 1 on the model's, 0 on what the agent and its tools added), the environment's
reward (`env_reward`, `step_rewards`, `success`, as `build_trl_rollout_func` gives, so the
same reward functions apply), and in `verify_metrics` the forks and tokens left out.
`rollout_func.close()` stops the endpoint; `rollout_func.metrics` counts the last call's forks
and agent timeouts.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from envharness.core.concurrency import run_coroutine_sync
from envharness.harness.records import EpisodeRecordWriter
from envharness.harness.rollout import rollout_metrics, rollout_outputs
from envharness.harness.success import judge
from envharness.harness.types import HarnessRolloutResult, VerifyResult
from envharness.integrations.trl.layers import Rollout
from envharness.integrations.trl.rollout import (
    parse_task_prompt,
    trainer_backend,
    trainer_sampling,
    trainer_step,
)
from envharness.policy.agents import AgentResult, run_agent
from envharness.policy.samples import trace_sample
from envharness.policy.server import PolicyServer

log = logging.getLogger(__name__)
#: How long one agent may take for its rollout before it is cancelled (train --agent-timeout).
DEFAULT_AGENT_TIMEOUT_S = 600.0


def agent_episode(result: AgentResult) -> HarnessRolloutResult:
    """An agent rollout in the harness's episode form (tokens, reward, verify metrics, records)."""
    sample = trace_sample(result.trace)
    outcome = result.outcome
    reward = float(outcome.get("reward") or 0.0)
    metrics = {
        **sample.metrics,
        **judge(reward).metrics(),  # the full score, as everywhere (`harness/success.py`)
        "done": bool(outcome.get("done")),
        "tool_calls": int(outcome.get("tool_calls") or 0),
        "tool_errors": int(outcome.get("tool_errors") or 0),
        "agent_seconds": round(result.seconds, 3),
        "agent_timeout": result.timed_out,
    }
    last = result.trace.turns[-1] if result.trace.turns else None
    messages = [*last.messages, {"role": "assistant", "content": last.text}] if last is not None else []
    return HarnessRolloutResult(
        messages=messages,
        done=bool(outcome.get("done")),
        metrics=dict(sample.metrics),
        prompt_ids=sample.prompt_ids,
        completion_ids=sample.completion_ids,
        logprobs=sample.logprobs,
        env_mask=sample.env_mask,
        images=sample.images,
        image_token_counts=sample.image_token_counts,
        task=result.trace.metadata.get("task"),
        seed=result.trace.metadata.get("seed"),
        episode_id=result.trace.rollout_id,
        env_reward=reward,
        verify=VerifyResult(env_reward=reward, done=bool(outcome.get("done")), metrics=metrics),
        error=result.error,
        timings={"agent_s": result.seconds},
    )


def _log_failures(results: list[AgentResult]) -> None:
    for r in results:
        if r.error:
            log.warning(
                "agent rollout %s (task %s, seed %s) failed: %s",
                r.trace.rollout_id,
                r.trace.metadata.get("task"),
                r.trace.metadata.get("seed"),
                r.error,
            )


class AgentRollout(Rollout):
    """One copy of an agent per prompt, served the trainer's model through the policy endpoint
    (`build_agent_rollout_func`); `close()` stops the endpoint."""

    def __init__(
        self,
        agent: Callable[..., Any],
        *,
        env_url: str,
        env_token: str | None,
        max_concurrency: int | None,
        timeout_s: float | None,
        records: EpisodeRecordWriter | None,
        backend_factory: Callable[[Any], Any],
        train_on_failed: bool,
        agent_kwargs: dict[str, Any] | None,
    ) -> None:
        self.agent, self.env_url, self.env_token = agent, env_url, env_token
        self.max_concurrency, self.timeout_s, self.records = max_concurrency, timeout_s, records
        self.backend_factory, self.train_on_failed, self.agent_kwargs = (
            backend_factory,
            train_on_failed,
            agent_kwargs,
        )
        self.metrics: dict[str, Any] = {}
        self.server: PolicyServer | None = None  # started at the first call

    def serve(self, trainer: Any) -> PolicyServer:
        """The policy endpoint, serving the trainer's model as it is now."""
        backend = self.backend_factory(trainer)
        if self.server is None:
            self.server = PolicyServer(backend, sampling=trainer_sampling(trainer))
        else:
            self.server.endpoint.set_backend(backend)
            self.server.endpoint.sampling = trainer_sampling(trainer)
        return self.server

    async def play_all(self, server: PolicyServer, prompts: list[Any]) -> list[AgentResult]:
        limit = asyncio.Semaphore(self.max_concurrency or max(1, len(prompts)))

        async def one(prompt: Any) -> AgentResult:
            task, seed = parse_task_prompt(prompt)
            async with limit:
                return await run_agent(
                    self.agent,
                    policy=server,
                    env_url=self.env_url,
                    task=task,
                    seed=seed,
                    timeout_s=self.timeout_s,
                    env_token=self.env_token,
                    extra=self.agent_kwargs,
                )

        return list(await asyncio.gather(*(one(p) for p in prompts)))

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        server = self.serve(trainer)
        step = trainer_step(trainer)
        results = run_coroutine_sync(self.play_all(server, list(prompts)))
        episodes = [agent_episode(r) for r in results]
        for result, episode in zip(results, episodes):
            episode.metrics["train_step"] = step
            if self.records is not None:
                self.records.write(episode)
            server.store.discard(result.trace.rollout_id)
        out = rollout_outputs(episodes, trainer, train_on_failed=self.train_on_failed)
        out["step_rewards"] = [list(r.outcome.get("step_rewards") or []) for r in results]
        out["success"] = [bool(e.verify.metrics["success"]) for e in episodes]
        self.metrics = {
            **rollout_metrics(episodes),
            "forks": sum(r.trace.forks for r in results),
            "agent_timeouts": sum(r.timed_out for r in results),
        }
        _log_failures(results)
        return out

    def close(self) -> None:
        if self.server is not None:
            self.server.close()
            self.server = None


def build_agent_rollout_func(
    agent: Callable[..., Any],
    *,
    env_url: str,
    env_token: str | None = None,
    max_concurrency: int | None = None,
    timeout_s: float | None = DEFAULT_AGENT_TIMEOUT_S,
    records: str | Path | EpisodeRecordWriter | None = None,
    backend_factory: Callable[[Any], Any] = trainer_backend,
    train_on_failed: bool = False,
    agent_kwargs: dict[str, Any] | None = None,
) -> AgentRollout:
    """A TRL 1.16 `rollout_func(prompts, trainer)` running one copy of `agent` per prompt
    (`agent_kwargs`: more arguments offered to it, e.g. `max_turns`). An agent still running
    after `timeout_s` is cancelled; its row is masked, counted (`agent_timeouts`) and named in
    the log, so one hung agent never holds the GRPO step nor scores a reward."""
    return AgentRollout(
        agent,
        env_url=env_url,
        env_token=env_token,
        max_concurrency=max_concurrency,
        timeout_s=timeout_s,
        records=EpisodeRecordWriter(records) if isinstance(records, (str, Path)) else records,
        backend_factory=backend_factory,
        train_on_failed=train_on_failed,
        agent_kwargs=agent_kwargs,
    )
