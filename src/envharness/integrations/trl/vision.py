"""GRPO for vision-language policies where the loss pass sees the screenshots the policy saw.

TRL 1.16's `GRPOTrainer` hands every extra key of a `rollout_func` (images included) only to
the reward functions; its loss pass rebuilds images from the *dataset* column, so the
screenshots of an episode never reach it. Nothing raises: the policy is trained as if it were
blind and off-policy (loss-time and sampling logprobs disagree).

`VisionGRPOTrainer` fixes that. The rollout (`build_vision_rollout_func`) returns, per row,
the episode's images in placeholder order (`episode_images`) and how many placeholder
tokens each took (`image_token_counts`). After TRL has built the batch, the trainer checks
every row's placeholder tokens against the image processor (a row whose tokens and images
disagree raises: the missing-image guard) and attaches the pixel tensors the processor makes
(`pixel_values`, `image_grid_thw`, `num_images`, `mm_token_type_ids`), built by the same
function the sampling backend used (`vision_processors.image_inputs`). Loss-time logprobs
then equal the sampling logprobs (< 1e-5; tests/test_trl_vision.py, which also proves that
the stock trainer does not, so a TRL upgrade that changes this is noticed).

What cannot be exact yet is refused (`check_exact_settings`): logprobs TRL computes inside
`_generate_and_score_completions` without the pixels (a reference model for `beta != 0`,
old logprobs when generation is not aligned with optimizer steps or `num_iterations > 1`),
vLLM generation (it samples on its own engine, without our images), and top-k/top-p
(sampling logprobs are then of the truncated distribution, the loss's are not).

Two pixel layouts are supported. Qwen2/2.5/3-VL (`image_grid_thw`): patches of all images
concatenated, `num_images` per row, which TRL uses to slice and to split for gradient
accumulation. Idefics3-style processors (`image_seq_len`): `pixel_values` has one block of
tiles per row (padded with empty tiles, which the model drops); TRL 1.16 slices such tensors
by image count when their first dimension equals `sum(num_images)`, so the trainer passes
`num_images = [1] * rows` (one block per row), which makes that slicing the row slicing it
must be. Other layouts are refused.

This overrides TRL private methods (`_generate`, `_generate_and_score_completions`); it is
written for trl 1.16 and checked by tests against the installed version.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from trl import GRPOTrainer

from envharness.core.registry import DEFAULT_ENV
from envharness.integrations.trl.errors import TrainSetupError
from envharness.integrations.trl.layers import RolloutFunc
from envharness.integrations.trl.rollout import build_trl_rollout_func
from envharness.models.device import model_placement
from envharness.models.transformers_vision import on_model
from envharness.models.vision_processors import (
    TINY_PREFIX,
    image_inputs,
    image_token_id,
    load_processor,
    placeholder_counts,
)
from envharness.prompts.vision import VisionPromptConfig

IMAGES_KEY = "episode_images"
COUNTS_KEY = "image_token_counts"


class VisionTrainingError(TrainSetupError):
    """A vision GRPO run that cannot be exact as configured (said in words)."""


# -- models ----------------------------------------------------------------------------------
def load_vision_model(spec: str) -> tuple[Any, Any]:
    """(model, processor): `tiny-vlm[:ARCH]` (random, built here, for smoke runs), `embedded-vlm`
    (SmolLM2 + an untrained vision encoder, offline) or a VLM directory / hub id
    (`AutoModelForImageTextToText` + its processor)."""
    if spec == "embedded-vlm":
        from envharness.models.embedded_vlm import build_embedded_vlm

        return build_embedded_vlm()
    if spec == TINY_PREFIX or spec.startswith(TINY_PREFIX + ":"):
        from envharness.models.tiny_vlm import build_tiny_vlm

        return build_tiny_vlm(spec.partition(":")[2] or "qwen2-vl")
    from transformers import AutoModelForImageTextToText

    path = str(Path(spec).expanduser()) if Path(spec).expanduser().is_dir() else spec
    return AutoModelForImageTextToText.from_pretrained(path), load_processor(path)


def check_processor(processor: Any) -> None:
    """Refuse processors this trainer cannot hand exact pixels to TRL's loss pass for."""
    if not hasattr(processor, "image_processor"):
        raise VisionTrainingError(
            f"vision GRPO needs the model's processor (with an image processor), got {type(processor).__name__}"
        )
    if getattr(processor, "image_seq_len", None) is None and not hasattr(
        processor.image_processor, "merge_size"
    ):
        raise VisionTrainingError(
            f"{type(processor).__name__}: vision GRPO supports Qwen2/2.5/3-VL-style (image_grid_thw) and Idefics3-style "
            "(image_seq_len) processors; this one lays its pixels out otherwise, which TRL's loss pass may slice wrongly. "
            "Evaluate such models with `envharness eval`."
        )


def check_exact_settings(args: Any) -> None:
    """Raise `VisionTrainingError` for settings whose loss-time logprobs would not see the pixels."""
    problems = []
    if getattr(args, "beta", 0.0):
        problems.append(
            "beta != 0 (the reference model's logprobs are computed without the screenshots): use beta=0"
        )
    if getattr(args, "use_vllm", False):
        problems.append(
            "use_vllm (vLLM samples without the episode's images here): generate with the trained model"
        )
    if getattr(args, "num_iterations", 1) != 1:
        problems.append(
            "num_iterations > 1 (old logprobs are computed without the screenshots): use num_iterations=1"
        )
    every = (getattr(args, "steps_per_generation", None) or args.gradient_accumulation_steps) * getattr(
        args, "num_iterations", 1
    )
    if args.gradient_accumulation_steps % every:
        problems.append(
            "generation not aligned with optimizer steps (old logprobs without the screenshots): leave steps_per_generation unset"
        )
    if (getattr(args, "top_k", 0) or 0) > 0 or (getattr(args, "top_p", 1.0) or 1.0) < 1.0:
        problems.append(
            "top_k/top_p (sampling logprobs are then of a truncated distribution the loss does not use): leave them off"
        )
    if problems:
        raise VisionTrainingError(
            "vision GRPO cannot keep loss-time logprobs exact with: " + "; ".join(problems)
        )


# -- the trainer -----------------------------------------------------------------------------
class VisionGRPOTrainer(GRPOTrainer):
    """`GRPOTrainer` whose loss pass gets the pixels of each episode's screenshots."""

    def __init__(self, *args: Any, **kwargs: Any):
        check_processor(kwargs.get("processing_class"))
        if kwargs.get("args") is not None:
            check_exact_settings(kwargs["args"])
        super().__init__(*args, **kwargs)
        check_exact_settings(self.args)
        self._episode_images: list[list[Any]] | None = None
        self._episode_counts: list[list[int]] | None = None

    def _generate(self, prompts: list) -> Any:
        out = super()._generate(prompts)
        extra = out[5]
        if IMAGES_KEY not in extra or COUNTS_KEY not in extra:
            raise VisionTrainingError(
                f"the rollout_func returned no {IMAGES_KEY!r}/{COUNTS_KEY!r}: without them the loss pass would not see the "
                "screenshots. Build it with build_vision_rollout_func (or return both keys, one list per row)."
            )
        self._episode_images = extra.pop(IMAGES_KEY)
        self._episode_counts = extra.pop(COUNTS_KEY)
        return out

    def _generate_and_score_completions(self, inputs: Any) -> dict[str, Any]:
        out = super()._generate_and_score_completions(inputs)
        images, counts = self._episode_images, self._episode_counts
        self._episode_images = self._episode_counts = None
        if out.get("old_per_token_logps") is not None or out.get("ref_per_token_logps") is not None:
            raise VisionTrainingError(
                "TRL computed old/reference logprobs without the screenshots; see check_exact_settings"
            )
        assert images is not None and counts is not None  # _generate ran (or raised)
        pixels = attach_pixels(
            self.processing_class, out["prompt_ids"], out["completion_ids"], images, counts
        )
        out.update(
            on_model(pixels, model_placement(self.model))
        )  # pixels in the model's dtype (bf16 on a GPU)
        return out


def attach_pixels(
    processor: Any,
    prompt_ids: torch.Tensor,
    completion_ids: torch.Tensor,
    images: list[list[Any]],
    counts: list[list[int]],
) -> dict[str, Any]:
    """The multimodal inputs of a padded batch (prompt left-padded, completion right-padded)
    whose row i shows `images[i]`. Raises ValueError when a row's placeholder tokens do not
    match what the image processor makes of its images (the missing-image guard)."""
    ids = torch.cat([prompt_ids, completion_ids], dim=1)
    if len(images) != ids.size(0) or len(counts) != ids.size(0):
        raise ValueError(f"{len(images)} image lists / {len(counts)} count lists for {ids.size(0)} rows")
    token = image_token_id(processor)
    for row, (row_images, row_counts) in enumerate(zip(images, counts)):
        expected = placeholder_counts(processor, list(row_images))
        found = int((ids[row] == token).sum())
        if found != sum(expected) or list(row_counts) != expected:
            raise ValueError(
                f"row {row}: {found} image placeholder tokens, but its {len(row_images)} image(s) take {sum(expected)} "
                f"(rollout said {list(row_counts)}): the loss pass would not see what the policy saw"
            )
    extra = image_inputs(processor, [list(r) for r in images], ids)
    if "pixel_values" in extra:
        tiled = (
            getattr(processor, "image_seq_len", None) is not None
        )  # one block of tiles per row: see the module docstring
        extra["num_images"] = [1] * len(images) if tiled else [len(r) for r in images]
    return {k: v.to(ids.device) if isinstance(v, torch.Tensor) else v for k, v in extra.items()}


# -- the rollout -----------------------------------------------------------------------------
def vision_trainer_backend(trainer: Any) -> Any:
    """The model being trained, sampled with `TransformersVisionBackend` (exact logprobs)."""
    from envharness.models.transformers_vision import TransformersVisionBackend

    model = trainer.model
    accelerator = getattr(trainer, "accelerator", None)
    if accelerator is not None:
        model = accelerator.unwrap_model(model)
    return TransformersVisionBackend(model, trainer.processing_class, name="trainer-vlm")


def build_vision_rollout_func(
    client_factory: Callable[[], Any],
    *,
    env: str = DEFAULT_ENV,
    default_task: str | None = None,
    vision: VisionPromptConfig | None = None,
    session_factory_kwargs: dict[str, Any] | None = None,
    **kwargs: Any,
) -> RolloutFunc:
    """A `rollout_func` for `VisionGRPOTrainer`: the sessions of `env`'s "vision" prompt style
    (screenshots in every prompt and tool result), the trainer's VLM as the policy, and per row
    the episode's images and placeholder counts for the loss pass."""
    from envharness.core.registry import env_harness
    from envharness.prompts import get_prompt_style

    vision = vision or VisionPromptConfig()
    if vision.keep_screenshots is not None:
        raise VisionTrainingError(
            "keep_screenshots must be None for training: dropping a screenshot rewrites earlier tokens"
        )
    harness = env_harness(env)
    try:
        style = get_prompt_style("vision", env)
    except ValueError:
        style = None
    if style is None or style.session_factory is None:
        raise VisionTrainingError(
            f"{env} has no 'vision' prompt style (sessions that show screenshots) to train a VLM on"
        )
    factory = style.session_factory(
        client_factory,
        vision=vision,
        default_task=default_task or harness.default_tasks[0],
        **(session_factory_kwargs or {}),
    )
    kwargs.setdefault("tool_call_parser", harness.tool_call_parser)
    kwargs.setdefault("send_tools", False)
    kwargs.setdefault("backend_factory", vision_trainer_backend)
    return build_trl_rollout_func(factory, with_images=True, **kwargs)
