"""The vision run: a vision-language model plays on screenshots (the environment's "vision"
prompt style) and `VisionGRPOTrainer`'s loss pass sees the pixels the policy saw."""

from __future__ import annotations

import functools
from typing import Any

from envharness.integrations.trl.config import TrainConfig
from envharness.integrations.trl.errors import TrainSetupError
from envharness.integrations.trl.kinds.base import RunParts, RunPlan
from envharness.integrations.trl.kinds.text import TextRun, one_env_plan
from envharness.integrations.trl.layers import Rollout
from envharness.integrations.trl.precision import master_weights
from envharness.integrations.trl.prompting import prompt_style
from envharness.prompts.vision import VisionPromptConfig

#: The prompt style a vision model trains on, recorded in train_config.json so that
#: `eval --prompt vision` plays what was trained.
VISION_PROMPT = "vision"


class VisionRun(TextRun):
    name = "vision"
    trains_vision = True
    evaluates_held_out = False  # held-out evaluation plays text policies

    @classmethod
    def applies(cls, config: TrainConfig, vision: bool) -> bool:
        return vision

    def resolve(self, config: TrainConfig) -> RunPlan:
        plan = one_env_plan(config, VISION_PROMPT)
        env = plan.env
        # the environment's training default stands for "not chosen": it becomes "vision"
        if config.prompt not in (VISION_PROMPT, "", env.require_harness().train_prompt):
            raise TrainSetupError(
                f"a vision-language model trains on --prompt vision (screenshots in every turn), not {config.prompt!r}"
            )
        views = prompt_style(VISION_PROMPT, env).text_views
        if views and config.vision_page_text not in views:
            raise TrainSetupError(
                f"--vision-page-text {config.vision_page_text}: {env.name} shows one of {', '.join(views)}"
            )
        return plan

    # integrations/trl/vision.py loads TRL: imported when a vision run starts, so that the
    # checks before a launch (the parent of --processes) do without it
    def load_model(self, config: TrainConfig, placement: Any) -> tuple[Any, Any]:
        from envharness.integrations.trl.vision import load_vision_model

        model, processor = load_vision_model(config.model)
        return master_weights(model, placement), processor

    def rollout(self, parts: RunParts, clients: Any) -> Rollout:
        from envharness.integrations.trl.vision import build_vision_rollout_func, vision_trainer_backend

        config = parts.config
        return build_vision_rollout_func(
            clients,
            env=parts.env,
            default_task=config.tasks[0],
            limits=parts.limits,
            records=parts.records,
            backend_factory=functools.partial(parts.backend_factory, inner_factory=vision_trainer_backend),
            vision=VisionPromptConfig(max_side=config.screenshot_max_side, page_text=config.vision_page_text),
        )

    def trainer_class(self) -> type:
        from envharness.integrations.trl.vision import VisionGRPOTrainer

        return VisionGRPOTrainer
