"""Resuming a GRPO run from its output folder (what a stopped run keeps: `callbacks.save_finished_steps`).

A run folder holds `checkpoint-N/` folders (TRL/transformers checkpoints: weights,
optimizer, scheduler, RNG, `trainer_state.json` written last), `episodes.jsonl` (each
episode tagged with `metrics.train_step`, the step whose rollout played it) and
`train_log.jsonl`. Resuming from checkpoint-N keeps exactly the first N steps of both
files, so a step replayed after a kill is never counted twice, and TRL continues the
learning curve from the checkpoint's log history.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envharness.harness.run_options import resume_or_overwrite

_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")

#: Settings a resumed run may change; every other one must match the first run's.
RESUMABLE_CHANGES = frozenset(
    {"max_steps", "minutes", "threads", "env_url", "output_dir", "resume", "save_steps"}
)


@dataclass(frozen=True)
class Checkpoint:
    path: Path
    step: int


def latest_checkpoint(output_dir: str | Path) -> Checkpoint | None:
    """The newest complete checkpoint (its `trainer_state.json`, written last, reads back)."""
    found: list[Checkpoint] = []
    folder = Path(output_dir)
    if not folder.is_dir():
        return None
    for entry in folder.iterdir():
        match = _CHECKPOINT.match(entry.name)
        if not match or not entry.is_dir():
            continue
        try:
            state = json.loads((entry / "trainer_state.json").read_text())
        except (OSError, ValueError):
            continue  # killed while saving: not usable
        found.append(Checkpoint(entry, int(state.get("global_step", match.group(1)))))
    return max(found, key=lambda c: c.step, default=None)


def config_changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """`key: old -> new` for each setting that differs and may not change on resume (a
    setting the old run did not record, added to envharness since, is not compared)."""
    keys = sorted((set(old) & set(new)) - RESUMABLE_CHANGES)
    return [f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in keys if old.get(k) != new.get(k)]


def _rewrite_jsonl(path: Path, keep: Any) -> int:
    """Keep the lines `keep(entry)` accepts (a torn last line is dropped); returns how many."""
    if not path.exists():
        return 0
    kept = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if keep(entry):
            kept.append(line)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text("".join(f"{line}\n" for line in kept), encoding="utf-8")
    os.replace(tmp, path)
    return len(kept)


def trim_to_step(output_dir: str | Path, step: int) -> int:
    """Cut `episodes.jsonl`, `train_log.jsonl` and `eval_log.jsonl` back to the first `step`
    steps, and drop a `best/` chosen after them (those steps are played again); returns the
    episodes kept. Records of step k carry `metrics.train_step == k - 1`."""
    out = Path(output_dir)
    _rewrite_jsonl(out / "train_log.jsonl", lambda e: e.get("step", 0) <= step and "train_runtime" not in e)
    _rewrite_jsonl(out / "eval_log.jsonl", lambda e: e.get("step", 0) <= step)
    try:
        best_step = json.loads((out / "best" / "best.json").read_text()).get("step", 0)
    except (OSError, ValueError, AttributeError):
        best_step = 0
    if best_step > step:
        shutil.rmtree(out / "best", ignore_errors=True)
    return _rewrite_jsonl(
        out / "episodes.jsonl", lambda e: (e.get("metrics") or {}).get("train_step", step) < step
    )


#: What a training run leaves in its folder, removed by `train --overwrite` before it starts.
RUN_OUTPUTS = (
    "final",
    "best",
    "runs",
    "episodes.jsonl",
    "train_log.jsonl",
    "eval_log.jsonl",
    "reward_curve.png",
    "train_config.json",
)


def clear_run(output_dir: str | Path) -> None:
    """Remove an earlier run's checkpoints and outputs from `output_dir` (`--overwrite`);
    anything else in the folder stays."""
    out = Path(output_dir)
    for path in [*out.glob("checkpoint-*"), *(out / name for name in RUN_OUTPUTS)]:
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)


def count_step_records(output_dir: str | Path, step: int) -> int:
    """Episode records of the first `step` steps in `episodes.jsonl`."""
    count = 0
    try:
        with (Path(output_dir) / "episodes.jsonl").open(encoding="utf-8") as f:
            for line in f:
                try:
                    count += (json.loads(line).get("metrics") or {}).get("train_step", step) < step
                except (ValueError, AttributeError):
                    continue
    except OSError:
        return 0
    return count


def plan_resume(
    output_dir: str | Path,
    config: dict[str, Any],
    resume: bool,
    config_name: str = "train_config.json",
    overwrite: bool | None = None,
) -> Checkpoint | None:
    """The checkpoint to resume from (None: a fresh run), or ValueError saying why the
    folder cannot be used as asked (`config_name`: the run's saved settings; `overwrite`: the
    command's --overwrite, None where it has none). Nothing is changed on disk."""
    out = Path(output_dir)
    latest = latest_checkpoint(out)
    resume_or_overwrite(resume, overwrite)
    if not resume:
        if latest is not None and not overwrite:
            instead = (
                "--overwrite to replace it, or choose another --out"
                if overwrite is not None
                else ("or choose another --output-dir")
            )
            raise ValueError(
                f"{out} already holds a run (checkpoint-{latest.step}): pass --resume to continue it, {instead}"
            )
        return None
    if latest is None:
        raise ValueError(
            f"--resume: no complete checkpoint in {out} (a run saves one every --save-steps steps)"
        )
    try:
        old = json.loads((out / config_name).read_text())
    except (OSError, ValueError):
        old = None
    changes = config_changes(old, config) if isinstance(old, dict) else []
    if changes:
        raise ValueError(f"--resume: {out} was trained with other settings ({'; '.join(changes)})")
    return latest
