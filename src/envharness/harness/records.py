"""Episode records: one JSON line per episode, shared by `envharness eval` and `train`.

A record says what happened (messages, tool calls with their actions, rewards and
errors), how it ended (reward, done, error, stop reason), how long it took and how many
tokens it used; optionally the exact token ids. Every line carries `version`; readers
refuse versions newer than they know instead of misreading them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import IO, Any

from envharness.core import wire_json
from envharness.harness.types import HarnessRolloutResult

RECORD_VERSION = 1


def _jsonable(value: Any) -> Any:
    """Plain JSON data (pydantic models dumped, unknown objects as their str)."""
    return json.loads(
        json.dumps(value, default=lambda v: v.model_dump() if hasattr(v, "model_dump") else str(v))
    )


@dataclass
class EpisodeRecord:
    version: int = RECORD_VERSION
    episode_id: str | None = None
    task: Any = None
    seed: int | None = None
    env_reward: float | None = None
    done: bool = False
    error: str | None = None
    messages: list[dict[str, Any]] = field(default_factory=list)
    #: One per executed tool call: turn, name, arguments, action, reward, done, error,
    #: parse_error (when the call is a parser's fallback), elapsed_s.
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    #: The reward each tool call reported (None where it reported none), in order.
    rewards: list[float | None] = field(default_factory=list)
    metrics: dict[str, Any] = field(default_factory=dict)
    verify_metrics: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    #: prompt / completion / model / env token counts.
    tokens: dict[str, int] = field(default_factory=dict)
    #: Exact sequences (prompt_ids, completion_ids, logprobs, env_mask) when asked for.
    token_ids: dict[str, list] | None = None
    #: A fingerprint of each observation the environment returned (the reset's first, then one
    #: per step that reached it): what `envharness replay` compares. None: not recorded.
    observation_digests: list[str] | None = None
    #: A model in the other seats of a game (`--opponent self|<model>`): its moves in order
    #: (seat, what it was shown, its reply, the move sent), apart from the episode's messages:
    #: never trained on, and replayed as recorded. None: no model opponent.
    opponent_moves: list[dict[str, Any]] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The record's fields, as they are: `record_from_result` built them as fresh JSON data,
        so `asdict`'s deep copy of every message and token list was work for nothing."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EpisodeRecord:
        if not isinstance(data, dict):
            raise ValueError(f"expected a JSON object, got {type(data).__name__}")
        version = data.get("version")
        if not isinstance(version, int) or version > RECORD_VERSION:
            raise ValueError(
                f"episode record version {version!r} is not readable by this envharness (knows up to {RECORD_VERSION})"
            )
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


def _tool_calls(result: HarnessRolloutResult) -> list[dict[str, Any]]:
    events = [e.payload for e in result.events if e.type == "tool_call"]
    calls = []
    for i, entry in enumerate(result.tool_trace):
        meta = entry.result.metadata
        event = events[i] if i < len(events) else {}
        calls.append(
            {
                "turn": event.get("turn"),
                "name": entry.tool_name,
                "arguments": entry.arguments,
                "action": meta.get("action"),
                "reward": meta.get("reward"),
                "done": entry.result.done,
                "error": entry.result.error,
                "parse_error": event.get("parse_error"),
                "elapsed_s": event.get("elapsed_s"),
            }
        )
    return calls


def _observation_digests(result: HarnessRolloutResult) -> list[str] | None:
    digests = result.verify.artifacts.get("observation_digests") if result.verify is not None else None
    return [str(d) for d in digests] if isinstance(digests, list) else None


def record_from_result(result: HarnessRolloutResult, *, include_tokens: bool = False) -> EpisodeRecord:
    """The record of one finished episode."""
    calls = _tool_calls(result)
    token_counts = {
        k: int(result.metrics.get(f"{k}_tokens", 0)) for k in ("prompt", "completion", "model", "env")
    }
    return EpisodeRecord(
        episode_id=result.episode_id,
        task=_jsonable(result.task),
        seed=result.seed,
        env_reward=result.env_reward,
        done=result.done,
        error=result.error,
        messages=_jsonable(result.messages),
        tool_calls=_jsonable(calls),
        rewards=[c["reward"] for c in calls],
        metrics=_jsonable(result.metrics),
        verify_metrics=_jsonable(result.verify.metrics) if result.verify is not None else {},
        timings=dict(result.timings),
        tokens=token_counts,
        observation_digests=_observation_digests(result),
        opponent_moves=_jsonable(result.opponent_moves),
        token_ids=(
            {
                "prompt_ids": result.prompt_ids,
                "completion_ids": result.completion_ids,
                "logprobs": result.logprobs,
                "env_mask": result.env_mask,
            }
            if include_tokens
            else None
        ),
    )


class EpisodeRecordWriter:
    """Appends records to a JSONL file as episodes finish; usable as `run_episodes(on_result=...)`."""

    def __init__(self, path: str | Path, *, include_tokens: bool = False, append: bool = False):
        self.path = Path(path)
        self.include_tokens = include_tokens
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file: IO[str] = self.path.open("a" if append else "w", encoding="utf-8")

    def write(self, result: HarnessRolloutResult) -> EpisodeRecord:
        record = record_from_result(result, include_tokens=self.include_tokens)
        self._file.write(json.dumps(record.to_dict()) + "\n")
        self._file.flush()
        return record

    def __call__(self, index: int, result: HarnessRolloutResult) -> None:
        self.write(result)

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> EpisodeRecordWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_records(
    path: str | Path, results: Iterable[HarnessRolloutResult], *, include_tokens: bool = False
) -> list[EpisodeRecord]:
    """Write finished episodes to `path` (replacing it)."""
    with EpisodeRecordWriter(path, include_tokens=include_tokens) as writer:
        return [writer.write(r) for r in results]


def iter_records(path: str | Path) -> Iterator[EpisodeRecord]:
    """Records from a JSONL file; a bad line raises ValueError naming its line number."""
    with Path(path).open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                yield EpisodeRecord.from_dict(wire_json.loads(line))  # a folder may come from anyone
            except (json.JSONDecodeError, TypeError, ValueError) as exc:
                raise ValueError(f"{path}:{lineno}: not an episode record: {exc}") from exc


def read_records(path: str | Path) -> list[EpisodeRecord]:
    return list(iter_records(path))
