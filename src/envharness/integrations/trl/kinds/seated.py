"""The runs of a multi-player game with a model in the other seats: `SelfPlayRun` (`--opponent
self`, `kinds/self_play.py`) and `OpponentRun` (`--opponent <model spec>`, `kinds/opponent.py`).
They are text runs whose plan seats a model (`harness.plan.resolve_plan`); the text run's `play_row` builds
the rollout the seating asks for."""

from __future__ import annotations

from envharness.harness.opponents import is_model_spec
from envharness.integrations.trl.config import TrainConfig
from envharness.integrations.trl.kinds.text import TextRun


class SelfPlayRun(TextRun):
    name = "self-play"
    evaluates_held_out = False
    seats_models = True

    @classmethod
    def applies(cls, config: TrainConfig, vision: bool) -> bool:
        return (config.opponent or "").strip() == "self" and not vision


class OpponentRun(TextRun):
    name = "opponent"
    evaluates_held_out = False
    seats_models = True

    @classmethod
    def applies(cls, config: TrainConfig, vision: bool) -> bool:
        spec = (config.opponent or "").strip()
        return bool(spec) and spec != "self" and is_model_spec(spec) and not vision


__all__ = ["OpponentRun", "SelfPlayRun"]
