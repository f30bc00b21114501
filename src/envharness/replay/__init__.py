"""`envharness replay RUN_DIR`: play a run's recorded episodes again and check they come out the same.

A reward is only as good as its environment: the same task, seed and actions must give the
same observations, rewards and done flags. Replay starts a fresh server as the run did (or
uses `env_url`), plays every recorded episode's tool calls in order and reports, per
episode, whether it is identical or the first step where it differs (`replay/episode.py`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envharness.harness.records import EpisodeRecord
from envharness.harness.seat_player import RecordedSeats
from envharness.replay.episode import EpisodeReplay, Finding, replay_episode
from envharness.replay.run import RecordedRun, ReplaySetupError, read_run


@dataclass
class ReplayReport:
    run: RecordedRun
    episodes: list[EpisodeReplay] = field(default_factory=list)
    #: Why this environment may not reproduce its episodes (live websites); None: it must.
    caveat: str | None = None

    @property
    def identical(self) -> int:
        return sum(e.identical for e in self.episodes)

    @property
    def differing(self) -> list[EpisodeReplay]:
        return [e for e in self.episodes if e.findings]

    @property
    def skipped(self) -> list[EpisodeReplay]:
        return [e for e in self.episodes if e.skipped is not None]

    def to_json(self) -> dict[str, Any]:
        return {
            "run": str(self.run.folder),
            "kind": self.run.kind,
            "env": self.run.env,
            "server_options": self.run.server_options,
            "caveat": self.caveat,
            "episodes": len(self.episodes),
            "identical": self.identical,
            "differing": len(self.differing),
            "skipped": len(self.skipped),
            "results": [dataclasses.asdict(e) | {"identical": e.identical} for e in self.episodes],
        }


def _session_factory(
    run: RecordedRun, base_url: str, seats: RecordedSeats | None = None, seat: Any = None
) -> Any:
    """The harness's session factory on `base_url`; with `seats`, the client plays the other
    seats of the game with the recorded opponent's moves, the agent in its recorded `seat`."""
    from envharness.core.registry import env_harness, get_spec

    harness = env_harness(run.env, run.server_options)
    client_class = get_spec(run.env).load("client")
    if seats is not None:
        if harness.seat_client is None:
            raise ReplaySetupError(f"{run.env} records an opponent's moves but cannot seat one")
        plain_class = client_class

        def client_class(url: str) -> Any:
            return harness.seat_client(plain_class(url), seats, str(seat))

    reset_kwargs = dict(harness.reset_kwargs)
    if harness.screenshots:  # pixels are not compared: do not pay for them
        reset_kwargs["screenshot"] = False
    options: dict[str, Any] = {"reset_kwargs": reset_kwargs}
    if run.tools is not None:
        options["tools"] = run.tools
    return harness.session_factory(
        lambda: client_class(base_url), default_task=run.default_task, **options
    ), harness


def self_play_partner_moves(
    records: list[EpisodeRecord], record: EpisodeRecord
) -> list[dict[str, Any]] | None:
    """In self-play every seat of a game is its own record (`metrics.game`, `metrics.seat`): the
    other seat's moves, in its order, are the opponent that `record`'s seat played against. None
    where `record` is not one seat of a two-seat game whose other seat was recorded."""
    game, seat = record.metrics.get("game"), record.metrics.get("seat")
    if game is None or seat is None:
        return None
    others = [r for r in records if r.metrics.get("game") == game and r.metrics.get("seat") != seat]
    if len(others) != 1:
        return None
    other = others[0]
    return [
        {"seat": other.metrics["seat"], "reply": str((call.get("arguments") or {}).get("message", ""))}
        for call in other.tool_calls
    ]


async def replay_run_async(
    folder: str | Path,
    *,
    env_url: str | None = None,
    concurrency: int = 4,
    on_episode: Callable[[EpisodeReplay], Any] | None = None,
    env: str | None = None,
) -> ReplayReport:
    """Replay every episode recorded in `folder` on a fresh local server (or `env_url`, which
    must serve the same environment with the same options); a mix's episodes each on a server
    of their own environment. `env`: the environment instead of the one the run names."""
    run = read_run(folder, env=env)
    if concurrency < 1:
        raise ReplaySetupError("concurrency must be at least 1")
    if run.parts and env_url is not None:
        raise ReplaySetupError(
            f"{run.folder} was trained on a mix ({run.env.replace('+', ', ')}): replay starts a server for each "
            "environment; leave out --env-url"
        )
    report = ReplayReport(run)
    caveats = []
    for part in run.parts or [run]:
        episodes, caveat = await _replay_part(part, env_url, concurrency, on_episode)
        report.episodes += episodes
        if caveat and caveat not in caveats:
            caveats.append(caveat)
    report.caveat = "; ".join(caveats) or None
    return report


async def _replay_part(
    run: RecordedRun,
    env_url: str | None,
    concurrency: int,
    on_episode: Callable[[EpisodeReplay], Any] | None,
) -> tuple[list[EpisodeReplay], str | None]:
    """One environment's episodes, replayed on its server; with the environment's caveat."""
    server = None
    if env_url is None:
        from envharness.core.launchers import launch_local_async

        server = await launch_local_async(
            run.env, options=run.server_options, server_args=["--max-sessions", str(max(16, 2 * concurrency))]
        )
    try:
        url = env_url or server.base_url
        factory, harness = _session_factory(run, url)
        gate = asyncio.Semaphore(concurrency)
        results: list[EpisodeReplay | None] = [None] * len(run.records)

        async def one(i: int) -> None:
            record, seats, episode_factory = run.records[i], None, factory
            if record.opponent_moves is not None:  # a model played the other seats: its moves as recorded
                opponent = str(record.verify_metrics.get("opponent") or "opponent")
                seats = RecordedSeats(name=opponent, recorded=list(record.opponent_moves))
                episode_factory, _ = _session_factory(run, url, seats, record.verify_metrics.get("seat"))
            elif (moves := self_play_partner_moves(run.records, record)) is not None:
                seats = RecordedSeats(name="self", recorded=moves)  # the other seat's own record
                episode_factory, _ = _session_factory(run, url, seats, record.metrics["seat"])
            async with gate:
                results[i] = await replay_episode(episode_factory, record, seats)
            if on_episode is not None:
                on_episode(results[i])

        await asyncio.gather(*(one(i) for i in range(len(run.records))))
        return [r for r in results if r is not None], harness.replay_caveat
    finally:
        if server is not None:
            await asyncio.to_thread(server.stop)


def replay_run(folder: str | Path, **kwargs: Any) -> ReplayReport:
    """Synchronous `replay_run_async`."""
    return asyncio.run(replay_run_async(folder, **kwargs))


def write_report(report: ReplayReport, path: str | Path) -> Path:
    target = Path(path)
    target.write_text(json.dumps(report.to_json(), indent=2, default=str) + "\n", encoding="utf-8")
    return target


__all__ = [
    "EpisodeReplay",
    "Finding",
    "RecordedRun",
    "ReplayReport",
    "ReplaySetupError",
    "read_run",
    "replay_episode",
    "replay_run",
    "replay_run_async",
    "write_report",
]
