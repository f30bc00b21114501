"""Evaluation during training: greedy episodes on held-out seeds every N steps, best checkpoint kept.

Training pages are seeded from [1,000,000, 2,000,000) (`task_dataset`); these episodes play seeds
0..n-1 of every trained task and of the named transfer tasks (``--eval-tasks``), greedily, with
the training prompt, turns and token budget. Each evaluation goes into that step's log
(``eval/<task>/success``, ``eval/trained_mean``, ``eval/transfer_mean``) and `eval_log.jsonl`, so a
task that starts to be forgotten shows on the step it starts; the model with the best held-out
mean over the trained tasks is saved to ``best/`` (with ``best/best.json`` saying when and why).
With ``on_start`` (``--eval-on-start``) the starting model is evaluated first, as step 0: a run
whose updates only lose ground then keeps the model it started from in ``best/``.

Under several processes each rank plays its share of the seeds (every N-th) with its own copy of
the model, no collective while it plays; one gather then gives every rank the same counts, so
every rank takes the same decision about ``best/``, which rank 0 alone writes, with the log.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from envharness.integrations.trl import ranks

#: Evaluates `model` on one task's held-out seeds: success rate in [0, 1].
EvaluateTask = Callable[[Any, str, list[int]], float]


def kept_best(out: Path) -> float | None:
    """The held-out mean of the model in `out`/best (None: no best kept yet)."""
    try:
        return float(json.loads((out / "best" / "best.json").read_text())["eval/trained_mean"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


class HeldOutEvaluation(TrainerCallback):
    """Every `every` steps (and at step 0 with `on_start`), `evaluate` each of `tasks` (trained) and
    `transfer` (never trained) on seeds 0..`episodes`-1; log, and save the best model to `out`/best."""

    def __init__(
        self,
        evaluate: EvaluateTask,
        *,
        every: int,
        tasks: Sequence[str],
        transfer: Sequence[str] = (),
        episodes: int = 8,
        on_start: bool = False,
        out: str | Path,
        tokenizer: Any = None,
    ) -> None:
        if every < 1 or episodes < 1:
            raise ValueError(f"eval_every and eval_episodes must be >= 1, got {every} and {episodes}")
        self.evaluate = evaluate
        self.every, self.episodes, self.on_start = every, episodes, on_start
        self.tasks, self.transfer = list(tasks), [t for t in transfer if t not in tasks]
        self.out, self.tokenizer = Path(out), tokenizer
        self.best: float | None = kept_best(self.out)  # a resumed run keeps its best so far
        self._pending: dict[str, Any] | None = None

    def run(self, model: Any, step: int) -> dict[str, Any]:
        """Evaluate now; returns the log entry (also appended to eval_log.jsonl)."""
        seeds = list(range(self.episodes))
        was_training = getattr(model, "training", False)
        model.eval()
        try:
            success = self._success(model, seeds)
            measured = self.measure(model)
        finally:
            if was_training:
                model.train()
        entry: dict[str, Any] = {"step": step, **measured}
        entry.update({f"eval/{task}/success": rate for task, rate in success.items()})
        entry["eval/trained_mean"] = sum(success[t] for t in self.tasks) / len(self.tasks)
        if self.transfer:
            entry["eval/transfer_mean"] = sum(success[t] for t in self.transfer) / len(self.transfer)
        if ranks.is_main():
            with (self.out / "eval_log.jsonl").open("a") as log:
                log.write(json.dumps(entry) + "\n")
        if self.best is None or entry["eval/trained_mean"] > self.best:  # the same on every rank
            self.best = entry["eval/trained_mean"]
            if ranks.is_main():
                self._save_best(model, entry)
        return entry

    def _success(self, model: Any, seeds: list[int]) -> dict[str, float]:
        """Each task's success rate over `seeds`; under N processes, each rank plays every N-th
        seed and one all-gather sums the episodes won (a verdict is a whole episode). A rank
        whose episodes fail still reaches the gather, so every rank stops with its words."""
        tasks = [*self.tasks, *self.transfer]
        if ranks.world_size() == 1:
            return {task: self.evaluate(model, task, seeds) for task in tasks}
        share = seeds[ranks.rank() :: ranks.world_size()]
        won: dict[str, int] = {}
        error = None
        try:
            for task in tasks:
                won[task] = round(self.evaluate(model, task, share) * len(share)) if share else 0
        except Exception as exc:  # noqa: BLE001 (raised below on every rank, after the gather)
            error = f"rank {ranks.rank()}: {type(exc).__name__}: {exc}"
        gathered = ranks.all_gather([(won, error)])
        errors = [e for _, e in gathered if e]
        if errors:
            raise RuntimeError(f"held-out evaluation failed on {'; '.join(errors)}")
        return {task: sum(part[task] for part, _ in gathered) / len(seeds) for task in tasks}

    def measure(self, model: Any) -> dict[str, Any]:
        """What else each evaluation logs (a subclass's numbers; nothing here)."""
        return {}

    def _save_best(self, model: Any, entry: dict[str, Any]) -> None:
        best = self.out / "best"
        model.save_pretrained(str(best))
        if self.tokenizer is not None:
            self.tokenizer.save_pretrained(str(best))
        (best / "best.json").write_text(json.dumps({**entry, "held_out_seeds": self.episodes}, indent=2))

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        if self.on_start and model is not None and state.global_step == 0:  # not again on --resume
            self.run(getattr(model, "module", model) if _is_ddp(model) else model, 0)

    def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        if model is not None and state.global_step % self.every == 0:  # every rank: one gather
            self._pending = self.run(
                getattr(model, "module", model) if _is_ddp(model) else model, state.global_step
            )

    def on_log(
        self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any
    ) -> None:
        if logs is not None and "loss" in logs and self._pending is not None:
            logs.update({k: v for k, v in self._pending.items() if k != "step"})
            self._pending = None


def _is_ddp(model: Any) -> bool:
    """Whether `model` is DDP's wrapper (whose forward would talk to the other ranks)."""
    from torch.nn.parallel import DistributedDataParallel

    return isinstance(model, DistributedDataParallel)
