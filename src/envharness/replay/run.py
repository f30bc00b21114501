"""What a run folder says about how to play its episodes again.

An eval folder holds `config.json`, a train folder `train_config.json`; both hold
`episodes.jsonl`. Replay needs the environment, the options its server was started with
(train starts its own with the environment's `train_server_options` under the user's),
the tools the model could call and the recorded episodes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from envharness.core import wire_json
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
    #: A mix's environments (`train --mix`), each with its own records and server; empty for
    #: a run of one environment.
    parts: list[RecordedRun] = field(default_factory=list)


class RunConfig(BaseModel):
    """What replay reads of `config.json` / `train_config.json` (the rest is ignored). Checked
    before anything is imported or started: a folder may come from anyone."""

    model_config = ConfigDict(extra="ignore", strict=True)

    env: str = ""
    env_options: dict[str, Any] = {}
    tasks: list[str] | None = None
    actions: list[str] | None = None
    mix: dict[str, list[str]] | None = None
    agent: str | None = None
    #: A mix's `--opponent` / `--seat` (one environment's run has them in `env_options`).
    opponent: str = ""
    seat: str = "alternate"


def _config(path: Path, data: dict[str, Any]) -> RunConfig:
    try:
        return RunConfig.model_validate(data)
    except ValidationError as exc:
        words = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise ReplaySetupError(f"{path} is not a run's config: {words}") from None


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = wire_json.loads(path.read_text(encoding="utf-8"))  # a folder may come from anyone
    except (OSError, ValueError) as exc:
        raise ReplaySetupError(f"cannot read {path}: {exc}") from None
    if not isinstance(data, dict):
        raise ReplaySetupError(f"{path} is not a JSON object")
    return data


def read_run(folder: str | Path, *, env: str | None = None) -> RecordedRun:
    """The run in `folder` (written by `envharness eval` or `envharness train`); `env` names
    the environment instead of the run's config (its options are still the run's)."""
    path = Path(folder)
    if not path.is_dir():
        raise ReplaySetupError(f"{path} does not exist" if not path.exists() else f"{path} is not a folder")
    if (path / "config.json").is_file():
        name, kind = "config.json", "eval"
    elif (path / "train_config.json").is_file():
        name, kind = "train_config.json", "train"
    else:
        raise ReplaySetupError(f"{path} holds neither config.json (eval) nor train_config.json (train)")
    config = _config(path / name, _read_json(path / name))
    if config.agent:
        raise ReplaySetupError(
            f"{path} was trained with --agent: its agents played through /mcp with tools of their "
            "own, which replay cannot call again; replay covers the harness's episodes"
        )
    episodes = path / "episodes.jsonl"
    if not episodes.is_file():
        raise ReplaySetupError(f"{path} has no episodes.jsonl")
    try:
        records = list(iter_records(episodes))
    except ValueError as exc:
        raise ReplaySetupError(str(exc)) from None
    if not records:
        raise ReplaySetupError(f"{episodes} holds no episodes: nothing to replay")
    if config.mix and env is None:
        return _mix_run(path, config, records)
    tasks = config.tasks or []
    return _env_run(path, kind, env or config.env, dict(config.env_options),
                    tools=config.actions or None,
                    default_task=tasks[0] if tasks else None, records=records)  # fmt: skip


def _env_run(
    path: Path,
    kind: str,
    env: str,
    options: dict[str, Any],
    *,
    tools: list[str] | None,
    default_task: str | None,
    records: list[EpisodeRecord],
) -> RecordedRun:
    """One environment's part of a run, with the options its server was started with."""
    from envharness.core.registry import env_harness

    try:
        harness = env_harness(env, options)
    except ImportError as exc:
        raise ReplaySetupError(
            f"{path}: environment {env!r}: {exc}. replay never imports code from the run's folder (a folder "
            "may come from anyone): make the module importable (pip install it, or set PYTHONPATH to its "
            "folder) or name the environment with --env"
        ) from None
    except (KeyError, AttributeError, ValueError) as exc:
        raise ReplaySetupError(f"{path}: environment {env!r}: {_words(exc)}") from None
    if kind == "train":
        options = {**harness.train_server_options, **options}
    return RecordedRun(path, kind, env, options, tools, default_task, records)


def _words(exc: Exception) -> str:
    """An error's message (a KeyError's without the quotes `str` puts around it)."""
    return str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)


def _mix_run(path: Path, config: RunConfig, records: list[EpisodeRecord]) -> RecordedRun:
    """A `train --mix` run: each episode goes back to the environment it names (`metrics.env`),
    on a server with the seating `--opponent` gave that environment's."""
    mix = config.mix or {}
    unnamed = [r.episode_id or f"{r.task} seed {r.seed}" for r in records if r.metrics.get("env") not in mix]
    if unnamed:
        raise ReplaySetupError(
            f"{path} was trained on a mix ({', '.join(mix)}) but {len(unnamed)} episode(s) name none of its "
            f"environments (first: {unnamed[0]})"
        )
    seating = _mix_seating(path, config)
    parts = [
        _env_run(
            path,
            "train",
            env,
            seating.get(env, {}),
            tools=None,
            default_task=(tasks or [None])[0],
            records=[r for r in records if r.metrics.get("env") == env],
        )  # fmt: skip
        for env, tasks in mix.items()
    ]
    return RecordedRun(path, "train", "+".join(mix), {}, None, None, records, parts)


def _mix_seating(path: Path, config: RunConfig) -> dict[str, dict[str, Any]]:
    """The server options of each environment of the mix that `--opponent` seated, from the
    plan of play the run was trained with (`harness/plan.py`, as `train` resolves it)."""
    if not config.opponent:
        return {}
    from envharness.harness.plan import resolve_mix

    try:
        plan = resolve_mix(config.mix or {}, config.opponent, config.seat)
    except (ImportError, KeyError, AttributeError, ValueError) as exc:
        raise ReplaySetupError(f"{path}: --opponent {config.opponent}: {_words(exc)}") from None
    return {row.name: dict(row.seats.server_options) for row in plan.rows}
