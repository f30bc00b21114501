"""What a run folder says about how to play its episodes again.

An eval folder holds `config.json`, a train folder `train_config.json`; both hold
`episodes.jsonl`. Replay needs the environment, the options its server was started with
(train starts its own with the environment's `train_server_options` under the user's),
the tools the model could call and the recorded episodes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envharness.harness.records import EpisodeRecord, iter_records


class ReplaySetupError(ValueError):
    """The folder cannot be replayed (not a run folder, unreadable records, no harness)."""


@dataclass
class RecordedRun:
    folder: Path
    #: "eval" or "train": which command wrote the folder.
    kind: str
    env: str
    #: The server options the run's own server was started with.
    server_options: dict[str, Any] = field(default_factory=dict)
    #: The tools the model could call (None: the environment's default tools).
    tools: list[str] | None = None
    #: The task a record that names none played (train's prompts fall back to the first task).
    default_task: str | None = None
    records: list[EpisodeRecord] = field(default_factory=list)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ReplaySetupError(f"cannot read {path}: {exc}") from None
    if not isinstance(data, dict):
        raise ReplaySetupError(f"{path} is not a JSON object")
    return data


def read_run(folder: str | Path) -> RecordedRun:
    """The run in `folder` (written by `envharness eval` or `envharness train`)."""
    from envharness.core.registry import env_harness

    path = Path(folder)
    if (path / "config.json").is_file():
        config, kind = _read_json(path / "config.json"), "eval"
    elif (path / "train_config.json").is_file():
        config, kind = _read_json(path / "train_config.json"), "train"
    else:
        raise ReplaySetupError(f"{path} holds neither config.json (eval) nor train_config.json (train)")
    if config.get("agent"):
        raise ReplaySetupError(
            f"{path} was trained with --agent: its agents played through /mcp with tools of their "
            "own, which replay cannot call again; replay covers the harness's episodes"
        )
    if config.get("mix"):
        raise ReplaySetupError(
            f"{path} was trained on a mix of environments ({', '.join(config['mix'])}); replay plays "
            "one environment's records on its server and does not replay mixes yet"
        )
    env = str(config.get("env") or "")
    options = dict(config.get("env_options") or {})
    try:
        harness = env_harness(env, options)
    except (KeyError, ImportError, AttributeError, ValueError) as exc:
        raise ReplaySetupError(f"{path}: environment {env!r}: {exc}") from None
    if kind == "train":
        options = {**harness.train_server_options, **options}
    episodes = path / "episodes.jsonl"
    if not episodes.is_file():
        raise ReplaySetupError(f"{path} has no episodes.jsonl")
    try:
        records = list(iter_records(episodes))
    except ValueError as exc:
        raise ReplaySetupError(str(exc)) from None
    tasks = list(config.get("tasks") or [])
    return RecordedRun(
        folder=path,
        kind=kind,
        env=env,
        server_options=options,
        tools=list(config.get("actions") or []) or None,
        default_task=tasks[0] if tasks else None,
        records=records,
    )
