"""How TRL's trainers run on the chosen device and dtype (`--device`, `--dtype`).

Training keeps float32 master weights on every device: bf16/fp16 run as mixed precision
(Accelerate's autocast), because a bf16 weight cannot hold an update of 2e-5 on a weight of
0.02 (bf16 spacing there is ~8e-5), so pure-bf16 Adam silently drops most small updates.
Sampling for the rollouts goes through the same autocast (Accelerate patches the model's
forward), so the sampler and the loss see the same precision; what still differs between
them is measured and corrected by `logprob_agreement.py`.
"""

from __future__ import annotations

from typing import Any

from envharness.models.device import Placement


def trainer_precision(placement: Placement) -> dict[str, Any]:
    """`TrainingArguments` fields for the placement (`use_cpu`, `bf16`, `fp16`)."""
    import torch

    return {
        "use_cpu": not placement.on_gpu,
        "bf16": placement.dtype == torch.bfloat16,
        "fp16": placement.dtype == torch.float16,
    }


def master_weights(model: Any, placement: Placement) -> Any:
    """The model on the placement's device with float32 weights (the dtype is the autocast's)."""
    import torch

    if placement.on_gpu:
        torch.cuda.set_device(placement.device)  # Accelerate's "cuda" is the current device
    return model.to(device=placement.device, dtype=torch.float32)


def check_model_device(model: Any, placement: Placement) -> None:
    """Refuse in words a trainer that put the model elsewhere than asked (a `cuda:N` it ignored)."""
    device = next(model.parameters()).device
    if device.type != placement.device.type or (placement.on_gpu and device.index != placement.device.index):
        raise RuntimeError(f"the trainer put the model on {device}, not on {placement.device} as asked")
