"""`OpenEnvRolloutProcessor` for Eval Protocol (PyPI `eval-protocol`), on envharness.

A drop-in for `eval_protocol.pytest.openenv_rollout_processor.OpenEnvRolloutProcessor`:
the same constructor keywords and the same loop (reset; then per step: `prompt_builder`
-> user message -> model -> `action_parser` -> `env.step`), the same outputs
(`row.messages`, the `__ep_step_rewards__:[...]` system message, and
`row.execution_metadata.extra["step_rewards"]`). What changes:

- Environments never block the event loop (async clients, or sync clients in worker
  threads), so rows really run concurrently (`max_concurrent_rollouts`).
- Every env call has a timeout (`timeout_ms`) and every episode one (`episode_timeout_s`).
  A timeout ends THAT row with a rollout error (`row.rollout_status`); the others finish.
  Resets and steps that fail for transient reasons are retried with backoff.
- The model is any envharness backend (`model="embedded"`, `"scripted"`, a backend
  object) or, by default, `completion_params["model"]` through LiteLLM as before -- with
  LiteLLM's cache off when sampling (temperature > 0), so a GRPO group gets distinct answers.
- The episode's tokens form one exact training sequence (first prompt, then model tokens
  with `env_mask` 1 and their `logprobs`, and the environment's tokens with `env_mask` 0),
  assembled by `envharness.harness.TokenAssembler` when the backend gives token ids.
- Without `docker_image`/`hub_repo_id`/`env_base_url`, envharness clients start ONE local
  server shared by all rows (no Docker), and `tasks` rotate through `reset(task=...)`.

Accepted for compatibility but unused by envharness servers (which serve MiniWoB++
themselves and always run headless): `miniwob_url`, `benchmark`, `headless`,
`viewport_width`, `viewport_height`; Docker images that read them get them through
`env_vars`, as the seed's example passes them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import time
from collections.abc import Callable
from itertools import count
from typing import Any

# eval-protocol imports LiteLLM, which otherwise fetches its model price list from GitHub
# at import time (and, offline, waits for it to fail). A default only: set it to override.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from eval_protocol.models import EvaluationRow, Message, Status
from eval_protocol.pytest.rollout_processor import RolloutProcessor
from eval_protocol.pytest.types import RolloutProcessorConfig
from openai.types import CompletionUsage

from envharness.harness.model_step import BatchingModelStep, EpisodeModelStep
from envharness.harness.tokens import TokenAssembler
from envharness.integrations.eval_protocol.env import (
    EnvConnector,
    EnvTimeoutError,
    EpisodeEnv,
    call_maybe_async,
)
from envharness.integrations.eval_protocol.model import ModelResolver, sampling_from_completion_params
from envharness.models.base import ModelBackend

__all__ = ["STEP_REWARDS_SENTINEL", "EnvTimeoutError", "OpenEnvRolloutProcessor", "read_step_rewards"]

logger = logging.getLogger(__name__)

#: Prefix of the system message that carries the per-step rewards (the seed's format).
STEP_REWARDS_SENTINEL = "__ep_step_rewards__:"


def read_step_rewards(row: EvaluationRow) -> list[float]:
    """Per-step rewards of a processed row (from `extra`, else from the sentinel message)."""
    extra = row.execution_metadata.extra or {}
    if "step_rewards" in extra:
        return [float(r) for r in extra["step_rewards"]]
    for msg in row.messages:
        if (
            msg.role == "system"
            and isinstance(msg.content, str)
            and msg.content.startswith(STEP_REWARDS_SENTINEL)
        ):
            return [float(r) for r in json.loads(msg.content.removeprefix(STEP_REWARDS_SENTINEL))]
    return []


@dataclasses.dataclass
class _Episode:
    """What one rollout accumulates."""

    messages: list[Message]
    task: str | None
    step_rewards: list[float] = dataclasses.field(default_factory=list)
    actions: list[str] = dataclasses.field(default_factory=list)
    history: list[str] = dataclasses.field(default_factory=list)
    tokens: TokenAssembler = dataclasses.field(default_factory=TokenAssembler)
    usage: dict[str, int] = dataclasses.field(
        default_factory=lambda: {"prompt_tokens": 0, "completion_tokens": 0}
    )
    done: bool = False
    finish_reason: str | None = None


class OpenEnvRolloutProcessor(RolloutProcessor):
    """Runs OpenEnv-style episodes (envharness or OpenEnv clients) for `@evaluation_test`."""

    def __init__(
        self,
        env_factory: Callable[[], Any] | None = None,
        prompt_builder: Callable[[Any, int, list[str]], Any] | None = None,
        action_parser: Callable[[str], Any] | None = None,
        *,
        model: ModelBackend | str | None = None,
        policy_factory: Callable[..., Any] | None = None,
        env_client_cls: type | None = None,
        tasks: list[str] | None = None,
        task_var: str | None = None,
        miniwob_url: str | None = None,
        docker_image: str | None = None,
        env_base_url: str | None = None,
        hub_repo_id: str | None = None,
        request_timeout_s: float = 15.0,
        default_headers: dict[str, str] | None = None,
        provider: Any | None = None,
        docker_port: int | None = None,
        env_vars: dict[str, str] | None = None,
        benchmark: str = "miniwob",
        headless: bool = True,
        viewport_width: int = 1280,
        viewport_height: int = 720,
        timeout_ms: int = 10000,
        num_generations: int | None = None,
        max_steps: int | None = None,
        episode_timeout_s: float | None = 600.0,
        reset_timeout_ms: int | None = None,
        retries: int = 2,
        retry_backoff_s: float = 0.5,
        launch_options: dict[str, Any] | None = None,
    ):
        """Keywords as the original processor's, plus:

        model: an envharness `ModelBackend` or spec (`"embedded"`, `"scripted"`, ...);
            None reads `completion_params["model"]` (see `eval_protocol_model`).
        max_steps: steps per episode (default: the decorator's `steps`).
        timeout_ms: bound on each `env.step()`; `reset_timeout_ms` bounds `reset()` (default:
            3x timeout_ms, at least 60 s: a server's first reset may start its browser).
        episode_timeout_s: bound on a whole episode, model calls included (None: unbounded).
        retries, retry_backoff_s: how often and how patiently transient env failures are retried.
        launch_options: options of the local server `env_client_cls.launch(...)` starts.
        """
        if action_parser is None:
            raise ValueError("action_parser must be provided and return an Action object.")
        if tasks and (docker_image or hub_repo_id) and env_factory is None and not task_var:
            raise ValueError(
                "task_var must be provided when tasks are configured with docker_image or hub_repo_id."
            )
        if timeout_ms <= 0 or (episode_timeout_s is not None and episode_timeout_s <= 0):
            raise ValueError("timeout_ms and episode_timeout_s must be positive")
        self.prompt_builder = prompt_builder or (lambda obs, step, history: str(obs))
        self.action_parser = action_parser
        self.tasks = list(tasks or [])
        self.num_generations = max(1, int(num_generations)) if num_generations else 1
        self.max_steps = max_steps
        self.step_timeout_s = timeout_ms / 1000
        self.reset_timeout_s = (reset_timeout_ms or max(3 * timeout_ms, 60000)) / 1000
        self.episode_timeout_s = episode_timeout_s
        self.retries = retries
        self.retry_backoff_s = retry_backoff_s
        self.connector = EnvConnector(
            env_factory=env_factory,
            env_client_cls=env_client_cls,
            env_base_url=env_base_url,
            hub_repo_id=hub_repo_id,
            docker_image=docker_image,
            env_vars={k: str(v) for k, v in (env_vars or {}).items()},
            task_var=task_var,
            provider=provider,
            docker_port=docker_port,
            request_timeout_s=request_timeout_s,
            default_headers=default_headers,
            launch_options=dict(launch_options or {}),
        )
        self.models = ModelResolver(model, policy_factory, env=self.connector._env_name())
        self._batchers: dict[Any, BatchingModelStep] = {}
        self._episode_counter = count()

    # -- Eval Protocol's interface ----------------------------------------------------------
    def __call__(
        self, rows: list[EvaluationRow], config: RolloutProcessorConfig
    ) -> list[asyncio.Task[EvaluationRow]]:
        """One task per row; each waits for `config.semaphore`, then runs its episode."""

        async def run(row: EvaluationRow, task: str | None) -> EvaluationRow:
            async with config.semaphore:
                return await self._rollout(row, config, task)

        return [asyncio.create_task(run(row, self._task_for(row))) for row in rows]

    async def acleanup(self) -> None:
        """Stop the local server (if this processor started one) and close the models."""
        self._batchers.clear()
        await self.connector.aclose()
        await self.models.aclose()

    # -- one episode -------------------------------------------------------------------------
    def _task_for(self, row: EvaluationRow) -> str | None:
        """Rotate over `tasks` in groups of `num_generations`; a retried row keeps its task."""
        extra = row.execution_metadata.extra or {}
        if "task" in extra or not self.tasks:
            return extra.get("task")
        group = next(self._episode_counter) // self.num_generations
        task = self.tasks[group % len(self.tasks)]
        row.execution_metadata.extra = {**extra, "task": task}
        return task

    async def _rollout(
        self, row: EvaluationRow, config: RolloutProcessorConfig, task: str | None
    ) -> EvaluationRow:
        started = time.perf_counter()
        params = dict(config.completion_params or {})
        row.input_metadata.completion_params = params
        backend = await self.models.backend(params)
        batcher = self._batchers.setdefault(
            self.models.key(params),
            BatchingModelStep(backend, tool_call_parser=lambda text: [], send_tools=False),
        )
        episode = _Episode(messages=list(row.messages), task=task)
        system_prompt = params.get("system_prompt")
        if system_prompt and not any(m.role == "system" for m in episode.messages):
            episode.messages.insert(0, Message(role="system", content=system_prompt))
        env = EpisodeEnv(
            await self.connector.open(task),
            step_timeout_s=self.step_timeout_s,
            reset_timeout_s=self.reset_timeout_s,
            retries=self.retries,
            backoff_s=self.retry_backoff_s,
        )
        model_step = batcher.for_episode()
        error: BaseException | None = None
        try:
            async with asyncio.timeout(self.episode_timeout_s):
                await self._loop(episode, env, model_step, params, config, row)
        except TimeoutError as exc:  # EnvTimeoutError or the episode's own deadline
            error = exc
        finally:
            model_step.close()
            await env.close()
        self._record(row, episode, env, started)
        if error is not None:
            reason = str(error) or f"episode did not finish within {self.episode_timeout_s:g} s"
            row.rollout_status = Status.rollout_error(
                f"timeout: {reason}", {"timeout": True, "steps": len(episode.step_rewards), "task": task}
            )
            logger.warning(
                "rollout of task %s timed out after %d steps: %s", task, len(episode.step_rewards), reason
            )
        return row

    async def _loop(
        self,
        episode: _Episode,
        env: EpisodeEnv,
        model_step: EpisodeModelStep,
        params: dict[str, Any],
        config: RolloutProcessorConfig,
        row: EvaluationRow,
    ) -> None:
        sampling = dataclasses.asdict(sampling_from_completion_params(params))
        result = await env.reset(
            **({"task": episode.task} if episode.task and not self.connector.task_in_env_vars else {})
        )
        observation = result.observation
        for step in range(self.max_steps or config.steps or 8):
            if result.done:
                break
            content = self.prompt_builder(observation, step + 1, episode.history)
            episode.messages.append(Message(role="user", content=content))
            turn = await model_step(
                [{"role": m.role, "content": m.content} for m in episode.messages], [], sampling
            )
            episode.tokens.add_turn(turn)
            self._count_usage(episode, turn)
            text = turn.response.content
            episode.messages.append(Message(role="assistant", content=text))
            action = await call_maybe_async(self.action_parser, text)
            label = getattr(action, "action_str", None) or str(action)
            result = await env.step(action)
            reward = float(result.reward or 0.0)
            observation = result.observation
            episode.step_rewards.append(reward)
            episode.actions.append(label)
            error_flag = " ERROR" if getattr(observation, "last_action_error", False) else ""
            episode.history.append(f"Step {step + 1}: {label} -> reward {reward:+.2f}{error_flag}")
            self._log_snapshot(config, row, episode.messages)
        episode.done = bool(result.done)

    @staticmethod
    def _count_usage(episode: _Episode, turn: Any) -> None:
        usage = turn.metadata.get("usage") or {}
        episode.usage["prompt_tokens"] += int(usage.get("prompt_tokens") or len(turn.prompt_ids))
        episode.usage["completion_tokens"] += int(usage.get("completion_tokens") or len(turn.completion_ids))
        episode.finish_reason = turn.metadata.get("finish_reason") or episode.finish_reason

    def _record(self, row: EvaluationRow, episode: _Episode, env: EpisodeEnv, started: float) -> None:
        """Write the episode into the row where Eval Protocol and the seed's tests read it."""
        rewards = list(episode.step_rewards)
        row.messages = [
            *episode.messages,
            Message(role="system", content=STEP_REWARDS_SENTINEL + json.dumps(rewards)),
        ]
        prompt, completion = episode.usage["prompt_tokens"], episode.usage["completion_tokens"]
        meta = row.execution_metadata
        meta.usage = CompletionUsage(
            prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion
        )
        meta.rollout_duration_seconds = time.perf_counter() - started
        meta.finish_reason = episode.finish_reason
        extra = dict(meta.extra or {})
        extra.update(
            step_rewards=rewards,
            total_reward=sum(rewards),
            actions=list(episode.actions),
            done=episode.done,
            env_retries=env.retried,
            token_metrics=episode.tokens.metrics(),
        )
        if episode.task is not None:
            extra["task"] = episode.task
        if episode.tokens.turns_assembled:
            tokens = episode.tokens
            extra.update(
                prompt_ids=list(tokens.prompt_ids),
                completion_ids=list(tokens.completion_ids),
                env_mask=list(tokens.env_mask),
                logprobs=list(tokens.logprobs),
            )
        meta.extra = extra

    @staticmethod
    def _log_snapshot(config: RolloutProcessorConfig, row: EvaluationRow, messages: list[Message]) -> None:
        """Mid-rollout snapshot for Eval Protocol's logs UI; a logging failure never ends a rollout."""
        if getattr(config, "logger", None) is None:
            return
        try:
            snapshot = row.model_copy(deep=True)
            snapshot.messages = list(messages)
            config.logger.log(snapshot)
        except Exception as exc:
            logger.warning("could not log a rollout snapshot: %s: %s", type(exc).__name__, exc)
