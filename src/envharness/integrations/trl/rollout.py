"""TRL GRPO through the harness: a `rollout_func` that plays whole episodes with the trainer's model.

    rollout_func = build_env_rollout_func(ENV, client_factory, default_task=TASK)
    trainer = GRPOTrainer(model=model, processing_class=tokenizer, rollout_func=rollout_func,
                          reward_funcs=[reward_success], train_dataset=task_dataset(["click-test"], 64), ...)

TRL 1.16 calls `rollout_func(prompts, trainer)` with prompts already repeated
`num_generations` times; each prompt becomes one episode (all of them run concurrently, their
model turns batched). The model is the trainer's own: its vLLM engine (server or colocated)
when `use_vllm=True`, otherwise the model being trained, sampled on CPU/GPU with transformers
in eval mode without gradients. Sampling follows the trainer's config (temperature, top-p,
top-k; `max_completion_length` bounds each turn) unless `limits.sampling` says otherwise.

The returned dict holds what TRL needs (`prompt_ids`, `completion_ids`, `logprobs`,
`env_mask`: 1 on model tokens, 0 on environment tokens) and, for reward functions
(`rewards.py`), `env_reward`, `step_rewards`, `success` and `verify_metrics`.
Every episode can also be written to the shared JSONL records with its training step. The
function is a `Rollout` (`layers.py`): `.records` is that writer and `.metrics` the last
batch's counts (episodes, errors, infra failures).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from envharness._deprecated import deprecated_names
from envharness.harness.model_step import ArrivingSessions, BatchingModelStep
from envharness.harness.records import EpisodeRecordWriter
from envharness.harness.rollout import build_harness_rollout_func
from envharness.harness.success import episode_success as verdict_of
from envharness.harness.tool_parsing import ToolCallParser, parse_json_tool_calls
from envharness.harness.types import HarnessRolloutResult, HarnessRunLimits
from envharness.integrations.trl.layers import Rollout
from envharness.models import chat
from envharness.models.base import Generation, GenerationRequest

log = logging.getLogger(__name__)


# -- prompts: which task (and seed) an episode plays ---------------------------------------
def task_prompt(task: str, seed: int | None = None) -> str:
    """The dataset prompt for one episode of `task` (seeded: every generation of a group
    sees the same page, so GRPO compares like with like)."""
    return json.dumps({"task": task, "seed": seed} if seed is not None else {"task": task})


def parse_task_prompt(prompt: Any) -> tuple[Any, int | None]:
    """(task, seed) from a dataset prompt: `task_prompt`'s JSON, a `{"task", "seed"}` dict,
    a task name, or anything else (a chat prompt), which is passed on as the task."""
    data = prompt
    if isinstance(prompt, str) and prompt.lstrip().startswith("{"):
        try:
            data = json.loads(prompt)
        except json.JSONDecodeError as exc:
            raise ValueError(f"prompt looks like JSON but is not: {exc}") from exc
    if isinstance(data, dict) and ("task" in data or "seed" in data):
        seed = data.get("seed")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise ValueError(f"seed must be an integer, got {seed!r}")
        return data.get("task"), seed
    return prompt, None


def prompt_env(prompt: Any) -> str | None:
    """The environment a prompt names (a mix's prompt, `mix.mix_prompt`), or None."""
    if isinstance(prompt, str) and prompt.startswith("{"):
        try:
            data = json.loads(prompt)
        except json.JSONDecodeError:
            return None
        return data.get("env") if isinstance(data, dict) else None
    return None


def task_dataset(tasks: Sequence[str], num_prompts: int, *, seed: int = 0) -> Any:
    """A `datasets.Dataset` of `num_prompts` prompts cycling through `tasks`, each with its own
    episode seed drawn from `seed` (training seeds; evaluate on others)."""
    import random

    from datasets import Dataset

    if not tasks:
        raise ValueError("at least one task is needed")
    rng = random.Random(seed)
    prompts = [
        task_prompt(tasks[i % len(tasks)], rng.randrange(1_000_000, 2_000_000)) for i in range(num_prompts)
    ]
    return Dataset.from_dict({"prompt": prompts})


class TaskPromptSessionFactory:
    """Wraps a session factory so that a prompt's seed reaches the environment's reset."""

    def __init__(self, inner: Any):
        self.inner = inner

    async def create_async(
        self, task: Any = None, seed: int | None = None, episode_id: str | None = None
    ) -> Any:
        from envharness.harness.session import create_session

        task, prompt_seed = parse_task_prompt(task)
        return await create_session(self.inner, task, seed if seed is not None else prompt_seed, episode_id)


# -- the trainer's model as a backend ------------------------------------------------------
def _tokenizer(trainer: Any) -> Any:
    processing_class = getattr(trainer, "processing_class", None)
    if processing_class is None:
        raise ValueError("the trainer has no processing_class (tokenizer); pass one to GRPOTrainer")
    return getattr(processing_class, "tokenizer", processing_class)


class TRLVLLMGenerationBackend:
    """The trainer's own vLLM (`trainer.vllm_generation`, server or colocated) as a `ModelBackend`.

    Prompts are rendered and tokenized here so multi-turn sequences stay exact; TRL samples
    with its config (temperature, top-p/k, `max_completion_length` per turn) and syncs the
    weights before each rollout. With several processes, every process must make the same
    number of calls (TRL gathers prompts across them): keep episodes to a fixed turn count.
    """

    name = "trl-vllm"

    def __init__(self, trainer: Any):
        generation = getattr(trainer, "vllm_generation", None)
        if generation is None:
            raise RuntimeError(
                "use_vllm=True but the trainer has no vLLM engine (`trainer.vllm_generation`); "
                "vLLM needs a CUDA GPU and `pip install trl[vllm]`, e.g. `trl vllm-serve --model ...` "
                "with GRPOConfig(use_vllm=True, vllm_mode='server'). On CPU, train with use_vllm=False."
            )
        self._generation = generation
        self._tokenizer = _tokenizer(trainer)

    async def generate(self, requests: list[GenerationRequest]) -> list[Generation]:
        prompts = [chat.prompt_ids(self._tokenizer, r.messages, r.tools, r.prefix_ids) for r in requests]
        _, completion_ids, logprobs, _ = await asyncio.to_thread(
            self._generation.generate, prompts=prompts, images=None, num_generations=1
        )
        eos = self._tokenizer.eos_token_id
        return [
            Generation(
                text=self._tokenizer.decode(ids, skip_special_tokens=True),
                prompt_ids=list(prompt),
                completion_ids=list(ids),
                logprobs=[float(lp[0]) if isinstance(lp, (list, tuple)) else float(lp) for lp in lps],
                finish_reason="stop" if ids and ids[-1] == eos else "length",
            )
            for prompt, ids, lps in zip(prompts, completion_ids, logprobs)
        ]

    async def aclose(self) -> None:
        """The engine belongs to the trainer."""


def trainer_backend(trainer: Any) -> Any:
    """The trainer's generation path as a `ModelBackend`: vLLM when `use_vllm`, else the
    model being trained (through `TransformersBackend`, exact logprobs from raw logits)."""
    if getattr(trainer, "use_vllm", False) or getattr(getattr(trainer, "args", None), "use_vllm", False):
        return TRLVLLMGenerationBackend(trainer)
    from envharness.models.transformers_backend import TransformersBackend

    model = trainer.model
    accelerator = getattr(trainer, "accelerator", None)
    if accelerator is not None:
        model = accelerator.unwrap_model(model)
    return TransformersBackend(model, _tokenizer(trainer), name="trainer-model")


def trainer_sampling(trainer: Any) -> dict[str, Any]:
    """The trainer's sampling settings in harness form (`max_completion_length` per turn)."""
    args = getattr(trainer, "args", None)
    sampling = {
        "temperature": getattr(args, "temperature", 1.0),
        "top_p": getattr(args, "top_p", 1.0),
        "top_k": getattr(args, "top_k", 0) or 0,
    }
    max_tokens = getattr(args, "max_completion_length", None)
    if max_tokens:
        sampling["max_tokens"] = int(max_tokens)
    return sampling


# -- the rollout function ------------------------------------------------------------------
def _step_rewards(result: HarnessRolloutResult) -> list[float]:
    """Each tool call's reward (as in the episode records; 0.0 where it reported none)."""
    return [float(entry.result.metadata.get("reward") or 0.0) for entry in result.tool_trace]


def episode_success(result: HarnessRolloutResult) -> bool:
    """The one verdict (`harness/success.py`) that training, the curriculum and the held-out
    evaluation count, as `eval` does: the environment's declared success, never partial credit."""
    metrics = result.verify.metrics if result.verify is not None else {}
    return verdict_of(metrics, result.env_reward, result.error)


def _named_episode(result: HarnessRolloutResult, step: int, version: int) -> HarnessRolloutResult:
    """The episode's record named after its step, the policy version that sampled it (the step,
    unless sampled ahead: `async_rollout.py`), task, page seed (and environment in a mix)."""
    result.metrics["train_step"] = step
    result.metrics["policy_version"] = version
    env = prompt_env(result.task)
    if env is not None:  # a mix: records name the environment too
        result.metrics["env"] = env
    task, seed = parse_task_prompt(result.task)
    result.task, result.seed = task, seed if result.seed is None else result.seed
    return result


def _episode_fields(ordered: list[HarnessRolloutResult], with_images: bool) -> dict[str, list[Any]]:
    """The rollout's fields beside the tokens: step rewards, success, the error (exploration.py
    reports all-failed groups by it) and, for vision policies, each row's images."""
    fields: dict[str, list[Any]] = {
        "step_rewards": [_step_rewards(r) for r in ordered],
        "success": [episode_success(r) for r in ordered],
        "error": [r.error for r in ordered],
    }
    if with_images:  # a row without tokens of its own (TRL's placeholder) shows no images
        fields["episode_images"] = [list(r.images) if r.completion_ids else [] for r in ordered]
        fields["image_token_counts"] = [
            list(r.image_token_counts) if r.completion_ids else [] for r in ordered
        ]
    return fields


class EpisodeRollout(Rollout):
    """TRL's `rollout_func` playing one harness episode per prompt (`build_trl_rollout_func`)."""

    def __init__(
        self,
        session_factory: Any,
        *,
        tool_call_parser: ToolCallParser,
        send_tools: bool,
        limits: HarnessRunLimits,
        max_concurrency: int | None,
        records: EpisodeRecordWriter | None,
        backend_factory: Callable[[Any], Any],
        harness_adapter: Any,
        with_images: bool,
    ) -> None:
        self.factory = TaskPromptSessionFactory(session_factory)
        self.tool_call_parser, self.send_tools, self.limits = tool_call_parser, send_tools, limits
        self.max_concurrency, self.records = max_concurrency, records
        self.backend_factory, self.harness_adapter, self.with_images = (
            backend_factory,
            harness_adapter,
            with_images,
        )
        self.metrics: dict[str, Any] = {}

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        batcher = BatchingModelStep(  # one episode per prompt: none waits on another's turn
            self.backend_factory(trainer),
            tool_call_parser=self.tool_call_parser,
            send_tools=self.send_tools,
            independent_episodes=True,
        )
        step = trainer_step(trainer)
        version = getattr(trainer, "policy_version", step)
        results: dict[int, HarnessRolloutResult] = {}

        def on_result(index: int, result: HarnessRolloutResult) -> None:
            results[index] = _named_episode(result, step, version)
            if self.records is not None:
                self.records.write(result)

        inner = build_harness_rollout_func(
            session_factory=ArrivingSessions(self.factory, batcher),
            harness_adapter=self.harness_adapter,
            model_step_builder=lambda _trainer, _session: batcher.for_episode(),
            limits=dataclasses.replace(
                self.limits, sampling={**trainer_sampling(trainer), **self.limits.sampling}
            ),
            max_concurrency=self.max_concurrency or max(1, len(prompts)),
            on_result=on_result,
        )
        out = inner(prompts, trainer)
        self.metrics = inner.last_metrics
        if self.metrics.get("infra_failures"):
            log.warning(
                "%d of %d episodes lost to a dead environment server (masked out, reward 0)",
                self.metrics["infra_failures"],
                self.metrics["episodes"],
            )
        return {**out, **_episode_fields([results[i] for i in range(len(prompts))], self.with_images)}


def trainer_step(trainer: Any) -> int:
    """The trainer's global step (0 before training, or for a stand-in trainer without state)."""
    return int(getattr(getattr(trainer, "state", None), "global_step", 0) or 0)


def build_trl_rollout_func(
    session_factory: Any,
    *,
    tool_call_parser: ToolCallParser = parse_json_tool_calls,
    send_tools: bool = True,
    limits: HarnessRunLimits | None = None,
    max_concurrency: int | None = None,
    records: str | Path | EpisodeRecordWriter | None = None,
    include_tokens_in_records: bool = False,
    backend_factory: Callable[[Any], Any] = trainer_backend,
    harness_adapter: Any = None,
    with_images: bool = False,
) -> EpisodeRollout:
    """A TRL 1.16 `rollout_func(prompts, trainer)` that plays one harness episode per prompt.

    `tool_call_parser` turns model text into tool calls (JSON tool calls by default);
    `send_tools=False` keeps tool specs out of the chat template (text-action prompts).
    `max_concurrency` (default: all prompts at once) bounds episodes in flight. `records`:
    a JSONL path (or writer) receiving every episode, with `metrics.train_step`.
    `with_images=True` (vision policies) adds, per row, the images of its token sequence in
    placeholder order (`episode_images`) and their placeholder counts (`image_token_counts`),
    which `integrations/trl/vision.py` hands to the loss pass.
    """
    writer = (
        EpisodeRecordWriter(records, include_tokens=include_tokens_in_records)
        if isinstance(records, (str, Path))
        else records
    )
    return EpisodeRollout(
        session_factory,
        tool_call_parser=tool_call_parser,
        send_tools=send_tools,
        limits=limits or HarnessRunLimits(),
        max_concurrency=max_concurrency,
        records=writer,
        backend_factory=backend_factory,
        harness_adapter=harness_adapter,
        with_images=with_images,
    )


def build_env_rollout_func(
    env: Any,
    client_factory: Callable[[], Any],
    *,
    default_task: str | None = None,
    tools: Sequence[str] | None = None,
    session_factory_kwargs: dict[str, Any] | None = None,
    **kwargs: Any,
) -> EpisodeRollout:
    """`build_trl_rollout_func` for a registered environment: its session factory (one client
    per episode from `client_factory`) and its parser of model text into tool calls
    (`EnvHarness`). `client_factory` may be a `ClientPool` or a fleet's pool (`FleetRouter`),
    which spreads the episodes over many servers."""
    from envharness.core.registry import env_harness

    harness = env_harness(env)
    options = dict(session_factory_kwargs or {})
    if tools is not None:
        options["tools"] = list(tools)
    if harness.reset_kwargs and "reset_kwargs" not in options:
        options["reset_kwargs"] = dict(harness.reset_kwargs)
    factory = options.pop("session_factory_builder", harness.session_factory)(
        client_factory, default_task=default_task or harness.default_tasks[0], **options
    )
    kwargs.setdefault("tool_call_parser", harness.tool_call_parser)
    kwargs.setdefault("send_tools", False)
    return build_trl_rollout_func(factory, **kwargs)


__all__ = [
    "EpisodeRollout",
    "TRLVLLMGenerationBackend",
    "TaskPromptSessionFactory",
    "build_env_rollout_func",
    "build_trl_rollout_func",
    "parse_task_prompt",
    "prompt_env",
    "task_dataset",
    "task_prompt",
    "trainer_backend",
    "trainer_sampling",
    "trainer_step",
]
# The reward functions and `RolloutFunc` this module listed, from `rewards.py` and `layers.py`,
# kept for old callers with a warning.
__getattr__ = deprecated_names(__name__)
