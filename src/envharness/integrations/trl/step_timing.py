"""Where a GRPO step's time goes: generation, environment, and the loss forward/backward.

    clock = StepClock()
    rollout = StepTimer(build_env_rollout_func(ENV, ..., backend_factory=clock.backend_factory), clock)
    trainer = GRPOTrainer(..., rollout_func=rollout, callbacks=[*rollout.callbacks(), ...])

Every logged step then carries `time/generate_s` (while the model backend holds a request:
prefill and decoding), `time/env_s` (the rest of the rollout, when no request is with the
model: resets, browser actions, harness; environment steps that overlap decoding count as
generation), `time/train_s`
(the rest of the step: TRL's loss forward, backward, optimizer; measured around TRL's own call
of the rollout, `RolloutCallTimer`, so under `--async` it excludes only the step's wait for its
batch, while `generate_s` and `env_s` add up the background sampling of the step's time),
`time/step_s` and
`tokens/prefill` (prompt tokens run through the model after shared-prompt reuse). A local
transformers model adds its decoder's split (`decoder/forwards`, `decoder/admissions`,
`decoder/forward_s`, `decoder/admit_s`, `decoder/sample_s`, `decoder/finish_s`: see
`models/continuous.DecoderStats`), which says what of `time/generate_s` is the model's passes.
Measured, not estimated: the backend call and the rollout call are timed where they happen.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from transformers import TrainerCallback

from envharness.harness.model_step import IDLE_CONTINUOUS_WAIT_S
from envharness.integrations.trl.layers import Layer, Rollout
from envharness.integrations.trl.rollout import trainer_backend


@dataclass
class _Totals:
    generate_s: float = 0.0
    rollout_s: float = 0.0
    called_s: float | None = None  # TRL's rollout call on the training thread (`RolloutCallTimer`)
    step_started: float = 0.0
    counters: dict[str, float] = field(default_factory=dict)  # the backend's, added up in the step


def backend_counters(backend: Any) -> dict[str, float]:
    """What a backend has counted so far: prompt tokens it prefilled, its decoder's split."""
    counters: dict[str, float] = {}
    if hasattr(backend, "prefill_tokens"):
        counters["tokens/prefill"] = backend.prefill_tokens
    if callable(getattr(backend, "decoder_stats", None)):
        counters.update({f"decoder/{k}": v for k, v in backend.decoder_stats().items()})
    return counters


class _TimedBackend:
    """A `ModelBackend` that adds the wall time during which any `generate` call is in flight to
    the step's totals (calls overlap on a backend that batches continuously: counted once)."""

    def __init__(self, inner: Any, totals: _Totals):
        self._inner, self._totals = inner, totals
        self.name = getattr(inner, "name", "timed")
        self.continuous = getattr(inner, "continuous", False)
        self._in_flight = 0
        self._since = 0.0
        self._before: dict[str, float] = {}

    @property
    def idle_wait_s(self) -> float:
        """The wrapped backend's own (`BatchingModelStep` asks the backend it is given)."""
        return getattr(self._inner, "idle_wait_s", IDLE_CONTINUOUS_WAIT_S)

    async def generate(self, requests: list[Any]) -> list[Any]:
        if self._in_flight == 0:
            self._since = time.perf_counter()
            self._before = backend_counters(self._inner)
        self._in_flight += 1
        try:
            return await self._inner.generate(requests)
        finally:
            self._in_flight -= 1
            if self._in_flight == 0:
                self._totals.generate_s += time.perf_counter() - self._since
                counters = self._totals.counters
                for key, value in backend_counters(self._inner).items():
                    counters[key] = counters.get(key, 0) + value - self._before.get(key, 0)

    async def aclose(self) -> None:
        await self._inner.aclose()


class StepClock:
    """One GRPO step's time split, shared by the timed backend (generation) and the `StepTimer`
    layer (the whole rollout); see the module docstring."""

    def __init__(self) -> None:
        self.totals = _Totals()
        self.history: list[dict[str, float]] = []

    def backend_factory(self, trainer: Any, inner_factory: Callable[[Any], Any] | None = None) -> Any:
        return _TimedBackend((inner_factory or trainer_backend)(trainer), self.totals)


class StepTimer(Layer):
    """The layer that times each rollout into `clock`; its callback logs the step's split."""

    def __init__(self, inner: Rollout, clock: StepClock) -> None:
        super().__init__(inner)
        self.clock = clock

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        started = time.perf_counter()
        try:
            return self.inner(prompts, trainer)
        finally:
            self.book(time.perf_counter() - started)

    def book(self, seconds: float) -> None:
        self.clock.totals.rollout_s += seconds

    def callbacks(self) -> list[TrainerCallback]:
        return [*self.inner.callbacks(), _StepTimingCallback(self.clock)]


class RolloutCallTimer(StepTimer):
    """The outermost layer: how long TRL's call of the rollout held the training thread. The
    step's rest is its loss pass (`time/train_s`); under `--async` the call only waits for a
    batch sampled in the background, which `StepTimer`'s own sum would count as rollout time.
    (`StepTimer`'s callback logs it: this one adds none.)"""

    def book(self, seconds: float) -> None:
        totals = self.clock.totals
        totals.called_s = (totals.called_s or 0.0) + seconds

    def callbacks(self) -> list[TrainerCallback]:
        return self.inner.callbacks()


class _StepTimingCallback(TrainerCallback):
    def __init__(self, timer: StepClock):
        self.timer = timer
        self._last: dict[str, float] | None = None

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.timer.totals = t = self.timer.totals
        t.generate_s = t.rollout_s = 0.0
        t.called_s = None
        t.counters = {}
        t.step_started = time.perf_counter()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        t = self.timer.totals
        step_s = time.perf_counter() - t.step_started
        self._last = {
            "time/step_s": round(step_s, 3),
            "time/generate_s": round(t.generate_s, 3),
            "time/env_s": round(t.rollout_s - t.generate_s, 3),
            "time/train_s": round(step_s - (t.rollout_s if t.called_s is None else t.called_s), 3),
            "tokens/prefill": t.counters.get("tokens/prefill", 0),
            **{k: round(v, 3) for k, v in t.counters.items() if k.startswith("decoder/")},
        }
        self.timer.history.append(self._last)

    def on_log(
        self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any
    ) -> None:
        if logs is not None and self._last is not None and "loss" in logs:
            logs.update(self._last)
