"""Asynchronous rollouts (`train --async`): the next step's episodes are sampled while this
step's loss pass runs, with a bound on staleness.

TRL calls the rollout once per optimizer step. `AsyncRollout` answers step N's call with the
batch it started sampling during step N-1 (one step off, as verl's one-step-off trainer and
TRL's `AsyncGRPOTrainer` with `max_staleness=1`) and, before it returns, starts sampling the
batch for step N+1 on a background thread. Its groups play the tasks TRL handed this step, each
on a fresh training seed drawn from (seed, step), so every step still trains on seeds of its
own. The first step (nothing sampled yet) plays synchronously.

Sampling uses a decoder of its own (`PolicyDecoder`, a copy of the policy): the training model
changes under the optimizer while the background thread samples, and the decoder does not.
It receives the policy's weights before each batch starts (the shape of TRL's
`WeightTransferProtocol`: `send_weights`), and the batch is tagged with that policy version,
the trainer's global step at the time. Every row carries `policy_version` (and every episode
record `metrics.policy_version`). A batch more than `max_staleness` versions old when it would
be trained is dropped and counted, never trained on, and the step plays a fresh batch instead.
The sampled logprobs are the decoder's, so the truncated importance ratio the loss applies
(`logprob_agreement.py`) is p_train / p_sample for the policy that sampled each token: it
corrects a stale batch as it corrects a bf16 or vLLM one.

Under `--processes N` every rank samples its own share of the batch on its own decoder, one
step off, as it would play it in lockstep. The policy version is the trainer's global step,
the same on every rank, and so is the decision to drop a stale batch (made from that step and
version alone). The layers inside gather across ranks (the curriculum's plan, dynamic
sampling's rewards, the records): on the sampling thread they do so on a process group of
their own (`ranks.side_group`), created by every rank at the first step, so that they never
interleave with the loss pass's gradient all-reduce on the launcher's group.

`max_staleness=0` allows no episode from an older policy: nothing can be sampled ahead, so the
layer plays each batch when asked (lockstep, on its decoder).

Each logged step carries `async/policy_version` (the trained batch's), `async/staleness`,
`async/wait_s` (time the step waited for its batch), `async/dropped_episodes` and
`async/dropped_groups` (stale batches thrown away since the last log).
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import torch
from transformers import TrainerCallback

from envharness.integrations.trl import ranks
from envharness.integrations.trl.layers import Layer, Rollout
from envharness.integrations.trl.mix import prompt_key
from envharness.integrations.trl.rollout import task_prompt, trainer_step

log = logging.getLogger(__name__)


class PolicyDecoder:
    """The sampler's own copy of the policy. Its methods are TRL's `WeightTransferProtocol`'s,
    for an in-process copy: weights are copied tensor by tensor, only while no batch samples."""

    def __init__(self, model: Any) -> None:
        self.model = copy.deepcopy(model).eval().requires_grad_(False)
        self.version = -1  # no weights received yet

    def init_weight_transfer(self) -> None:
        """Nothing to set up: the copy lives in this process."""

    def pause(self) -> None:
        """Nothing to pause: `AsyncRollout` sends weights only between batches."""

    def send_weights(self, iterator: Iterator[tuple[str, torch.Tensor]]) -> None:
        own = dict(self.model.named_parameters())
        own.update(self.model.named_buffers())
        with torch.no_grad():
            for name, tensor in iterator:
                own[name].copy_(tensor.detach())

    def resume(self) -> None:
        """Nothing to resume (see `pause`)."""

    def destroy(self) -> None:
        self.model = None

    def receive(self, policy: Any, version: int) -> None:
        """The policy's current weights, tagged `version`."""
        if self.version != version:
            self.pause()
            self.send_weights(_named_tensors(policy))
            self.resume()
            self.version = version


def _named_tensors(model: Any) -> Iterator[tuple[str, torch.Tensor]]:
    yield from model.named_parameters()
    yield from model.named_buffers()


def _policy(trainer: Any) -> Any:
    """The trainer's model without its accelerate/DDP wrapper."""
    accelerator = getattr(trainer, "accelerator", None)
    return accelerator.unwrap_model(trainer.model) if accelerator is not None else trainer.model


class SamplingTrainer:
    """What the inner rollout sees while it samples: the trainer with the decoder as its model,
    `policy_version`, and its step frozen at `step`, the step the batch is for (the records'
    `train_step`, dynamic sampling's seeds and the rewards read it). It never samples with vLLM
    (`--async` refuses it): the loss pass sets the trainer's `use_vllm` for the length of each
    loss computation (`logprob_agreement`), which the sampling thread must not read."""

    #: Pinned here, not read through the trainer (whose flag the loss pass flips meanwhile).
    use_vllm = False

    def __init__(self, trainer: Any, model: Any, version: int, step: int) -> None:
        self._trainer, self.model, self.accelerator, self.policy_version = trainer, model, None, version
        state = getattr(trainer, "state", None)
        self.state = (
            dataclasses.replace(state, global_step=step) if dataclasses.is_dataclass(state) else state
        )

    def __getattr__(self, name: str) -> Any:
        return getattr(self._trainer, name)


@dataclasses.dataclass
class _Batch:
    """A batch sampled (or sampling) on the background thread."""

    version: int
    prompts: list[str]
    thread: threading.Thread
    out: dict[str, list[Any]] | None = None
    error: BaseException | None = None


class AsyncRollout(Layer):
    """Samples the next step's batch while this step trains; drops batches staler than `max_staleness`."""

    def __init__(
        self,
        inner: Rollout,
        max_staleness: int,
        *,
        seed: int = 0,
        prompt_for: Callable[[str, int | None], str] = task_prompt,
    ) -> None:
        if max_staleness < 0:
            raise ValueError(
                f"max_staleness must be >= 0 (policy versions a batch may lag), got {max_staleness}"
            )
        super().__init__(inner)
        self.max_staleness, self.seed, self.prompt_for = max_staleness, seed, prompt_for
        self.decoder: PolicyDecoder | None = None
        self.pending: _Batch | None = None
        self.group: Any = None  # the sampling thread's process group (`ranks.side_group`)
        self._grouped = False
        self.counts: Counter[str] = Counter()  # since the last log
        self.last: dict[str, float] = {}  # the last trained batch's version, staleness, wait

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        step = trainer_step(trainer)
        started = time.perf_counter()
        out, version = self._take(step, len(prompts))
        if out is None:
            out, version = self._play(list(prompts), trainer, step), step
        self.last = {"policy_version": version, "staleness": step - version,
                     "wait_s": time.perf_counter() - started}  # fmt: skip
        if self.max_staleness > 0:
            self._start(self.next_prompts(prompts, step), trainer, step)
        return out

    def next_prompts(self, prompts: list[Any], step: int) -> list[str]:
        """The next batch: these groups' tasks, each on a fresh training seed drawn from (seed, step)
        in the order of the whole batch (every rank's share), so N processes draw the seeds of one."""
        rng = random.Random(f"{self.seed}:async:{step}")
        fresh: dict[str, str] = {}
        for prompt in ranks.all_gather([str(p) for p in prompts]):  # a group's rows share one seed
            if prompt not in fresh:
                fresh[prompt] = self.prompt_for(prompt_key(prompt), rng.randrange(1_000_000, 2_000_000))
        return [fresh[str(p)] for p in prompts]

    def _play(self, prompts: list[Any], trainer: Any, version: int) -> dict[str, list[Any]]:
        """One batch on the decoder holding policy `version`, each row tagged with it."""
        if self.decoder is None:
            self.decoder = PolicyDecoder(_policy(trainer))
        self.decoder.receive(_policy(trainer), version)
        out = dict(self.inner(prompts, SamplingTrainer(trainer, self.decoder.model, version, version)))
        out["policy_version"] = [version] * len(prompts)
        return out

    def _start(self, prompts: list[str], trainer: Any, version: int) -> None:
        """Sampling of `prompts` begun on a background thread (after the weights are sent)."""
        if self.decoder is None:
            self.decoder = PolicyDecoder(_policy(trainer))
        if not self._grouped:  # every rank reaches its first `_start` at the same step
            self.group, self._grouped = ranks.side_group(), True
        self.decoder.receive(_policy(trainer), version)  # here: the loss pass has not begun
        batch = _Batch(version, prompts, threading.Thread(name=f"envharness-rollout-v{version}", daemon=True,
                                                 target=lambda: self._sample(batch, prompts, trainer)))  # fmt: skip
        self.pending = batch
        batch.thread.start()

    def _sample(self, batch: _Batch, prompts: list[str], trainer: Any) -> None:
        try:
            sampler = SamplingTrainer(trainer, self.decoder.model, batch.version, batch.version + 1)
            with ranks.collectives_on(self.group):
                out = dict(self.inner(prompts, sampler))
            out["policy_version"] = [batch.version] * len(prompts)
            batch.out = out
        except BaseException as exc:  # handed to the training thread, which stops the run with it
            batch.error = exc

    def _take(self, step: int, rows: int) -> tuple[dict[str, list[Any]] | None, int]:
        """The batch sampled in the background, once it is done: None where there is none, or
        where it is more than `max_staleness` versions old (dropped and counted: `step` and the
        version are the same on every rank, so every rank drops it or none does)."""
        batch, self.pending = self.pending, None
        if batch is None:
            return None, step
        batch.thread.join()
        if batch.error is not None:
            raise RuntimeError(
                f"the background rollout ({batch.thread.name}, sampling for step {batch.version + 1}) "
                f"failed: {type(batch.error).__name__}: {batch.error}"
            ) from batch.error
        if step - batch.version > self.max_staleness:
            self.counts["dropped_episodes"] += rows
            self.counts["dropped_groups"] += len(set(batch.prompts))
            log.warning(
                "dropped a batch of %d episodes sampled by policy version %d: %d versions old at step %d, "
                "past --max-staleness %d; playing a fresh one",
                rows, batch.version, step - batch.version, step, self.max_staleness,
            )  # fmt: skip
            return None, step
        return batch.out, batch.version

    def close(self) -> None:
        """Waits for a batch still sampling (its episodes are recorded, never trained on)."""
        batch, self.pending = self.pending, None
        if batch is not None:
            batch.thread.join()
        if self.decoder is not None:
            self.decoder.destroy()
        self.inner.close()

    def callbacks(self) -> list[TrainerCallback]:
        return [*self.inner.callbacks(), _AsyncCallback(self)]


class _AsyncCallback(TrainerCallback):
    def __init__(self, layer: AsyncRollout) -> None:
        self.layer = layer

    def on_log(
        self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any
    ) -> None:
        if logs is not None and "loss" in logs:
            for name, value in self.layer.last.items():
                logs[f"async/{name}"] = value
            logs["async/dropped_episodes"] = self.layer.counts["dropped_episodes"]
            logs["async/dropped_groups"] = self.layer.counts["dropped_groups"]
            self.layer.counts = Counter()


__all__ = ["AsyncRollout", "PolicyDecoder", "SamplingTrainer"]
