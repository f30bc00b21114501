"""What the KL term (`--beta`) costs: the reference model's memory and its time in each step.

With `beta > 0` TRL scores every batch under the starting model too, to hold the policy near
what SFT taught. Full fine-tuning keeps a second copy of the model for that (`trainer.ref_model`);
a LoRA run has no copy and runs its own model with the adapter switched off. Each logged step
then carries `ref/memory_mb` (the copy's weights and buffers: 0 with LoRA) and `ref/forward_s`
(the step's seconds in the reference's forward passes, measured where TRL calls them), and the
run's log says both once at the start.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from envharness.integrations.trl import ranks

log = logging.getLogger(__name__)


def model_bytes(model: Any) -> int:
    """The bytes of a model's weights and buffers (what a copy of it holds)."""
    tensors = [*model.parameters(), *model.buffers()]
    return sum(t.numel() * t.element_size() for t in tensors)


def _adapter_off(model: Any) -> bool:
    """Whether a LoRA model's adapters are switched off now (TRL's reference pass)."""
    for module in model.modules():
        if hasattr(module, "disable_adapters"):
            return bool(module.disable_adapters)
    return False


class ReferenceCost(TrainerCallback):
    """Times the reference's forward passes (`trainer._get_per_token_logps_and_entropies` called
    on the reference) and logs them with its memory on every step."""

    def __init__(self, trainer: Any) -> None:
        self.ref = getattr(trainer, "ref_model", None)
        self.memory_mb = round(model_bytes(self.ref) / 2**20, 2) if self.ref is not None else 0.0
        self.seconds = 0.0
        self._wrap(trainer)

    def _wrap(self, trainer: Any) -> None:
        score = trainer._get_per_token_logps_and_entropies
        unwrap = trainer.accelerator.unwrap_model

        def timed(model: Any, *args: Any, **kwargs: Any) -> Any:
            is_reference = model is self.ref if self.ref is not None else _adapter_off(unwrap(model))
            if not is_reference:
                return score(model, *args, **kwargs)
            started = time.perf_counter()
            try:
                return score(model, *args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - started

        trainer._get_per_token_logps_and_entropies = timed

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        how = "a copy of the model" if self.ref is not None else "the model with its adapter off"
        log.info("KL term (beta %g): the reference is %s, %.1f MiB", args.beta, how, self.memory_mb)

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.seconds = 0.0

    def on_log(
        self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any
    ) -> None:
        if logs is not None and "loss" in logs:
            logs["ref/memory_mb"] = self.memory_mb
            logs["ref/forward_s"] = round(self.seconds, 4)


def give_reference_a_source(model: Any, out: Path, beta: float, *, lora: bool = False) -> None:
    """TRL builds the reference by loading the policy's own path again; a model built in memory
        (`--model tiny`, a model handed to `train()`) has none, so its starting weights are saved
        to `out`/reference_model and named its path (rank 0 writes, the others wait). A LoRA run
    needs none: its reference is the model with the adapter off."""
    config = getattr(model, "config", None)
    if not beta or lora or config is None or getattr(model, "peft_config", None) or config._name_or_path:
        return
    start = out / "reference_model"
    if ranks.is_main():
        model.save_pretrained(str(start))
    ranks.barrier()
    config._name_or_path = str(start)


def measure_reference(trainer: Any) -> ReferenceCost | None:
    """The reference's cost logged on every step (None, and nothing changed, with beta 0)."""
    if not getattr(trainer, "beta", 0.0):
        return None
    cost = ReferenceCost(trainer)
    # first: the callbacks that write the step's log (train_log.jsonl, the console) see its numbers
    trainer.callback_handler.callbacks.insert(0, cost)
    return cost
