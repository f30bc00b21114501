"""The run folder of an eval: where everything goes, and reading it back (for resume, reports, compare).

    RUN/config.json           what was asked (model, prompt, sampling, limits, tasks)
    RUN/episodes.jsonl        one line per episode: the shared `EpisodeRecord` fields plus
                              `steps` (prompt, completion, action, reward, error, screenshot
                              of each step), `final_screenshot` and `index`
    RUN/screenshots/ID/*.jpg  the page the model saw at each step, and the last page
    RUN/summary.json          the per-task table, as data
    RUN/report.html           self-contained report (screenshots inlined)
    RUN/success_rate.png      success rate per task with 95% intervals

An episode is identified by (task, seed). A line whose episode crashed (`error` set) is
kept for the record but redone on resume; the newest line of an episode wins.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envharness._deprecated import FILE_KEYS
from envharness.harness.records import EpisodeRecord

EpisodeKey = tuple[str, int]

#: Settings that must match for `--resume` to add to a run (mixing them would mix results).
IDENTITY_FIELDS = (
    "model",
    "prompt",
    "temperature",
    "max_steps",
    "max_new_tokens",
    FILE_KEYS["observation_tokens"],
    "actions",
)


@dataclass(frozen=True)
class RunFolder:
    path: Path

    @property
    def episodes(self) -> Path:
        return self.path / "episodes.jsonl"

    @property
    def config(self) -> Path:
        return self.path / "config.json"

    @property
    def summary(self) -> Path:
        return self.path / "summary.json"

    @property
    def report(self) -> Path:
        return self.path / "report.html"

    @property
    def plot(self) -> Path:
        return self.path / "success_rate.png"

    def read_config(self) -> dict[str, Any] | None:
        return json.loads(self.config.read_text()) if self.config.exists() else None

    def write_json(self, target: Path, data: Any) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def episode_key(record: dict[str, Any]) -> EpisodeKey:
    return str(record.get("task")), int(record.get("seed") or 0)


def read_episodes(path: Path) -> list[dict[str, Any]]:
    """The episode lines of a run (newest line per episode), as dicts. A line that is not an
    episode record, or one written by a newer envharness, raises ValueError naming it. An
    unterminated last line (the run was killed mid-write) is ignored; see `cut_partial_line`."""
    if not path.exists():
        return []
    latest: dict[EpisodeKey, dict[str, Any]] = {}
    text = path.read_text(encoding="utf-8")
    lines = text.split("\n")[:-1]  # whatever follows the last newline is unfinished
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}:{lineno}: not JSON: {exc}") from None
        if not isinstance(data, dict):
            raise ValueError(f"{path}:{lineno}: not an episode record")
        try:
            EpisodeRecord.from_dict(data)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{path}:{lineno}: not an episode record: {exc}") from None
        latest[episode_key(data)] = data
    return list(latest.values())


def cut_partial_line(path: Path) -> None:
    """Drop an unterminated last line, so that appended lines start on a line of their own."""
    if not path.exists():
        return
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        path.write_bytes(data[: data.rfind(b"\n") + 1])


def finished_keys(records: list[dict[str, Any]]) -> set[EpisodeKey]:
    """Episodes that ran to an end (success or not); crashed ones are not finished."""
    return {episode_key(r) for r in records if not r.get("error")}


def identity_mismatch(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """The settings that differ between a run's config and the one asked for now."""
    return [f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in IDENTITY_FIELDS if old.get(k) != new.get(k)]
