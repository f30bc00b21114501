"""TRL's `rollout_func` as an object, and the layers `train()` stacks around it.

A `Rollout` is called as TRL calls its `rollout_func`, `rollout(prompts, trainer)`, and says
what it did and holds: `records` (the writer every episode goes to), `metrics` (the last
call's counts: episodes, errors, infra failures, ...), `close()` (what it holds, such as an
agent's policy endpoint or an opponent's model, released once training ends) and
`callbacks()` (the `TrainerCallback`s that log what it measured at each step).

A `Layer` wraps an inner rollout and forwards all of that, as Gymnasium's `Wrapper` wraps an
environment or Starlette's middleware an app: it overrides `__call__` (and `callbacks()` where
it logs) and nothing else. `train()` declares its layers in one list and `stack_layers` builds
them inside-out, the first wrapping the kind's own rollout, the last the one TRL calls::

    layers = [partial(StepTimer, clock=clock), GroupStats, partial(CurriculumLayer, ...), ...]
    rollout = stack_layers(kind.rollout(parts, clients), layers)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from transformers import TrainerCallback

    from envharness.harness.records import EpisodeRecordWriter

#: What TRL calls: (prompts, trainer) -> the batch's fields.
RolloutFunc = Callable[[list[Any], Any], dict[str, list[Any]]]


class Rollout:
    """TRL's `rollout_func`: one episode per prompt, played with the trainer's model."""

    #: Every episode goes here (None: not kept).
    records: EpisodeRecordWriter | None = None
    #: The last call's counts; each call replaces them.
    metrics: Mapping[str, Any] = MappingProxyType({})

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        raise NotImplementedError

    def close(self) -> None:
        """Release what the rollout holds (nothing, unless it says otherwise)."""

    def callbacks(self) -> list[TrainerCallback]:
        """The callbacks that log what it measured (none, unless it says otherwise)."""
        return []


class FunctionRollout(Rollout):
    """A plain `rollout_func(prompts, trainer)` as a `Rollout` (for a rollout written by hand)."""

    def __init__(self, play: RolloutFunc, records: EpisodeRecordWriter | None = None) -> None:
        self.play, self.records = play, records

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        return self.play(prompts, trainer)


class Layer(Rollout):
    """A rollout around `inner`: by default it plays `inner` and forwards everything it says."""

    def __init__(self, inner: Rollout) -> None:
        self.inner = inner

    @property
    def records(self) -> EpisodeRecordWriter | None:
        return self.inner.records

    @property
    def metrics(self) -> Mapping[str, Any]:
        return self.inner.metrics

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        return self.inner(prompts, trainer)

    def close(self) -> None:
        self.inner.close()

    def callbacks(self) -> list[TrainerCallback]:
        return self.inner.callbacks()


def stack_layers(rollout: Rollout, layers: Sequence[Callable[[Rollout], Rollout]]) -> Rollout:
    """`rollout` inside `layers`, built inside-out: the first layer wraps `rollout`, the last
    is the one TRL calls. Their callbacks come in the same order (`Rollout.callbacks`)."""
    for layer in layers:
        rollout = layer(rollout)
    return rollout


__all__ = ["FunctionRollout", "Layer", "Rollout", "RolloutFunc", "stack_layers"]
