"""Running many episodes at once: `run_episodes` (async) and `build_harness_rollout_func` (TRL).

Each episode: create a session (its own env client), run the harness adapter, verify,
close. Up to `max_concurrency` episodes are in flight; with a `ModelBackend` their model
steps are batched (`BatchingModelStep`). A failing episode (session creation, a dead
server, a model error, a verify that raises) comes back as a result with `error` set and
reward 0.0; the others are untouched. Results keep the order of `tasks`.
"""

from __future__ import annotations

import asyncio
import inspect
import math
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from envharness.core.concurrency import run_coroutine_sync, run_sync, worker_threads
from envharness.harness.adapter import HarnessAdapter, MCPHarnessAdapter
from envharness.harness.failures import INFRA_FAILURE_KEY, is_infra_failure, note_failure
from envharness.harness.model_step import BatchingModelStep, ModelStep
from envharness.harness.session import call_session, create_session
from envharness.harness.tool_parsing import ToolCallParser, parse_json_tool_calls
from envharness.harness.types import HarnessRolloutResult, HarnessRunLimits, ToolResult, VerifyResult
from envharness.models.base import ModelBackend

OnResult = Callable[[int, HarnessRolloutResult], Any]


def _tool_result_reward(result: ToolResult) -> float | None:
    reward = result.metadata.get("reward")
    if reward is None and isinstance(result.data, dict):
        reward = result.data.get("reward")
    return None if reward is None else float(reward)


def resolve_env_reward(rollout: HarnessRolloutResult, verify: VerifyResult) -> float:
    """The environment's reward: the last one a tool reported, which verify must agree with.

    Same rule as OpenEnv: the orchestration never synthesizes a reward. Raises ValueError
    when there is none or when verify contradicts the environment.
    """
    trace_reward = next(
        (r for e in reversed(rollout.tool_trace) if (r := _tool_result_reward(e.result)) is not None), None
    )
    verify_reward = None if verify.env_reward is None else float(verify.env_reward)
    if (
        trace_reward is not None
        and verify_reward is not None
        and not math.isclose(verify_reward, trace_reward, rel_tol=1e-9, abs_tol=1e-6)
    ):
        raise ValueError(
            f"verify.env_reward ({verify_reward}) must forward the environment reward ({trace_reward})"
        )
    reward = trace_reward if trace_reward is not None else verify_reward
    if reward is None:
        raise ValueError("rollout did not produce an environment reward")
    return reward


def _final_state(rollout: HarnessRolloutResult) -> dict[str, Any]:
    """What OpenEnv passes to `verify` as `final_state`."""
    return {
        "done": rollout.done,
        "metrics": dict(rollout.metrics),
        "events": [{"type": e.type, "payload": dict(e.payload)} for e in rollout.events],
        "tool_trace": [
            {
                "tool_name": e.tool_name,
                "arguments": dict(e.arguments),
                "result": {
                    "data": e.result.data,
                    "done": e.result.done,
                    "metadata": dict(e.result.metadata),
                    "error": e.result.error,
                },
            }
            for e in rollout.tool_trace
        ],
    }


def _fail(rollout: HarnessRolloutResult, error: str) -> None:
    rollout.error = rollout.error or error
    rollout.env_reward = 0.0
    rollout.metrics["error"] = rollout.error


async def _run_adapter(
    adapter: Any, step: ModelStep, session: Any, limits: HarnessRunLimits
) -> HarnessRolloutResult:
    if hasattr(adapter, "run_white_box_async"):
        return await adapter.run_white_box_async(step, session, limits)
    return await run_sync(adapter.run_white_box, step, session, limits)


async def run_episode(
    session_factory: Any,
    task: Any,
    make_step: Callable[[Any], ModelStep],
    *,
    harness_adapter: Any = None,
    limits: HarnessRunLimits | None = None,
    seed: int | None = None,
    episode_id: str | None = None,
    close_step: bool = True,
    timeout_s: float | None = None,
) -> HarnessRolloutResult:
    """One episode, start to finish. Never raises for the episode's own failures.

    `make_step(session)` gives the episode's model step; with `close_step` its `close()`
    (if any) is called when the episode ends (a batched step stops being waited for).
    `timeout_s` bounds the harness loop: past it the episode fails with a TimeoutError
    (its partial transcript is lost; the session is still closed)."""
    limits = limits or HarnessRunLimits()
    adapter = harness_adapter or MCPHarnessAdapter()
    episode_id = episode_id or uuid.uuid4().hex[:12]
    started = time.perf_counter()
    rollout = HarnessRolloutResult()
    session = None
    try:
        session = await create_session(session_factory, task, seed, episode_id)
        created = time.perf_counter()
        step = make_step(session)
        try:
            rollout = await asyncio.wait_for(_run_adapter(adapter, step, session, limits), timeout_s)
        finally:
            if close_step and callable(getattr(step, "close", None)):
                step.close()  # e.g. a batched step: its batches stop waiting for this episode
        rollout.timings["create_s"] = created - started
        if rollout.error is None:
            rollout.verify = await call_session(
                session, "verify", list(rollout.messages), _final_state(rollout)
            )
            rollout.env_reward = resolve_env_reward(rollout, rollout.verify)
    except TimeoutError:
        _fail(rollout, f"TimeoutError: episode took longer than {timeout_s} s")
    except Exception as exc:
        note_failure(rollout.metrics, exc)
        _fail(rollout, f"{type(exc).__name__}: {exc}")
    finally:
        if session is not None:
            try:
                await call_session(session, "close")
            except Exception as exc:  # a leak to report, not a reason to lose the episode
                rollout.metrics["close_error"] = f"{type(exc).__name__}: {exc}"
    if rollout.error is not None:
        _fail(rollout, rollout.error)
    rollout.task, rollout.seed, rollout.episode_id = task, seed, episode_id
    rollout.timings["total_s"] = time.perf_counter() - started
    return rollout


def _step_maker(
    model_step: ModelStep | None,
    backend: Any,
    model_step_builder: Callable[[Any], ModelStep] | None,
    tool_call_parser: ToolCallParser,
) -> Callable[[Any], ModelStep]:
    given = [
        name
        for name, v in (
            ("model_step", model_step),
            ("backend", backend),
            ("model_step_builder", model_step_builder),
        )
        if v is not None
    ]
    if len(given) != 1:
        raise ValueError(
            f"pass exactly one of model_step, backend, model_step_builder (got: {', '.join(given) or 'none'})"
        )
    if model_step is not None:
        return lambda session: model_step
    if model_step_builder is not None:
        return model_step_builder
    batcher = (
        backend
        if isinstance(backend, BatchingModelStep)
        else BatchingModelStep(backend, tool_call_parser=tool_call_parser)
    )
    return lambda session: batcher.for_episode()


async def run_episodes(
    session_factory: Any,
    tasks: Sequence[Any],
    *,
    model_step: ModelStep | None = None,
    backend: ModelBackend | BatchingModelStep | None = None,
    model_step_builder: Callable[[Any], ModelStep] | None = None,
    tool_call_parser: ToolCallParser = parse_json_tool_calls,
    harness_adapter: HarnessAdapter | None = None,
    limits: HarnessRunLimits | None = None,
    max_concurrency: int = 8,
    seeds: Sequence[int | None] | None = None,
    episode_ids: Sequence[str | None] | None = None,
    on_result: OnResult | None = None,
    episode_timeout_s: float | None = None,
) -> list[HarnessRolloutResult]:
    """Run one episode per task, at most `max_concurrency` at a time; results in task order.

    The model is exactly one of: `model_step` (one callable shared by all episodes, sync or
    async), `backend` (a `ModelBackend`, batched across episodes, text parsed into tool
    calls by `tool_call_parser`; or a ready `BatchingModelStep`), or `model_step_builder`
    (`session -> model step`, called once per episode). `on_result(index, result)` (sync
    or async) is called as each episode finishes, e.g. to stream records to disk; if it
    raises, the other episodes still run and its first error is raised at the end.
    `episode_timeout_s` fails (only) an episode that runs longer.
    """
    if max_concurrency < 1:
        raise ValueError("max_concurrency must be >= 1")
    make_step = _step_maker(model_step, backend, model_step_builder, tool_call_parser)
    n = len(tasks)
    seeds = list(seeds) if seeds is not None else [None] * n
    episode_ids = list(episode_ids) if episode_ids is not None else [None] * n
    if len(seeds) != n or len(episode_ids) != n:
        raise ValueError("seeds and episode_ids must have one entry per task")
    gate = asyncio.Semaphore(max_concurrency)
    results: list[HarnessRolloutResult | None] = [None] * n

    async def one(i: int) -> None:
        async with gate:
            results[i] = await run_episode(
                session_factory,
                tasks[i],
                make_step,
                harness_adapter=harness_adapter,
                limits=limits,
                seed=seeds[i],
                episode_id=episode_ids[i],
                close_step=model_step is None,  # a shared step outlives its episodes
                timeout_s=episode_timeout_s,
            )
        if on_result is not None:
            try:
                out = on_result(i, results[i])
                if inspect.isawaitable(out):
                    await out
            except Exception as exc:  # the caller's bug: raised once every episode has finished
                callback_errors.append(exc)

    callback_errors: list[Exception] = []
    # Sync sessions and model steps each hold a thread while they wait: one per episode in
    # flight, plus the model step's own.
    with worker_threads(2 * max_concurrency + 2):
        await asyncio.gather(*(one(i) for i in range(n)))
    if callback_errors:
        raise callback_errors[0]
    return [r for r in results if r is not None]


def _placeholder_tokens(trainer: Any) -> dict[str, list] | None:
    """Tokens for an episode that produced none (it failed before its first model turn).

    TRL cannot pad an empty sequence, so such an episode gets one pad/eos token as prompt
    and one eos as completion, masked out (env_mask 0) so it contributes no loss.
    """
    tok = getattr(trainer, "processing_class", None)
    tok = getattr(tok, "tokenizer", tok)
    eos = getattr(tok, "eos_token_id", None)
    if eos is None:
        return None
    pad = getattr(tok, "pad_token_id", None)
    return {
        "prompt_ids": [eos if pad is None else pad],
        "completion_ids": [eos],
        "logprobs": [0.0],
        "env_mask": [0],
    }


def rollout_metrics(results: Sequence[HarnessRolloutResult]) -> dict[str, float]:
    """A batch's counts: episodes, failed ones, and those failed for infrastructure (a lost
    server: not a real reward of 0) with their fraction."""
    n = len(results)
    infra = sum(1 for r in results if is_infra_failure(r))
    return {
        "episodes": n,
        "failed": sum(1 for r in results if r.error is not None),
        "infra_failures": infra,
        "infra_failure_fraction": infra / n if n else 0.0,
    }


def rollout_outputs(
    results: Sequence[HarnessRolloutResult],
    trainer: Any,
    *,
    reward_key: str = "env_reward",
    train_on_failed: bool = False,
) -> dict[str, list[Any]]:
    """TRL's rollout_func dict for finished episodes, in order: exact tokens (a failed episode's
    env_mask all 0 unless `train_on_failed`; one placeholder token for an episode without any),
    `reward_key` (0.0 for failed episodes) and `verify_metrics` (with `error`, `infra_failure`)."""
    out: dict[str, list[Any]] = {
        "prompt_ids": [],
        "completion_ids": [],
        "logprobs": [],
        "env_mask": [],
        reward_key: [],
        "verify_metrics": [],
    }
    for r in results:
        tokens = {
            "prompt_ids": r.prompt_ids,
            "completion_ids": r.completion_ids,
            "logprobs": r.logprobs,
            "env_mask": r.env_mask,
        }
        if not r.completion_ids:
            tokens = _placeholder_tokens(trainer) or tokens
        elif r.error is not None and not train_on_failed:
            tokens["env_mask"] = [0] * len(r.env_mask)
        for key, value in tokens.items():
            out[key].append(list(value))
        out[reward_key].append(float(r.env_reward or 0.0))
        metrics = dict(r.verify.metrics) if r.verify is not None else {}
        if r.error is not None:
            metrics["error"] = r.error
        if is_infra_failure(r):
            metrics[INFRA_FAILURE_KEY] = True
        out["verify_metrics"].append(metrics)
    return out


def build_harness_rollout_func(
    *,
    session_factory: Any,
    harness_adapter: HarnessAdapter | None = None,
    model_step_builder: Callable[[Any, Any], ModelStep],
    limits: HarnessRunLimits | None = None,
    reward_key: str = "env_reward",
    max_concurrency: int = 8,
    on_result: OnResult | None = None,
    episode_timeout_s: float | None = None,
    train_on_failed: bool = False,
) -> Callable[[list[Any], Any], dict[str, list[Any]]]:
    """A TRL `rollout_func(prompts, trainer)`: one episode per prompt (prompts arrive already
    repeated num_generations times), results in prompt order.

    `model_step_builder(trainer, session)` makes each episode's model step (OpenEnv's
    signature). Returns `prompt_ids`, `completion_ids`, `logprobs` (flat, one per completion
    token; 0.0 on env tokens), `env_mask`, `reward_key` (0.0 for failed episodes) and
    `verify_metrics` (with `error` for failed ones). `on_result(index, result)` sees each
    finished episode (e.g. to write records or read its tool trace).

    A failed episode keeps its exact tokens up to the failure, but its `env_mask` is all 0,
    so a crashed server or a timeout teaches the policy nothing (`train_on_failed=True` keeps
    the mask, and so the loss on its model tokens with reward 0). Episodes whose server was
    lost are flagged `infra_failure: True` in their `verify_metrics`;
    `rollout_func.last_metrics` counts the last batch's episodes, errors and infra failures.
    """

    def rollout_func(prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        results = run_coroutine_sync(
            run_episodes(
                session_factory,
                list(prompts),
                model_step_builder=lambda session: model_step_builder(trainer, session),
                harness_adapter=harness_adapter,
                limits=limits,
                max_concurrency=max_concurrency,
                on_result=on_result,
                episode_timeout_s=episode_timeout_s,
            )
        )
        out = rollout_outputs(results, trainer, reward_key=reward_key, train_on_failed=train_on_failed)
        rollout_func.last_metrics = rollout_metrics(results)  # type: ignore[attr-defined]
        return out

    rollout_func.last_metrics = {}  # type: ignore[attr-defined]
    return rollout_func
