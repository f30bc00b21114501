"""A curriculum in TRL's GRPO loop: each group of a batch plays the task a `TaskSampler` chooses.

The dataset's prompts are slots (a task and a seed, `task_prompt`); `CurriculumLayer`
keeps each slot's seed and gives its group the sampler's task, so every generation of a group
still plays the same page. After the rollout each group's successes go back to the sampler, and
the step's plan (each task's weight, recent success and episodes) is added to the log of the
step whose loss pass takes the batch (under `--async` a batch is sampled while the step before
it trains, and may finish before or after its own step begins).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from transformers import TrainerCallback

from envharness.curriculum import TaskSampler
from envharness.integrations.trl import ranks
from envharness.integrations.trl.layers import Layer, Rollout
from envharness.integrations.trl.rollout import parse_task_prompt, task_prompt, trainer_step


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
        #: per step the batch is for: its plans and the tasks drawn; the log takes its step's
        self.plans: dict[int, list[dict[str, Any]]] = {}
        self._lock = threading.Lock()  # under --async the sampling thread adds while the log reads

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
        with self._lock:
            self.plans.setdefault(trainer_step(trainer), []).append({"plan": plan, "drawn": tasks})
        return out

    def callbacks(self) -> list[TrainerCallback]:
        return [*self.inner.callbacks(), _PlanCallback(self)]

    def take_plans(self, step: int) -> list[dict[str, Any]]:
        """The plans of `step`'s batch, forgotten here (with any of earlier steps, never logged)."""
        with self._lock:
            plans = self.plans.pop(step, [])
            for old in [s for s in self.plans if s < step]:
                del self.plans[old]
            return plans


class _PlanCallback(TrainerCallback):
    def __init__(self, curriculum: CurriculumLayer) -> None:
        self.curriculum = curriculum

    def on_log(
        self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any
    ) -> None:
        if logs is None or "loss" not in logs:
            return
        plans = self.curriculum.take_plans(state.global_step - 1)  # its rollout ran one step before
        if plans:
            logs["curriculum/plan"] = plans[0]["plan"]
            logs["curriculum/drawn"] = [task for p in plans for task in p["drawn"]]
