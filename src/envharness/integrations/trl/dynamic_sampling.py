"""Groups that carry signal (DAPO's dynamic sampling): a group whose rewards all agree is
replaced by another before the loss pass.

A GRPO group whose episodes all got the same reward (all solved, or all failed) has advantage 0
on every row: it costs its rollout and teaches nothing, and under the token-level loss it dilutes
the groups that do teach. `DynamicSampling` scores each group with the trainer's own reward
functions and weights as soon as the rollout returns; each group whose rewards agree is played
again on a fresh training seed of the same task (the same slot of the batch: TRL gets exactly the
rows it asked for, each row's prompt ids, completion ids and logprobs from the episode that
replaced it), until every group carries signal or the step has drawn `max_extra` extra groups.
Past that bound the groups still without signal stay in the batch (advantage 0: no gradient), the
log says how many, and the step goes on: a step never waits for luck.

Every logged step carries, per task, `dynamic/<task>/drawn`, `.../kept` and `.../dropped` (groups
rolled out, in the loss pass, replaced) and `dynamic/extra_groups`, `dynamic/without_signal`,
counted for the step whose loss pass takes the batch (under `--async` a batch is sampled while
the step before it trains, and may finish after its own step began: its counts wait for that
step's log). Dropped groups are evidence too (a task solved or out of reach): `on_dropped` hands each one's
successes to the curriculum. Under several processes every rank gathers the whole batch's rewards
and takes the same decisions (the same groups, the same seeds, the same number of rollouts).
"""

from __future__ import annotations

import inspect
import logging
import math
import random
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

from transformers import TrainerCallback

from envharness.integrations.trl import ranks
from envharness.integrations.trl.layers import Layer, Rollout
from envharness.integrations.trl.mix import prompt_key
from envharness.integrations.trl.rollout import parse_task_prompt, task_prompt, trainer_step

log = logging.getLogger(__name__)

#: The tokens TRL reads; every other list field is per row and is replaced with its row.
TOKEN_FIELDS = ("prompt_ids", "completion_ids", "logprobs")


def row_rewards(prompts: list[Any], out: dict[str, list[Any]], trainer: Any) -> list[float | None] | None:
    """Each row's reward as TRL will compute it (its reward functions' weighted sum; None where
    none could score it), or None where this cannot be known before TRL runs them (a reward
    model, an async function): then no group is dropped."""
    funcs = list(getattr(trainer, "reward_funcs", None) or [])
    if not funcs or any(not callable(f) or _not_plain(f) for f in funcs):
        return None
    weights = getattr(trainer, "reward_weights", None)
    weights = [float(w) for w in weights] if weights is not None else [1.0] * len(funcs)
    tokenizer = getattr(trainer, "processing_class", None)
    tokenizer = getattr(tokenizer, "tokenizer", tokenizer)
    ids = out["completion_ids"]
    completions = tokenizer.batch_decode(ids, skip_special_tokens=True) if tokenizer else [""] * len(ids)
    fields = {k: v for k, v in out.items() if k not in TOKEN_FIELDS}
    per_func = [
        f(prompts=prompts, completions=completions, completion_ids=ids, trainer_state=getattr(trainer, "state", None),
          log_extra=_ignore, log_metric=_ignore, **fields)
        for f in funcs
    ]  # fmt: skip
    rewards: list[float | None] = []
    for values in zip(*per_func):
        scored = [(w, v) for w, v in zip(weights, values) if v is not None and not math.isnan(float(v))]
        rewards.append(sum(w * float(v) for w, v in scored) if scored else None)
    return rewards


def _not_plain(func: Any) -> bool:
    """A reward model (a module) or an async function: TRL's to run, not ours."""
    import torch

    return isinstance(func, torch.nn.Module) or inspect.iscoroutinefunction(func)


def _ignore(*args: Any, **kwargs: Any) -> None:
    """`log_extra` / `log_metric` while scoring early: TRL logs them when it scores the batch."""


def agrees(rewards: list[float | None]) -> bool:
    """Whether a group's rewards all agree (fewer than two scored: nothing to compare)."""
    scored = [r for r in rewards if r is not None]
    return len(scored) < 2 or max(scored) - min(scored) <= 1e-9


def fresh_prompt(prompt: str, seed: int, prompt_for: Callable[[str, int | None], str]) -> str:
    """The same task on another training seed (`task_dataset`'s range)."""
    return prompt_for(prompt_key(prompt), seed)


class DynamicSampling(Layer):
    """Replaces each group whose rewards all agree, up to `max_extra` extra groups a step."""

    def __init__(
        self,
        inner: Rollout,
        max_extra: int,
        *,
        seed: int = 0,
        prompt_for: Callable[[str, int | None], str] = task_prompt,
        on_dropped: Callable[[str, list[bool]], None] | None = None,
    ) -> None:
        if max_extra < 0:
            raise ValueError(f"max_extra must be >= 0 (extra groups a step may draw), got {max_extra}")
        super().__init__(inner)
        self.max_extra, self.seed, self.prompt_for, self.on_dropped = max_extra, seed, prompt_for, on_dropped
        #: per step the batch is for: "<task>/drawn", ..., "extra_groups"; the log takes its step's
        self.by_step: dict[int, Counter[str]] = {}
        self._lock = threading.Lock()  # under --async the sampling thread counts while the log reads

    def counts(self, step: int) -> Counter[str]:
        """The counts of the batch for `step` (created empty on first use)."""
        with self._lock:
            return self.by_step.setdefault(step, Counter())

    def take_counts(self, step: int) -> Counter[str]:
        """The counts of `step`'s batch, forgotten here (with any of earlier steps, never logged)."""
        with self._lock:
            counts = self.by_step.pop(step, Counter())
            for old in [s for s in self.by_step if s < step]:
                del self.by_step[old]
            return counts

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        played = [str(p) for p in prompts]
        out = dict(self.inner(played, trainer))
        step, extra, round_ = trainer_step(trainer), 0, 0
        counts = self.counts(step)
        new: set[str] | None = None  # the groups drawn this round (None: the first: all)
        while True:
            batch, rewards, success = self._gathered(played, out, trainer)
            groups = _groups(batch)
            for group in groups if new is None else new:
                counts[f"{prompt_key(group)}/drawn"] += 1
            silent = [
                g for g, rows in groups.items() if rewards is not None and agrees([rewards[i] for i in rows])
            ]
            budget = min(len(silent), self.max_extra - extra) if rewards is not None else 0
            for group in silent[:budget]:
                self._drop(group, [success[i] for i in groups[group]], counts)
            if budget == 0:
                self._keep(groups, silent, counts)
                return out
            rng = random.Random(f"{self.seed}:{step}:{round_}")  # the same seeds on every rank
            fresh = {
                g: fresh_prompt(g, rng.randrange(1_000_000, 2_000_000), self.prompt_for)
                for g in silent[:budget]
            }
            rows = [i for i, p in enumerate(played) if p in fresh]  # this rank's rows of those groups
            out = _substitute(out, rows, self.inner([fresh[played[i]] for i in rows], trainer))
            for i in rows:
                played[i] = fresh[played[i]]
            new = set(fresh.values())
            extra, round_ = extra + budget, round_ + 1
            counts["extra_groups"] += budget

    def _gathered(
        self, played: list[str], out: dict[str, list[Any]], trainer: Any
    ) -> tuple[list[str], Any, list[bool]]:
        """The whole batch's prompts, rewards and successes, the same on every rank."""
        rewards = row_rewards(played, out, trainer)
        success = [bool(s) for s in out.get("success") or [False] * len(played)]
        rows = ranks.all_gather(list(zip(played, rewards or [None] * len(played), success)))
        known = ranks.all_agree(rewards is not None)
        return [r[0] for r in rows], [r[1] for r in rows] if known else None, [r[2] for r in rows]

    def _drop(self, group: str, successes: list[bool], counts: Counter[str]) -> None:
        counts[f"{prompt_key(group)}/dropped"] += 1
        if self.on_dropped is not None:
            self.on_dropped(group, successes)

    def _keep(self, groups: dict[str, list[int]], silent: list[str], counts: Counter[str]) -> None:
        """The groups of the loss pass counted; those still without signal named in the log."""
        for group in groups:
            counts[f"{prompt_key(group)}/kept"] += 1
        left = silent
        counts["without_signal"] += len(left)
        if left and ranks.is_main():  # one line for the run, not one a rank
            names = ", ".join(" ".join(map(str, parse_task_prompt(g))) for g in left)
            log.warning(
                "%d of %d groups still without signal after %d extra group(s) this step (the bound, "
                "--max-extra-groups %d): %s; they stay in the batch with advantage 0",
                len(left), len(groups), counts["extra_groups"], self.max_extra, names,
            )  # fmt: skip

    def callbacks(self) -> list[TrainerCallback]:
        return [*self.inner.callbacks(), _DynamicSamplingCallback(self)]


def _groups(batch: list[str]) -> dict[str, list[int]]:
    """Rows of the same prompt (a page: one task, one seed) form a group, in order."""
    groups: dict[str, list[int]] = {}
    for i, prompt in enumerate(batch):
        groups.setdefault(prompt, []).append(i)
    return groups


def _substitute(out: dict[str, Any], rows: list[int], replay: dict[str, Any]) -> dict[str, Any]:
    """`out` with each of `rows` taken from the replay's row in its place (every per-row field)."""
    merged = dict(out)
    for key, values in out.items():
        new = replay.get(key)
        if not isinstance(values, list) or not isinstance(new, list) or len(new) != len(rows):
            if isinstance(values, list) and rows and key in TOKEN_FIELDS:
                raise ValueError(f"the replacement rollout returned no {key!r} for its {len(rows)} rows")
            continue
        merged[key] = list(values)
        for j, i in enumerate(rows):
            merged[key][i] = new[j]
    return merged


class _DynamicSamplingCallback(TrainerCallback):
    def __init__(self, layer: DynamicSampling) -> None:
        self.layer = layer

    def on_log(
        self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any
    ) -> None:
        if logs is not None and "loss" in logs:  # the step just done: its rollout ran at global_step - 1
            counts = self.layer.take_counts(state.global_step - 1)
            logs["dynamic/extra_groups"] = counts["extra_groups"]
            logs["dynamic/without_signal"] = counts["without_signal"]
            tasks = sorted({key.rsplit("/", 1)[0] for key in counts if key.endswith("/drawn")})
            for task in tasks:  # every task played: drawn = kept + dropped
                for what in ("drawn", "kept", "dropped"):
                    logs[f"dynamic/{task}/{what}"] = counts[f"{task}/{what}"]
