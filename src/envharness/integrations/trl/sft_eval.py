"""`sft --eval-every`: the SFT stage chosen on what it learned, not on its step count.

The held-out evaluation is `train --eval-every`'s own (`held_out.py` playing `evaluate.py`'s
episodes: greedy, seeds 0..n-1, the training prompt and turns), so an SFT checkpoint and a GRPO
checkpoint are measured the same way and ``best/`` means the same thing in both folders. Beside
it, each evaluation logs the loss per task on that task's demonstrations, so a task the model
has not learned shows by name rather than inside the mean.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from envharness.harness.plan import PlanError, expand_tasks
from envharness.integrations.trl.config import TrainConfig
from envharness.integrations.trl.errors import TrainSetupError
from envharness.integrations.trl.evaluate import evaluate
from envharness.integrations.trl.held_out import HeldOutEvaluation

#: Demonstrations per task the per-task loss is measured on (a forward pass each, no gradient).
LOSS_SAMPLE = 8


def task_losses(model: Any, demonstrations: Sequence[Any], per_task: int = LOSS_SAMPLE) -> dict[str, float]:
    """Mean loss on the model's tokens per task, over the first `per_task` demonstrations of each."""
    import torch

    by_task: dict[str, list[Any]] = {}
    for demo in demonstrations:
        if len(by_task.setdefault(demo.task, [])) < per_task:
            by_task[demo.task].append(demo)
    device = next(model.parameters()).device
    losses: dict[str, float] = {}
    with torch.no_grad():
        for task, demos in by_task.items():
            total = 0.0
            for demo in demos:
                ids = torch.tensor([demo.input_ids], device=device)
                labels = torch.tensor([demo.labels], device=device)
                total += float(model(input_ids=ids, labels=labels).loss)
            losses[task] = total / len(demos)
    return losses


class SFTHeldOut(HeldOutEvaluation):
    """`HeldOutEvaluation` whose entries also carry ``loss/<task>`` on the demonstrations."""

    def __init__(self, *args: Any, demonstrations: Sequence[Any] = (), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.demonstrations = list(demonstrations)

    def measure(self, model: Any) -> dict[str, Any]:
        return {f"loss/{task}": loss for task, loss in task_losses(model, self.demonstrations).items()}


def eval_config(config: Any) -> TrainConfig:
    """The `TrainConfig` that `evaluate` plays an SFT run's held-out episodes with."""
    return TrainConfig(
        model=config.model,
        env=config.env,
        env_options=dict(config.env_options),
        tasks=list(config.tasks),
        prompt=config.prompt,
        max_turns=config.max_turns,
        max_completion_length=config.max_new_tokens,
        output_dir=str(config.output_dir),
    )


@contextlib.contextmanager
def held_out_callback(
    config: Any, tokenizer: Any, demonstrations: Sequence[Any]
) -> Iterator[HeldOutEvaluation | None]:
    """The `--eval-every` callback on a server of the run's environment (None without it)."""
    if not config.eval_every:
        yield None
        return
    from envharness.core.registry import resolve_environment
    from envharness.integrations.trl.servers import env_clients

    env = resolve_environment(config.env, config.env_options)
    played = eval_config(config)
    try:
        transfer = expand_tasks(env, config.eval_tasks, "--eval-tasks") if config.eval_tasks else []
    except PlanError as exc:
        raise TrainSetupError(str(exc)) from None
    with env_clients(env, config.env_url, env_options=config.env_options) as clients:

        def evaluate_task(model: Any, task: str, seeds: list[int]) -> float:
            return evaluate(model, tokenizer, clients, played, seeds, task=task, temperature=0.0)

        yield SFTHeldOut(
            evaluate_task,
            every=config.eval_every,
            tasks=config.tasks,
            transfer=transfer,
            episodes=config.eval_episodes,
            on_start=config.eval_on_start,
            out=Path(config.output_dir),
            tokenizer=tokenizer,
            demonstrations=demonstrations,
        )
