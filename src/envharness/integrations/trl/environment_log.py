"""What `environment_factory` keeps besides the episodes themselves: one seed per GRPO group,
the run's `episodes.jsonl` (train's record format, so `envharness replay`, `eval --compare` and
the report read a TRL-native run), and closing every environment when training ends.
"""

from __future__ import annotations

import json
import random
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from envharness.harness.records import record_from_result
from envharness.harness.types import HarnessRolloutResult


class GroupSeeds:
    """Seeds for rollouts whose dataset row names none (no dataset at all, or rows without a
    `seed`). TRL resets the instances of a batch in order, one per rollout, and a group's
    rollouts are next to each other; so the k-th reset of a batch belongs to group
    k // `num_generations`. Without `num_generations` a whole batch shares one seed, which is
    still one seed per group. A new batch starts when an instance is reset a second time."""

    def __init__(self, num_generations: int | None = None, seed: int = 0):
        if num_generations is not None and num_generations < 1:
            raise ValueError(f"num_generations must be at least 1, got {num_generations}")
        self.num_generations = num_generations
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._seen: set[int] = set()
        self._position = 0
        self._seed = 0

    def next(self, instance: object) -> int:
        """The seed of `instance`'s next episode."""
        with self._lock:
            if id(instance) in self._seen:
                self._seen.clear()
                self._position = 0
            self._seen.add(id(instance))
            if self._position % (self.num_generations or 1 << 62) == 0:
                self._seed = self._rng.randrange(
                    1_000_000, 2_000_000
                )  # train's seeds; eval's 0..N stay held out
            self._position += 1
            return self._seed


class EpisodeLog:
    """A run folder for TRL-native episodes: `episodes.jsonl` (one record per finished episode,
    the format `envharness train` writes, with `metrics.env` naming the environment) and
    `train_config.json`, which tells `envharness replay` how to play them again.

    Replay starts each environment's server as `train` does (the environment's
    `train_server_options`, then `server_options` here); start the servers your run plays
    the same way for an identical replay (`examples/trl_environment_factory.py` does)."""

    def __init__(self, folder: str | Path, *, server_options: Mapping[str, Any] | None = None):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.path = self.folder / "episodes.jsonl"
        self.path.write_text("", encoding="utf-8")
        self._server_options = dict(server_options or {})
        self._envs: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()

    def register(self, env: str, tasks: Iterable[str], tools: Iterable[str]) -> None:
        """An environment whose episodes land here (each `environment_factory` with `log=`)."""
        with self._lock:
            entry = self._envs.setdefault(env, {"tasks": [], "tools": list(tools)})
            entry["tasks"] += [t for t in tasks if t not in entry["tasks"]]
            self._write_config()

    def _write_config(self) -> None:
        if len(self._envs) == 1:
            ((env, entry),) = self._envs.items()
            config = {"env": env, "env_options": self._server_options, "actions": entry["tools"],
                      "tasks": entry["tasks"]}  # fmt: skip
        else:
            config = {"mix": {env: entry["tasks"] for env, entry in self._envs.items()}}
        config["trainer"] = "trl environment_factory"
        (self.folder / "train_config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")

    def write(self, env: str, result: HarnessRolloutResult) -> None:
        """Append one finished episode's record."""
        result.metrics.setdefault("env", env)
        line = json.dumps(record_from_result(result).to_dict())
        with self._lock:
            if isinstance(result.task, str):
                entry = self._envs.get(env)
                if entry is not None and result.task not in entry["tasks"]:
                    entry["tasks"].append(result.task)
                    self._write_config()
            with self.path.open("a", encoding="utf-8") as f:
                f.write(line + "\n")


def close_at_train_end(factories: Any) -> Any:
    """A `transformers.TrainerCallback` that closes every environment the factories made (a
    factory, a list of them, or TRL's `dict`) when training ends, so no session or browser
    page outlives the run and the last episodes reach the log."""
    from transformers import TrainerCallback

    if isinstance(factories, Mapping):
        factories = list(factories.values())
    elif not isinstance(factories, (list, tuple)):
        factories = [factories]

    class CloseEnvironments(TrainerCallback):
        def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            for factory in factories:
                factory.close()

    return CloseEnvironments()


__all__ = ["EpisodeLog", "GroupSeeds", "close_at_train_end"]
