"""The KL term's cost is measured: with `beta > 0` every logged step carries the reference
model's memory and its forward time (a copy of the model in full fine-tuning; none with LoRA,
whose reference is the model with its adapter off). Real TRL GRPOTrainer, tiny model, CPU."""

from __future__ import annotations

import os

import pytest
from transformers import TrainerCallback

from envharness.integrations.trl import task_dataset
from envharness.integrations.trl.reference import give_reference_a_source, measure_reference, model_bytes
from envharness.integrations.trl.training import TrainConfig, grpo_config

pytestmark = pytest.mark.timeout(900)
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


def fixed_rollout(prompts, trainer):
    n = len(prompts)
    return {
        "prompt_ids": [[1, 9690, 198, 2683]] * n,
        "completion_ids": [[28, 29 + i % 2, 2] for i in range(n)],
        "logprobs": [[-1.0, -1.0, 0.0]] * n,
        "env_mask": [[1, 1, 0]] * n,
    }


class Logged(TrainerCallback):
    def __init__(self):
        self.steps = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs is not None and "loss" in logs:
            self.steps.append(dict(logs))


def one_step(tmp_path, beta, lora=False):
    from trl import GRPOTrainer

    from envharness.integrations.trl.grpo_args import lora_config
    from envharness.models.embedded import tiny_test_model

    model, tokenizer = tiny_test_model(seed=0)
    config = TrainConfig(
        model="tiny", output_dir=str(tmp_path), max_steps=1, num_generations=2, groups_per_step=2,
        micro_batch=4, max_completion_length=4, beta=beta, lora=lora,
    )  # fmt: skip
    give_reference_a_source(model, tmp_path, beta, lora=lora)  # as train() does: tiny has no path
    logged = Logged()
    trainer = GRPOTrainer(
        model=model,
        processing_class=tokenizer,
        reward_funcs=[lambda completion_ids, **kw: [float(ids[1] == 29) for ids in completion_ids]],
        args=grpo_config(config, save_strategy="no"),
        train_dataset=task_dataset(["click-test"], 4),
        rollout_func=fixed_rollout,
        peft_config=lora_config(config) if lora else None,
        callbacks=[logged],
    )
    cost = measure_reference(trainer)
    trainer.train()
    return cost, trainer, logged.steps[-1]


def test_the_reference_copy_is_measured_every_step(tmp_path):
    cost, trainer, logged = one_step(tmp_path, beta=0.04)
    assert trainer.ref_model is not None
    assert logged["ref/memory_mb"] == round(model_bytes(trainer.model) / 2**20, 2) > 0  # a full copy
    assert logged["ref/forward_s"] > 0  # its pass over the batch, timed where TRL calls it
    assert "kl" in logged


def test_with_lora_the_reference_is_the_model_with_its_adapter_off(tmp_path):
    cost, trainer, logged = one_step(tmp_path, beta=0.04, lora=True)
    assert trainer.ref_model is None
    assert logged["ref/memory_mb"] == 0.0 and logged["ref/forward_s"] > 0


def test_nothing_is_measured_without_a_kl_term(tmp_path):
    cost, trainer, logged = one_step(tmp_path, beta=0.0)
    assert cost is None and "ref/memory_mb" not in logged and "ref/forward_s" not in logged
