"""Demonstrations for `envharness sft`: successful episodes as exact token sequences.

Two sources, one form (a `Demonstration`: the episode's sequence and which tokens were the
model's):

- ``scripted``: the environment's scripted policy plays the tasks through eval's runner, its
  replies put into the student's tokens by `TeacherForcedBackend` under a conversation prompt
  style, so each sequence is what `envharness train` would assemble for those replies (and what
  `envharness eval --prompt STYLE` shows the model at each turn);
- an eval run folder recorded with ``--record-tokens`` (rejection sampling: a model's own
  successes): the recorded sequences, checked to be the student tokenizer's.

Only successful episodes are kept (eval's verdict: the session's ``success``, else reward > 0).
The loss later falls on the model's tokens only (``env_mask`` 1): page text, tool results
and the prompt are context, as in GRPO.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class DemonstrationError(ValueError):
    """The demonstrations cannot be had as asked; the message says why."""


@dataclass
class Demonstration:
    task: str
    seed: int | None
    prompt_ids: list[int]
    completion_ids: list[int]
    #: 1 on the model's tokens (trained on), 0 on tokens the environment added between turns.
    env_mask: list[int]

    @property
    def input_ids(self) -> list[int]:
        return self.prompt_ids + self.completion_ids

    @property
    def labels(self) -> list[int]:
        """Causal-LM labels: the model's tokens, -100 everywhere else."""
        return [-100] * len(self.prompt_ids) + [
            t if m else -100 for t, m in zip(self.completion_ids, self.env_mask)
        ]


@dataclass
class DemonstrationSet:
    demonstrations: list[Demonstration] = field(default_factory=list)
    #: Episodes seen, and why the others were left out (reason -> count).
    episodes: int = 0
    dropped: dict[str, int] = field(default_factory=dict)

    def drop(self, reason: str) -> None:
        self.dropped[reason] = self.dropped.get(reason, 0) + 1

    def summary(self) -> str:
        left = ", ".join(f"{n} {why}" for why, n in sorted(self.dropped.items())) or "none left out"
        tokens = sum(sum(d.env_mask) for d in self.demonstrations)
        return f"{len(self.demonstrations)} demonstrations of {self.episodes} episodes ({left}); {tokens} model tokens"


def from_records(
    records: list[dict[str, Any]], tokenizer: Any, *, max_length: int | None = None
) -> DemonstrationSet:
    """Successful episodes with exact token ids (``token_ids`` of eval's records)."""
    from envharness.eval.stats import is_success

    out = DemonstrationSet()
    for record in records:
        out.episodes += 1
        ids = record.get("token_ids")
        if record.get("error"):
            out.drop("crashed")
        elif not is_success(record):
            out.drop("failed")
        elif not ids or not ids.get("prompt_ids"):
            out.drop("without token ids")
        elif (record.get("metrics") or {}).get("token_break_turn") is not None:
            out.drop("with an inexact turn")
        elif max_length is not None and len(ids["prompt_ids"]) + len(ids["completion_ids"]) > max_length:
            out.drop(f"longer than {max_length} tokens")
        elif not sum(ids["env_mask"]):
            out.drop("without a model token")
        else:
            out.demonstrations.append(
                Demonstration(
                    str(record.get("task")),
                    record.get("seed"),
                    list(ids["prompt_ids"]),
                    list(ids["completion_ids"]),
                    list(ids["env_mask"]),
                )
            )
    _check_tokenizer(out, records, tokenizer)
    return out


def _check_tokenizer(demos: DemonstrationSet, records: list[dict[str, Any]], tokenizer: Any) -> None:
    """Recorded ids are only meaningful in the tokenizer that made them: the first prompt must
    decode to text holding the episode's opening message."""
    if not demos.demonstrations:
        return
    first = demos.demonstrations[0]
    record = next(r for r in records if r.get("task") == first.task and r.get("seed") == first.seed)
    opening = next((m.get("content") for m in record.get("messages") or [] if m.get("role") == "user"), None)
    if isinstance(opening, str) and opening.strip():
        text = tokenizer.decode(first.prompt_ids, skip_special_tokens=False)
        if opening.strip()[:200] not in text:
            raise DemonstrationError(
                "the run's token ids are not this model's tokens (its prompt does not decode to the "
                "episode's opening message): record the run with a model of the same tokenizer"
            )


def read_run(folder: str | Path) -> list[dict[str, Any]]:
    """The episode records of an eval run folder."""
    path = Path(folder) / "episodes.jsonl"
    if not path.is_file():
        raise DemonstrationError(f"{folder} is not an eval run folder (no episodes.jsonl)")
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


async def scripted_records(eval_config: Any, tokenizer: Any) -> list[dict[str, Any]]:
    """Play `eval_config`'s tasks with the environment's scripted policy in `tokenizer`'s tokens
    (eval's runner, ``record_tokens``); the run folder is `eval_config.out`."""
    from envharness.eval.runner import run_eval_async
    from envharness.models.scripted import ScriptedBackend
    from envharness.models.teacher import TeacherForcedBackend

    teacher = TeacherForcedBackend(
        tokenizer, ScriptedBackend(env=eval_config.env, env_options=eval_config.env_options)
    )
    await run_eval_async(eval_config, backend=teacher)
    return read_run(eval_config.out)
