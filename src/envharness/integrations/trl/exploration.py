"""Exploration along a GRPO run: which groups carried no signal, and why the all-failed ones failed.

    rollout = GroupStats(rollout)
    trainer = GRPOTrainer(..., rollout_func=rollout, callbacks=[*rollout.callbacks(), ...])

TRL logs `entropy` (only on steps whose loss pass runs; `no_signal.py` skips the others) and
`frac_reward_zero_std` (groups whose rewards are all equal: all failed and all succeeded look
the same there). Every logged step here also carries:

- `groups/all_failed` and `groups/all_succeeded`: the share of groups (one page, all its
  episodes) where every episode failed, or every one succeeded. All-failed groups mean the
  policy never finds the answer on that page; all-succeeded groups mean it has nothing left to
  learn there. Both carry no signal.
- `groups/all_failed_errors`: one line per all-failed group, `task seed: error (count/n)`, the
  commonest error of its episodes (`no error` when the episodes ended without success but
  without an error either: a wrong answer, or out of turns).
- `sampled_nll`: the mean negative log-probability of the sampled model tokens, which at
  temperature 1 estimates the policy's per-token entropy on the pages it plays, on every step
  (also those whose loss pass is skipped and so have no `entropy`).

Each goes to the log of the step whose loss pass takes the batch (under `--async` a batch is
sampled while the step before it trains, and may finish before or after its own step begins).
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

from transformers import TrainerCallback

from envharness.integrations.trl import ranks
from envharness.integrations.trl.layers import Layer, Rollout
from envharness.integrations.trl.rollout import trainer_step


def _per_task(groups: dict[str, list[int]], success: list[bool]) -> dict[str, float]:
    """Success and zero-variance groups (all succeeded or all failed: no signal) per task, and
    per environment in a mix."""
    from envharness.integrations.trl.mix import prompt_key
    from envharness.integrations.trl.rollout import prompt_env

    by_task: dict[str, list[list[bool]]] = {}
    by_env: dict[str, list[list[bool]]] = {}  # a mix's environments, each over its tasks
    for prompt, rows in groups.items():
        outcomes = [success[i] for i in rows]
        task = prompt_key(prompt)[:80]  # env:task in a mix; a chat prompt is its own "task": cut short
        by_task.setdefault(task, []).append(outcomes)
        if env := prompt_env(prompt):
            by_env.setdefault(env, []).append(outcomes)
    stats: dict[str, float] = {}
    for kind, grouped in (("tasks", by_task), ("envs", by_env)):
        for name, name_groups in sorted(grouped.items()):
            episodes = [s for group in name_groups for s in group]
            stats[f"{kind}/{name}/success"] = sum(episodes) / len(episodes)
            stats[f"{kind}/{name}/zero_variance"] = sum(len(set(g)) == 1 for g in name_groups) / len(
                name_groups
            )
    return stats


def group_stats(prompts: list[Any], out: dict[str, list[Any]]) -> dict[str, Any]:
    """The exploration metrics of one rollout batch: episodes of the same prompt (page) form a group."""
    from envharness.integrations.trl.rollout import parse_task_prompt

    success = [bool(s) for s in out.get("success") or [False] * len(prompts)]
    errors = out.get("error") or [None] * len(prompts)
    groups: dict[str, list[int]] = {}
    for i, prompt in enumerate(prompts):
        groups.setdefault(str(prompt), []).append(i)
    failed_lines = []
    all_succeeded = 0
    for prompt, rows in groups.items():
        if all(success[i] for i in rows):
            all_succeeded += 1
        elif not any(success[i] for i in rows):
            task, seed = parse_task_prompt(prompt)
            error, count = Counter(_short(errors[i]) for i in rows).most_common(1)[0]
            failed_lines.append(f"{task} {seed}: {error} ({count}/{len(rows)})")
    model_logprobs = [
        lp
        for lps, mask in zip(out.get("logprobs") or [], out.get("env_mask") or [])
        for lp, m in zip(lps, mask)
        if m
    ]
    n = max(1, len(groups))
    stats: dict[str, Any] = {
        "groups/all_failed": len(failed_lines) / n,
        "groups/all_succeeded": all_succeeded / n,
        "groups/all_failed_errors": failed_lines,
    }
    stats.update(_per_task(groups, success))
    if model_logprobs:
        stats["sampled_nll"] = -sum(model_logprobs) / len(model_logprobs)
    timed_out = [i for i, flag in enumerate(out.get("timed_out") or []) if flag]
    if timed_out:  # agents cancelled at their time limit: masked rows, named here
        stats["episodes/agent_timeouts"] = len(timed_out)
        stats["episodes/agent_timeout_rows"] = [
            " ".join(map(str, parse_task_prompt(prompts[i]))) for i in timed_out
        ]
    return stats


def _short(error: Any) -> str:
    if not error:
        return "no error"
    line = str(error).strip().splitlines()[0] if str(error).strip() else "error"
    return line[:160]


class GroupStats(Layer):
    """The layer that collects `group_stats` for every rollout of a step; its callback adds
    them to that step's log."""

    def __init__(self, inner: Rollout) -> None:
        super().__init__(inner)
        #: per step the batch is for: every rollout's prompts and fields; the log takes its step's
        self.by_step: dict[int, tuple[list[Any], dict[str, list[Any]]]] = {}
        self._lock = threading.Lock()  # under --async the sampling thread adds while the log reads

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        out = self.inner(prompts, trainer)
        n = len(prompts)
        masks = out.get("env_mask") or [[]] * n  # no mask: no model tokens to count
        model_logprobs = [
            [lp for lp, m in zip(lps, mask) if m] for lps, mask in zip(out.get("logprobs") or [[]] * n, masks)
        ]
        metrics = out.get("verify_metrics") or [{}] * n
        rows = zip(
            [str(p) for p in prompts],
            out.get("success") or [False] * n,
            [str(e) if e else None for e in out.get("error") or [None] * n],
            model_logprobs,
            [bool(m.get("agent_timeout")) for m in metrics],
        )
        gathered = ranks.all_gather(list(rows))  # every rank's episodes: the whole batch's statistics
        with self._lock:
            played, fields = self.by_step.setdefault(trainer_step(trainer), ([], {}))
            for prompt, success, error, logprobs, timed_out in gathered:
                played.append(prompt)
                fields.setdefault("success", []).append(success)
                fields.setdefault("error", []).append(error)
                fields.setdefault("logprobs", []).append(logprobs)
                fields.setdefault("env_mask", []).append([1] * len(logprobs))
                fields.setdefault("timed_out", []).append(timed_out)
        return out

    def take(self, step: int) -> tuple[list[Any], dict[str, list[Any]]]:
        """The prompts and fields of `step`'s rollouts, forgotten here (with any of earlier steps)."""
        with self._lock:
            taken = self.by_step.pop(step, ([], {}))
            for old in [s for s in self.by_step if s < step]:
                del self.by_step[old]
            return taken

    def callbacks(self) -> list[TrainerCallback]:
        return [*self.inner.callbacks(), _GroupStatsCallback(self)]


class _GroupStatsCallback(TrainerCallback):
    def __init__(self, stats: GroupStats):
        self.stats = stats

    def on_log(
        self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any
    ) -> None:
        if logs is None or "loss" not in logs:
            return
        prompts, fields = self.stats.take(state.global_step - 1)  # its rollouts ran one step before
        if prompts:
            logs.update(group_stats(prompts, fields))
