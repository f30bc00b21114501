"""How far the sampler's logprobs are from the training forward's, logged every step and corrected.

The rollouts record each token's logprob as it was sampled (`models/sampling.py`). In fp32
the training forward recomputes the same numbers (|difference| ~1e-5); in bf16/fp16, or with
vLLM generating, it does not (bf16 on an H200: mean 0.05 nats, ratios 0.75-1.27), and GRPO's
update is then slightly off-policy without anyone being told.

`measure_and_correct(trainer)` wraps the trainer's batch preparation: after TRL has scored a
batch, one no-grad forward of the training model gives the per-token logprobs the loss will
start from; the step logs the gap under the names TRL uses for vLLM
(`sampling/sampling_logp_difference/mean|max`, `sampling/importance_sampling_ratio/min|mean|max`),
and, with `correct=True`, the loss weighs each token by the truncated importance ratio
min(p_train / p_sample, C) (TIS; C = `vllm_importance_sampling_clip_max`, 3 by default), exactly
as TRL does behind vLLM. With vLLM (`use_vllm`) TRL measures and corrects by itself, and this
wrapper stands aside. A batch whose loss is skipped for lack of signal (`no_signal.py`) pays
for no forward and logs nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

from envharness.integrations.trl import ranks

#: What the loss pass of `GRPOTrainer` accepts besides ids and masks (a VLM's pixels, ...).
_FORWARD_KEYS = (
    "pixel_values",
    "image_grid_thw",
    "pixel_attention_mask",
    "image_sizes",
    "num_images",
    "spatial_shapes",
    "token_type_ids",
    "mm_token_type_ids",
    "image_position_ids",
    "num_tiles",
)


def measure_and_correct(trainer: Any, *, correct: bool = True) -> bool:
    """Install the measurement (and the correction) on `trainer`; False where TRL does it itself."""
    if getattr(trainer, "use_vllm", False):
        return False
    prepare = trainer._generate_and_score_completions
    compute_loss = trainer.compute_loss
    clip_max = getattr(trainer.args, "vllm_importance_sampling_clip_max", 3.0) or 3.0

    def prepare_and_measure(*args: Any, **kwargs: Any) -> dict[str, Any]:
        output = prepare(*args, **kwargs)
        sampled = output.get("sampling_per_token_logps")
        # one decision on every rank: the measuring forward is a DDP forward on each of them
        skipped = getattr(trainer, "no_signal_skipped", None) is not None and ranks.all_agree(
            not bool(output["advantages"].abs().gt(0).any())
        )
        if sampled is None or skipped:
            return output
        mask = (
            output["completion_mask"] * output["tool_mask"]
            if "tool_mask" in output
            else output["completion_mask"]
        )
        recomputed = output.get("old_per_token_logps")
        if recomputed is None:
            recomputed = training_logprobs(trainer, output)
            output["old_per_token_logps"] = recomputed  # the loss's ratio starts from the training forward
        ratio = truncated_ratio(recomputed, sampled, mask, clip_max)
        for name, value in agreement_metrics(recomputed, sampled, mask, ratio).items():
            trainer._metrics["train"][name].append(value)
        if correct:
            output["importance_sampling_ratio"] = ratio
        return output

    def compute_loss_corrected(model: Any, inputs: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        if "importance_sampling_ratio" not in inputs:
            return compute_loss(model, inputs, *args, **kwargs)
        with _loss_applies_ratio(trainer):
            return compute_loss(model, inputs, *args, **kwargs)

    trainer._generate_and_score_completions = prepare_and_measure
    trainer.compute_loss = compute_loss_corrected
    return True


def training_logprobs(trainer: Any, output: dict[str, Any]) -> torch.Tensor:
    """Per-token logprobs of the batch's completions under the training model, as the loss computes them."""
    prompt_ids, completion_ids = output["prompt_ids"], output["completion_ids"]
    ids = torch.cat([prompt_ids, completion_ids], dim=1)
    attention = torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1)
    extra = {k: output[k] for k in _FORWARD_KEYS if output.get(k) is not None}
    with torch.no_grad():
        logps, _, _ = trainer._get_per_token_logps_and_entropies(
            trainer.model,
            ids,
            attention,
            completion_ids.size(1),
            batch_size=trainer.args.per_device_train_batch_size,
            **extra,
        )
    return logps


def truncated_ratio(
    recomputed: torch.Tensor, sampled: torch.Tensor, mask: torch.Tensor, clip_max: float
) -> torch.Tensor:
    """min(exp(recomputed - sampled), clip_max) per token; 1 where masked or where a logprob is missing."""
    diff = torch.nan_to_num((recomputed - sampled) * mask, nan=0.0)
    return torch.exp(diff).clamp(max=clip_max)


def agreement_metrics(
    recomputed: torch.Tensor, sampled: torch.Tensor, mask: torch.Tensor, ratio: torch.Tensor
) -> dict[str, float]:
    """TRL's names for the gap between the two logprobs over the tokens the loss sees."""
    keep = mask.bool() & ~torch.isnan(sampled)
    delta = (recomputed - sampled).abs()[keep]
    kept_ratio = ratio[keep]
    if delta.numel() == 0:
        return {}
    return {
        "sampling/sampling_logp_difference/mean": float(delta.mean()),
        "sampling/sampling_logp_difference/max": float(delta.max()),
        "sampling/importance_sampling_ratio/min": float(kept_ratio.min()),
        "sampling/importance_sampling_ratio/mean": float(kept_ratio.mean()),
        "sampling/importance_sampling_ratio/max": float(kept_ratio.max()),
    }


@contextlib.contextmanager
def _loss_applies_ratio(trainer: Any) -> Iterator[None]:
    """TRL's loss multiplies by `inputs["importance_sampling_ratio"]` only behind vLLM (`use_vllm`,
    read there and nowhere else in the loss pass): set for the length of one loss computation."""
    saved = trainer.use_vllm, trainer.vllm_importance_sampling_correction
    trainer.use_vllm, trainer.vllm_importance_sampling_correction = True, True
    try:
        yield
    finally:
        trainer.use_vllm, trainer.vllm_importance_sampling_correction = saved
