"""`evaluate`: a model's success rate on held-out seeds, played exactly as training plays them
(the same prompt, turns and token budget), for `--eval-every` and the learning experiments."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from envharness.core.registry import resolve_environment
from envharness.harness import BatchingModelStep, run_coroutine_sync, run_episodes, write_records
from envharness.harness.types import HarnessRunLimits
from envharness.integrations.trl.config import TrainConfig
from envharness.integrations.trl.prompting import prompt_options
from envharness.integrations.trl.rollout import TaskPromptSessionFactory, episode_success
from envharness.models.transformers_backend import TransformersBackend


def evaluate(
    model: Any,
    tokenizer: Any,
    client_factory: Callable[[], Any],
    config: TrainConfig,
    seeds: list[int],
    *,
    records: str | Path | None = None,
    task: str | None = None,
    temperature: float | None = None,
) -> float:
    """Success rate of `model` on `task` (default `config.tasks[0]`) over `seeds`, played exactly
    as in training (same prompt, turns, token budget; sampled at the training temperature unless
    `temperature` is given: 0 is greedy)."""
    task = task or config.tasks[0]
    env = resolve_environment(config.env, config.env_options)
    harness = env.require_harness()
    style = config.prompt or harness.train_prompt
    factory = TaskPromptSessionFactory(
        harness.session_factory(client_factory, default_task=task, **prompt_options(style, tokenizer, env))
    )
    batcher = BatchingModelStep(
        TransformersBackend(model, tokenizer), tool_call_parser=harness.tool_call_parser, send_tools=False
    )
    sampling = {
        "temperature": config.temperature if temperature is None else temperature,
        "max_tokens": config.max_completion_length,
    }
    results = run_coroutine_sync(
        run_episodes(
            factory,
            [task] * len(seeds),
            seeds=seeds,
            backend=batcher,
            limits=HarnessRunLimits(max_turns=config.max_turns, sampling=sampling),
            max_concurrency=8,
        )
    )
    if records is not None:
        write_records(records, results)
    failed = [r.error for r in results if r.error]
    if failed:
        raise RuntimeError(f"{len(failed)} of {len(results)} evaluation episodes failed, e.g. {failed[0]}")
    return sum(map(episode_success, results)) / len(results)


def evaluate_in_env(
    model: Any, tokenizer: Any, client_factory: Callable[[], Any], config: TrainConfig, env: str, **kw: Any
) -> float:
    """`evaluate` on one environment of a mix: its own server, training prompt and options."""
    one_env = dataclasses.replace(config, env=env, env_options={}, prompt="", mix={})
    return evaluate(model, tokenizer, client_factory, one_env, **kw)
