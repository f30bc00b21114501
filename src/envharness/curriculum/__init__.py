"""Which task a training step practises next: `UniformSampler` (the baseline) or
`SignalSampler`, which follows where GRPO can learn (see `sampler.py`)."""

from envharness.curriculum.sampler import (
    SAMPLERS,
    SignalSampler,
    TaskSampler,
    UniformSampler,
    make_sampler,
)

__all__ = ["SAMPLERS", "SignalSampler", "TaskSampler", "UniformSampler", "make_sampler"]
