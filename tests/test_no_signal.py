"""A GRPO batch without signal (all advantages 0) skips TRL's loss pass and leaves the weights
exactly as they were; a batch with signal trains as before."""

from __future__ import annotations

import os

import pytest
import torch

from envharness.integrations.trl import task_dataset
from envharness.integrations.trl.grpo_args import grpo_config
from envharness.integrations.trl.no_signal import skip_batches_without_signal
from envharness.integrations.trl.training import TrainConfig

pytestmark = pytest.mark.timeout(900)
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


def fixed_rollout(prompts, trainer):
    """Two model tokens then one masked token per episode (the shape of a multi-turn rollout)."""
    n = len(prompts)
    return {
        "prompt_ids": [[1, 9690, 198, 2683]] * n,
        "completion_ids": [[28, 29 + i % 2, 2] for i in range(n)],
        "logprobs": [[-1.0, -1.0, 0.0]] * n,
        "env_mask": [[1, 1, 0]] * n,
    }


def one_step(tmp_path, reward_func, **overrides):
    from trl import GRPOTrainer

    from envharness.models.embedded import tiny_test_model

    model, tokenizer = tiny_test_model(seed=0)
    config = TrainConfig(
        model="tiny",
        output_dir=str(tmp_path),
        max_steps=1,
        num_generations=2,
        groups_per_step=2,
        micro_batch=4,  # the whole batch in one loss pass
        max_completion_length=4,
        learning_rate=1e-2,
    )
    trainer = GRPOTrainer(
        model=model,
        processing_class=tokenizer,
        reward_funcs=[reward_func],
        args=grpo_config(config, save_strategy="no", **overrides),
        train_dataset=task_dataset(["click-test"], 4),
        rollout_func=fixed_rollout,
    )
    installed = skip_batches_without_signal(trainer)
    losses = []
    inner = trainer._compute_loss
    trainer._compute_loss = lambda *a, **k: losses.append(1) or inner(*a, **k)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    trainer.train()
    changed = [n for n, p in model.named_parameters() if not torch.equal(before[n], p.detach())]
    return installed, losses, changed, trainer


def test_no_signal_batch_skips_the_loss_and_keeps_the_weights(tmp_path):
    installed, losses, changed, trainer = one_step(
        tmp_path, lambda completions, **kw: [0.0] * len(completions)
    )
    assert installed and losses == [] and changed == []
    assert trainer.no_signal_skipped["count"] == 1
    assert any(h.get("no_signal_skipped") == 1.0 for h in trainer.state.log_history)


def test_a_batch_with_signal_still_trains(tmp_path):
    reward = lambda completion_ids, **kw: [float(ids[1] == 29) for ids in completion_ids]  # noqa: E731
    installed, losses, changed, trainer = one_step(tmp_path, reward)
    assert installed and losses == [1] and changed
    assert trainer.no_signal_skipped["count"] == 0


def test_not_installed_where_skipping_would_not_be_exact(tmp_path):
    installed, losses, _, _ = one_step(
        tmp_path, lambda completions, **kw: [0.0] * len(completions), entropy_coef=0.1
    )  # an entropy bonus: loss != 0
    assert not installed and losses == [1]
