"""`envharness sft`: fine-tune on demonstrations with TRL's `SFTTrainer`, before GRPO.

The demonstrations arrive as exact token sequences with labels (`eval/demonstrations.py`: the
model's tokens, -100 on the prompt, page text and tool results), so the trainer only batches
them: no chat template is applied again, nothing is re-tokenized, and what the loss sees is
what `envharness train` would sample and `envharness eval` would show. The output folder's
``final/`` is a model directory that `eval --model` and `train --model` take.

Progress, checkpoints, ``--resume`` and interrupts work as in `envharness train` (the same
callbacks and `resume.py`).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from envharness.core.declared import option
from envharness.harness import run_options as shared
from envharness.harness.groups import EnvironmentArgs, ServerArgs, TrainingModelArgs
from envharness.integrations.trl.errors import TrainSetupError
from envharness.integrations.trl.grpo_args import lora_config
from envharness.integrations.trl.precision import trainer_precision
from envharness.models.device import resolve


@dataclass(frozen=True)
class SFTRunConfig(EnvironmentArgs, ServerArgs, TrainingModelArgs):
    """What `envharness sft` is asked to do: the environment (its tasks to demonstrate; its
    opponent the demonstrations' and `--eval-every`'s; a conversation prompt style, empty: its
    training style), a running server, the model (the student: "embedded", "tiny", or a model
    directory / hub id) and sft's own options, each field its option (`core/declared.py`)."""

    output_dir: str = shared.out(
        "runs/sft",
        "demos/, checkpoints, final/, train_log.jsonl",
        "runs/sft-<time>",
        "runs/sft-%Y%m%d-%H%M%S",
    )
    #: "scripted" or an eval run folder recorded with ``--record-tokens`` (a model's own
    #: successes: rejection sampling).
    demos: str = option(
        "scripted",
        "'scripted' (the environment's scripted policy) or an eval run folder recorded with "
        "--record-tokens (its successful episodes; default %(default)s)",
        metavar="SOURCE",
    )
    #: Scripted source: episodes per task, seeds SEED..SEED+N-1 (keep eval's held-out seeds apart).
    episodes: int = option(32, "scripted demonstrations per task (default %(default)s)", minimum=1)
    seed: int = shared.seed(1000, "first demonstration seed (eval's seeds 0.. stay held out)")
    max_turns: int = shared.max_turns(5)
    epochs: float = option(3.0, "passes over the demonstrations (default %(default)s)", positive=True)
    #: Optimizer steps (None: `epochs` over the demonstrations).
    max_steps: int | None = option(
        None, "optimizer steps instead of --epochs", flags=("--steps",), type=int, minimum=1
    )
    batch_size: int = option(8, "demonstrations per step (default %(default)s)", minimum=1)
    #: Demonstrations per forward pass; a step accumulates batch_size / micro_batch of them.
    #: The loss is averaged over the step's model tokens either way (TRL's num_items_in_batch), so
    #: the step is the same; 1 pads nothing (on a CPU, padding is paid for in full).
    micro_batch: int = option(
        1,
        "demonstrations per forward pass, dividing --batch-size (default %(default)s: no padding; "
        "the step's loss is the same mean over its model tokens)",
        metavar="N",
        minimum=1,
    )
    learning_rate: float = option(2e-5, "learning rate", flags=("--lr", "--learning-rate"), positive=True)
    lora: bool = option(False, "train a LoRA adapter (merged into final/)")
    lora_rank: int = option(16, "the LoRA adapter's rank (default %(default)s)", minimum=1)
    save_steps: int = option(50, "checkpoint every N steps", minimum=1)
    save_epochs: bool = option(
        False, "checkpoint at the end of every epoch, all kept (choose the SFT stage by epochs)"
    )
    eval_every: int = shared.eval_every("the training loss, with the loss per task")
    eval_tasks: list[str] = shared.eval_tasks()
    eval_episodes: int = shared.eval_episodes()
    eval_on_start: bool = shared.eval_on_start()
    #: The held-out episodes' token budget per reply (as `train --max-new-tokens`).
    max_new_tokens: int = shared.max_new_tokens(32)
    resume: bool = shared.resume("continue the run in --out from its latest checkpoint")

    def rules(self) -> None:
        """Sft's own rules about its options together (`core.declared.check_options`)."""
        if self.eval_on_start and not self.eval_every:
            raise ValueError("--eval-on-start plays --eval-every's held-out seeds: give --eval-every N too")
        if self.batch_size % self.micro_batch:
            raise ValueError(
                f"--micro-batch {self.micro_batch} does not divide --batch-size {self.batch_size}"
            )


def training_rows(demonstrations: list[Any]) -> list[dict[str, list[int]]]:
    """``input_ids`` and ``labels`` per demonstration (what `SFTTrainer` batches as they are)."""
    return [{"input_ids": d.input_ids, "labels": d.labels} for d in demonstrations]


def sft_trainer_config(config: SFTRunConfig) -> Any:
    """TRL's `SFTConfig` on the configured device (fp32 on a CPU), no truncation (sequences arrive checked)."""
    from trl import SFTConfig

    return SFTConfig(
        output_dir=str(config.output_dir),
        **trainer_precision(resolve(config.device, config.dtype)),
        gradient_checkpointing=False,
        num_train_epochs=config.epochs,
        max_steps=config.max_steps if config.max_steps is not None else -1,
        per_device_train_batch_size=config.micro_batch,
        gradient_accumulation_steps=config.batch_size // config.micro_batch,
        learning_rate=config.learning_rate,
        lr_scheduler_type="constant",
        warmup_steps=0,
        logging_steps=1,
        save_strategy="epoch" if config.save_epochs else "steps",
        save_steps=config.save_steps,
        save_total_limit=None if config.save_epochs else 2,
        report_to="none",
        max_length=None,
        packing=False,
        seed=config.seed,
        dataloader_num_workers=0,
        disable_tqdm=True,
    )


def run_sft(
    config: SFTRunConfig,
    rows: list[dict[str, list[int]]],
    model: Any,
    tokenizer: Any,
    *,
    checkpoint: Any = None,
    callbacks: list[Any] = (),
) -> dict[str, Any]:  # type: ignore[assignment]
    """Fine-tune `model` on `rows`; returns what was done (steps, seconds, the final folder)."""
    from datasets import Dataset
    from trl import SFTTrainer

    from envharness.integrations.trl.callbacks import ProgressCallback, StepBoundary, save_finished_steps
    from envharness.integrations.trl.loss_memory import guard_loss_memory

    if not rows:
        raise TrainSetupError(
            "no demonstrations to learn from: no episode succeeded (see the demos folder's report)"
        )
    out = Path(config.output_dir)
    (out / "sft_config.json").write_text(json.dumps(asdict(config), indent=2))
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    trainer = SFTTrainer(
        model=model,
        processing_class=tokenizer,
        args=sft_trainer_config(config),
        train_dataset=Dataset.from_list(rows),
        peft_config=lora_config(config) if config.lora else None,
        callbacks=[  # the held-out evaluation first: its numbers join the step's log line
            *callbacks,
            ProgressCallback(out / "train_log.jsonl", append=checkpoint is not None, label="sft"),
        ],
    )
    from transformers.trainer_callback import PrinterCallback

    trainer.remove_callback(PrinterCallback)  # ProgressCallback prints one line per step instead
    boundary = StepBoundary()
    trainer.add_callback(boundary)
    guard_loss_memory(trainer)
    started = time.perf_counter()
    try:
        trainer.train(resume_from_checkpoint=str(checkpoint.path) if checkpoint else None)
    except KeyboardInterrupt:
        save_finished_steps(trainer, boundary)
        raise
    final = out / "final"
    if config.lora:  # a model directory eval and train load as it is
        trainer.model = trainer.model.merge_and_unload()
    trainer.model.save_pretrained(str(final))
    tokenizer.save_pretrained(str(final))
    return {
        "steps": trainer.state.global_step,
        "seconds": time.perf_counter() - started,
        "final": final,
        "log_history": list(trainer.state.log_history),
    }
