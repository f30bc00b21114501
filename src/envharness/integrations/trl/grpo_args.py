"""TRL's arguments for a run: `GRPOConfig` (one generation per optimizer step, its loss in
passes of `micro_batch` episodes), the LoRA adapter's `LoraConfig`, and the up-front check
that one loss pass fits the device.

TRL and peft are imported when the arguments are built: `sft` and the command line import
this module for `loss_passes` without paying for them.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from envharness.integrations.trl import loss_memory, ranks
from envharness.integrations.trl.config import TrainConfig
from envharness.integrations.trl.errors import TrainSetupError
from envharness.integrations.trl.precision import trainer_precision
from envharness.integrations.trl.tracking import grpo_tracking_options
from envharness.models.device import resolve

#: The layers a LoRA adapter trains (those of the Llama-style models `train` loads).
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def loss_passes(config: TrainConfig, processes: int = 1) -> tuple[int, int]:
    """(episodes per loss pass, passes per step) of the configured batch on each of
    `processes` ranks, which share the batch: N processes play and learn the same batch as one."""
    batch = config.num_generations * config.groups_per_step
    if batch % processes:
        raise TrainSetupError(
            f"the batch of {batch} episodes (--num-generations {config.num_generations} x "
            f"--groups-per-step {config.groups_per_step}) does not split evenly across {processes} processes"
        )
    share = batch // processes
    micro = min(config.micro_batch or config.num_generations, share)
    if micro < 1 or share % micro:
        where = f"each process's {share} of the" if processes > 1 else "the"
        raise TrainSetupError(
            f"--micro-batch {config.micro_batch} must divide {where} batch of {batch} episodes "
            f"(--num-generations {config.num_generations} x --groups-per-step {config.groups_per_step})"
        )
    return micro, share // micro


def check_loss_fits_upfront(config: TrainConfig, model: Any, placement: Any) -> None:
    """Refuse before any episode a loss pass that cannot fit even with no prompt at all
    (`max_turns` full completions); each real pass is checked again at its real size."""
    micro, _ = loss_passes(config, ranks.world_size())
    width = config.max_turns * config.max_completion_length
    loss_memory.check_pass(
        loss_memory.ModelShape.of(model),
        micro,
        width,
        width,
        placement.device,
        activation_bytes=loss_memory.activation_bytes(SimpleNamespace(**trainer_precision(placement))),
        checkpointing=config.gradient_checkpointing,
    )


def grpo_config(config: TrainConfig, **overrides: Any) -> Any:
    """TRL's `GRPOConfig` for a run on the configured device (fp32 on a CPU), one generation per
    optimizer step and its loss in passes of `micro_batch` episodes."""
    from trl import GRPOConfig

    micro, passes = loss_passes(config, ranks.world_size())
    options: dict[str, Any] = dict(
        output_dir=str(config.output_dir),
        **trainer_precision(resolve(config.device, config.dtype)),
        gradient_checkpointing=config.gradient_checkpointing,
        max_steps=config.max_steps if config.minutes is None else 1_000_000,
        # one generation per optimizer step, its batch split into `passes` loss passes whose
        # gradients add up to the whole batch's (TRL normalizes each over the whole batch)
        per_device_train_batch_size=micro,
        gradient_accumulation_steps=passes,
        steps_per_generation=passes,
        num_generations=config.num_generations,
        max_completion_length=config.max_completion_length,
        temperature=config.temperature,
        learning_rate=config.learning_rate,
        lr_scheduler_type="constant",
        warmup_steps=0,
        beta=config.beta,
        loss_type=config.loss_type,
        logging_steps=1,
        save_strategy="steps",
        save_steps=config.save_steps,
        save_total_limit=2,
        **grpo_tracking_options(config.report_to, config.output_dir),
        seed=config.seed,
        use_vllm=config.use_vllm,
        dataloader_num_workers=0,
        disable_tqdm=config.minutes is not None,  # no step count to show; ProgressCallback prints each step
    )
    options.update(overrides)
    return GRPOConfig(**options)


def lora_config(config: Any) -> Any:
    """peft's `LoraConfig` for `config.lora_rank` (a `TrainConfig` or `sft`'s config)."""
    from peft import LoraConfig

    return LoraConfig(
        r=config.lora_rank,
        lora_alpha=2 * config.lora_rank,
        lora_dropout=0.0,
        target_modules=LORA_TARGETS,
        task_type="CAUSAL_LM",
    )
