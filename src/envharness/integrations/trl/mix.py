"""Training on a mix of environments: one GRPO batch drawn across them.

A mix names environments and their tasks (``envharness train --mix browsergym:click-test,enter-text
--mix textarena:Wordle-v0``). Each environment gets its own server and its own rollout function
(its prompt, tools and parser); a task is named ``env:task`` in the curriculum, the logs and
the prompts (`mix_prompt`), and `MixedRollout` sends each group to its environment's rollout and
puts the outputs back in the batch's order. Every group stays one task and one seed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from envharness.integrations.trl.layers import Rollout
from envharness.integrations.trl.rollout import parse_task_prompt, prompt_env

SEPARATOR = ":"


def parse_mix(specs: list[str]) -> dict[str, list[str]]:
    """``["browsergym:click-test,enter-text", "textarena:Wordle-v0"]`` -> {env: [tasks]}; an
    environment named twice gets both lists."""
    mix: dict[str, list[str]] = {}
    for spec in specs:
        env, sep, tasks = spec.partition(SEPARATOR)
        names = [t.strip() for t in tasks.split(",") if t.strip()]
        if not sep or not env.strip() or not names:
            raise ValueError(f"--mix {spec!r}: expected ENV:TASK[,TASK...], e.g. textarena:Wordle-v0")
        mix.setdefault(env.strip(), []).extend(t for t in names if t not in mix.get(env.strip(), []))
    return mix


def mix_key(env: str, task: str) -> str:
    return f"{env}{SEPARATOR}{task}"


def split_key(key: str) -> tuple[str, str]:
    env, _, task = key.partition(SEPARATOR)
    return env, task


def mix_prompt(key: str, seed: int | None = None) -> str:
    """The dataset prompt of one group of ``env:task`` (seeded, as `task_prompt`)."""
    env, task = split_key(key)
    return json.dumps({"env": env, "task": task, **({"seed": seed} if seed is not None else {})})


def prompt_key(prompt: Any) -> str:
    """``env:task`` for a mix's prompt, the task for any other (how logs name a group's task)."""
    env, task = prompt_env(prompt), parse_task_prompt(prompt)[0]
    return mix_key(env, str(task)) if env else str(task)


class MixedRollout(Rollout):
    """One rollout over several environments' ones: each prompt goes to the rollout of the
    environment it names, and every output field comes back in the prompts' order (None where
    an environment's rollout gives no such field). `metrics` are each environment's, named
    ``env/metric``; `close()` closes every one."""

    def __init__(self, rollouts: Mapping[str, Rollout]) -> None:
        self.rollouts = dict(rollouts)
        self.metrics: dict[str, Any] = {}
        self.records = next((r.records for r in self.rollouts.values()), None)  # one run: one writer

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        rows: dict[str, list[int]] = {}
        for i, prompt in enumerate(prompts):
            env = prompt_env(prompt)
            if env not in self.rollouts:
                raise ValueError(
                    f"a mix's prompt names environment {env!r}; the mix has {', '.join(self.rollouts)}"
                )
            rows.setdefault(env, []).append(i)
        merged: dict[str, list[Any]] = {}
        self.metrics = {}
        for env, indices in rows.items():
            rollout = self.rollouts[env]
            out = rollout([prompts[i] for i in indices], trainer)
            self.metrics.update({f"{env}/{key}": value for key, value in rollout.metrics.items()})
            for key, values in out.items():
                column = merged.setdefault(key, [None] * len(prompts))
                for i, value in zip(indices, values):
                    column[i] = value
        return merged

    def close(self) -> None:
        for rollout in self.rollouts.values():
            rollout.close()
