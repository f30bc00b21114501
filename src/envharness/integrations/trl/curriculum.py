"""A curriculum in TRL's GRPO loop: each group of a batch plays the task a `TaskSampler` chooses.

The dataset's prompts are slots (a task and a seed, `task_prompt`); `CurriculumLayer`
keeps each slot's seed and gives its group the sampler's task, so every generation of a group
still plays the same page. After the rollout each group's successes go back to the sampler, and
the step's plan (each task's weight, recent success and episodes) is added to the step's log.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from transformers import TrainerCallback

from envharness.curriculum import TaskSampler
from envharness.integrations.trl import ranks
from envharness.integrations.trl.layers import Layer, Rollout
from envharness.integrations.trl.rollout import parse_task_prompt, task_prompt


class CurriculumLayer(Layer):
    """The layer that rewrites each batch's tasks with `sampler`'s choices; its callback logs
    the plan."""

    def __init__(
        self,
        inner: Rollout,
        sampler: TaskSampler,
        prompt_for: Callable[[str, int | None], str] = task_prompt,
    ) -> None:
        super().__init__(inner)
        self.sampler = sampler
        self.prompt_for = prompt_for  # a task and a seed -> the group's prompt (a mix's: `mix_prompt`)
        self.plans: list[dict[str, Any]] = []  # this step's: the plan and the tasks drawn

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        # under several processes every rank draws the same plan from the whole batch
        batch = ranks.all_gather([str(p) for p in prompts])
        slots = list(dict.fromkeys(batch))  # one per group, in order
        plan = self.sampler.plan()
        tasks = self.sampler.choose(len(slots))
        rewritten = {
            slot: self.prompt_for(task, parse_task_prompt(slot)[1]) for slot, task in zip(slots, tasks)
        }
        out = self.inner([rewritten[str(p)] for p in prompts], trainer)
        success = ranks.all_gather([bool(s) for s in out.get("success") or [False] * len(prompts)])
        for slot, task in zip(slots, tasks):
            self.sampler.update(task, [s for p, s in zip(batch, success) if p == slot])
        self.plans.append({"plan": plan, "drawn": tasks})
        return out

    def callbacks(self) -> list[TrainerCallback]:
        return [*self.inner.callbacks(), _PlanCallback(self)]


class _PlanCallback(TrainerCallback):
    def __init__(self, curriculum: CurriculumLayer) -> None:
        self.curriculum = curriculum

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.curriculum.plans = []

    def on_log(
        self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any
    ) -> None:
        if logs is not None and "loss" in logs and self.curriculum.plans:
            logs["curriculum/plan"] = self.curriculum.plans[0]["plan"]
            logs["curriculum/drawn"] = [task for p in self.curriculum.plans for task in p["drawn"]]
