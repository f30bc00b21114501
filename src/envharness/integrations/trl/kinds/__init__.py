"""The kinds of training run, each one implementation of `RunKind` (`base.py`).

    base.py    `RunKind` (the interface), `RunPlan` (what a run plays: a frozen
               configuration and its plan of play, `harness/plan.py`, one row per
               environment) and `RunParts` (what a rollout is built from)
    text.py    `TextRun`: a causal LM through the harness's loop (one server, or a fleet);
               `play_row`, the rollout of one row, chosen by who sits in its other seats
    seated.py  `SelfPlayRun` and `OpponentRun`: text runs with a model in the other seats
    vision.py  `VisionRun`: a vision-language model on screenshots, `VisionGRPOTrainer`
    mix.py     `MixRun`: several environments, one row, server and rollout each, one batch
    agent.py   `AgentRun`: an agent that owns its loop, through the policy endpoint
    self_play.py `SelfPlayRollout`: every seat of a multi-player game played by the policy
    opponent.py `OpponentRollout`: the policy in one seat, a frozen model in the others

A new kind is one more class here, listed in `RUN_KINDS` before the kinds it narrows;
`train()` does not change. Many processes are not a kind: every kind runs under a launcher
(`ranks.py`).
"""

from __future__ import annotations

from envharness._deprecated import deprecated_names
from envharness.integrations.trl.config import TrainConfig
from envharness.integrations.trl.errors import TrainSetupError
from envharness.integrations.trl.kinds.agent import AgentRun
from envharness.integrations.trl.kinds.base import RunKind, RunParts, RunPlan
from envharness.integrations.trl.kinds.mix import MixRun
from envharness.integrations.trl.kinds.seated import OpponentRun, SelfPlayRun
from envharness.integrations.trl.kinds.text import TextRun
from envharness.integrations.trl.kinds.vision import VisionRun

#: Asked in order; the first that applies runs. The text run applies to any text model.
RUN_KINDS: list[type[RunKind]] = [MixRun, AgentRun, SelfPlayRun, OpponentRun, VisionRun, TextRun]

__getattr__ = deprecated_names(__name__)


def pick_run(config: TrainConfig, vision: bool) -> RunKind:
    """The kind of run `config` asks for (`vision`: the model is a vision-language model)."""
    kind = next(k for k in RUN_KINDS if k.applies(config, vision))()
    if vision and not kind.trains_vision:
        raise TrainSetupError(f"a vision-language model cannot train as a {kind.name} run (--{kind.name})")
    return kind


__all__ = [
    "RUN_KINDS",
    "AgentRun",
    "MixRun",
    "OpponentRun",
    "RunKind",
    "RunParts",
    "RunPlan",
    "SelfPlayRun",
    "TextRun",
    "VisionRun",
    "pick_run",
]
