"""What the GRPO exactness tests share: a reward that always differs, runs of a mask, and one
real GRPOTrainer step that keeps what the rollout function handed over and what the loss saw."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def distinct_rewards(completions, **kwargs):
    """Different rewards within every group even when no episode succeeds (a random model): the
    row's place in the batch. (The replies' lengths, used before, tie in about one step of ten,
    and a step whose groups all tie has no gradient.)"""
    return [float(i) for i in range(len(completions))]


def runs(mask: list[int], value: int) -> list[tuple[int, int]]:
    """[start, end) of each maximal run of `value` in `mask`."""
    out, start = [], None
    for i, m in enumerate([*mask, None]):
        if m == value and start is None:
            start = i
        elif m != value and start is not None:
            out.append((start, i))
            start = None
    return out


@dataclass
class GRPOStep:
    handed: dict  # what the rollout function handed TRL
    scored: dict  # TRL's scored batch
    loss: dict  # the loss's inputs, with the logprobs of its own differentiated forward pass under "logps"
    tokenizer: Any


def one_grpo_step(rollout_func: Callable, task: str, out_dir: Path) -> GRPOStep:
    """One real GRPOTrainer step of the tiny test model on 2 groups of 2 episodes of `task`."""
    import torch
    from trl import GRPOTrainer

    from envharness.integrations.trl import task_dataset
    from envharness.integrations.trl.grpo_args import grpo_config
    from envharness.integrations.trl.rewards import reward_success
    from envharness.integrations.trl.training import TrainConfig
    from envharness.models.embedded import tiny_test_model

    model, tokenizer = tiny_test_model(seed=0)
    handed: dict[str, Any] = {}

    def spy(prompts, trainer):
        out = rollout_func(prompts, trainer)
        handed.update(out)
        return out

    config = TrainConfig(
        model="tiny",
        output_dir=str(out_dir),
        max_steps=1,
        num_generations=2,
        groups_per_step=2,
        max_completion_length=6,
        temperature=1.0,
        learning_rate=1e-3,
    )
    trainer = GRPOTrainer(
        model=model,
        processing_class=tokenizer,
        reward_funcs=[reward_success, distinct_rewards],
        args=grpo_config(config, save_strategy="no"),
        train_dataset=task_dataset([task], 4, seed=0),
        rollout_func=spy,
    )
    scored, at_loss = {}, []
    generate_and_score = trainer._generate_and_score_completions
    trainer._generate_and_score_completions = lambda inputs: (
        scored.update(generate_and_score(inputs)) or scored
    )
    compute_loss, per_token_logps = trainer._compute_loss, trainer._get_per_token_logps_and_entropies

    def capture_inputs(model, inputs):  # the batch the loss sees (TRL shuffles rows before it)
        at_loss.append({k: v.detach().clone() for k, v in inputs.items() if isinstance(v, torch.Tensor)})
        return compute_loss(model, inputs)

    def capture_logps(*args, **kwargs):
        result = per_token_logps(*args, **kwargs)
        if torch.is_grad_enabled():  # the loss's own forward pass (the one that is differentiated)
            at_loss[-1]["logps"] = result[0].detach().clone()
        return result

    trainer._compute_loss, trainer._get_per_token_logps_and_entropies = capture_inputs, capture_logps
    trainer.train()
    assert at_loss and all(p["logps"].shape == p["completion_ids"].shape for p in at_loss)
    return GRPOStep(handed, scored, merge_passes(at_loss), tokenizer)


def merge_passes(passes: list[dict]) -> dict:
    """The loss passes of one step (micro-batches of the same padded batch) as one batch."""
    import torch

    return {
        k: torch.cat([p[k] for p in passes]) if passes[0][k].dim() else passes[0][k]
        for k in passes[0]
        if all(k in p for p in passes)
    }


def loss_row(loss: dict, ids: list[int], prompt: list[int], used: set[int]) -> int:
    """The row of the loss batch holding this episode (same prompt, same completion), not
    one of `used`; adds it to `used`."""
    rows = [
        r
        for r in range(len(loss["completion_ids"]))
        if r not in used
        and loss["completion_ids"][r, : len(ids)].tolist() == ids
        and int(loss["completion_mask"][r].sum()) == len(ids)
        and loss["prompt_ids"][r][loss["prompt_mask"][r].bool()].tolist() == prompt
    ]
    assert rows, "the episode is not in the loss batch"
    used.add(rows[0])
    return rows[0]
