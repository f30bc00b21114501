"""Play one recorded episode again and say where it stops being the same.

The episode's task and seed open a fresh session; its tool calls go in the recorded order
through the same checks an episode makes (`call_tool_checked`). After each call the
environment's reward, done flag and error, and the fingerprint of what it showed, are
compared with the record; so is the reset's observation and the episode's final reward.
Nothing the model said matters here: only what reached the environment.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from envharness.harness.adapter import call_tool_checked
from envharness.harness.records import EpisodeRecord
from envharness.harness.rollout import resolve_env_reward
from envharness.harness.seat_player import RecordedSeats
from envharness.harness.session import call_session, create_session
from envharness.harness.tools import tool_name
from envharness.harness.types import HarnessRolloutResult, ToolTraceEntry


@dataclass
class Finding:
    """One difference. `step` 0 is the reset; step k is the k-th recorded tool call."""

    step: int
    what: str
    recorded: Any
    replayed: Any

    def describe(self) -> str:
        where = "the reset" if self.step == 0 else f"step {self.step}"
        return f"{where}: {self.what} was {_short(self.recorded)}, replayed {_short(self.replayed)}"


@dataclass
class EpisodeReplay:
    episode_id: str | None
    task: Any
    seed: int | None
    steps: int = 0
    #: Differences in step order; the first is where the episodes part.
    findings: list[Finding] = field(default_factory=list)
    #: Why the episode could not be compared (the record failed, the replay crashed).
    skipped: str | None = None
    #: Whether observations were compared (records written before fingerprints were kept hold none).
    observations_compared: bool = True

    @property
    def identical(self) -> bool:
        return self.skipped is None and not self.findings

    @property
    def first_difference(self) -> Finding | None:
        return self.findings[0] if self.findings else None


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _same_number(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is None and b is None
    try:
        return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-9)
    except (TypeError, ValueError):
        return a == b


async def replay_episode(
    session_factory: Any, record: EpisodeRecord, seats: RecordedSeats | None = None
) -> EpisodeReplay:
    """Replay `record` in a fresh session from `session_factory` (the environment's harness
    session factory, on a server started as the recorded run's was); `seats`: the recorded
    opponent that factory's client seats, whose moves are compared too."""
    replay = EpisodeReplay(record.episode_id, record.task, record.seed, steps=len(record.tool_calls))
    if record.error is not None:
        replay.skipped = f"the recorded episode failed ({record.error}); there is no outcome to compare"
        return replay
    session = await create_session(session_factory, record.task, record.seed, None)
    try:
        await _replay_calls(session, record, replay)
    except Exception as exc:  # the replay's own failure is a finding about the environment, not a crash
        replay.skipped = f"the replay failed: {type(exc).__name__}: {exc}"
    finally:
        await call_session(session, "close")
    if seats is not None:
        _compare_opponent(replay, record, seats)
    replay.findings.sort(key=lambda f: f.step)
    return replay


async def _replay_calls(session: Any, record: EpisodeRecord, replay: EpisodeReplay) -> None:
    await call_session(session, "initial_messages")
    tools_by_name = {tool_name(t): t for t in await call_session(session, "list_tools")}
    recorded = record.observation_digests
    # the session's fingerprints so far (`StepEnvSessionAdapter`): the reset's first, then one per step
    replayed = getattr(session, "observation_digests", None)
    replay.observations_compared = recorded is not None
    compared = 0

    def compare_observations(step: int) -> None:
        nonlocal compared
        if recorded is None or replayed is None:
            return
        for index in range(compared, len(replayed)):
            what = "the first observation" if index == 0 else "the observation"
            _compare(replay, step if index else 0, what, _at(recorded, index), replayed[index])
        compared = len(replayed)

    compare_observations(0)
    trace = []
    for step, call in enumerate(record.tool_calls, 1):
        name, arguments = str(call.get("name")), dict(call.get("arguments") or {})
        result = await call_tool_checked(session, tools_by_name, name, arguments)
        trace.append(ToolTraceEntry(tool_name=name, arguments=arguments, result=result))
        compare_observations(step)
        _compare(replay, step, "the reward", call.get("reward"), result.metadata.get("reward"), numeric=True)
        _compare(replay, step, "done", bool(call.get("done")), bool(result.done))
        _compare(replay, step, "the error", call.get("error"), result.error)
    last = len(record.tool_calls)
    if recorded is not None and replayed is not None and len(replayed) != len(recorded):
        _compare(replay, last, "the number of observations", len(recorded), len(replayed))
    verdict = await call_session(session, "verify", [], None)
    try:
        reward: Any = resolve_env_reward(HarnessRolloutResult(tool_trace=trace), verdict)
    except ValueError as exc:
        reward = f"none ({exc})"
    _compare(replay, last, "the episode's reward", record.env_reward, reward, numeric=True)


def _compare_opponent(replay: EpisodeReplay, record: EpisodeRecord, seats: RecordedSeats) -> None:
    """What the opponent was shown, move by move, and how many moves it made."""
    recorded = seats.recorded
    for number, what, was, now in seats.differences:
        step = int(recorded[number - 1].get("after_step") or 0) if number <= len(recorded) else replay.steps
        replay.findings.append(Finding(step, f"{what} at its move {number}", was, now))
    if len(seats.moves) != len(recorded):
        replay.findings.append(
            Finding(replay.steps, "the opponent's number of moves", len(recorded), len(seats.moves))
        )


def _at(values: list[str], index: int) -> str | None:
    return values[index] if index < len(values) else None


def _compare(
    replay: EpisodeReplay, step: int, what: str, recorded: Any, replayed: Any, *, numeric: bool = False
) -> None:
    same = _same_number(recorded, replayed) if numeric else recorded == replayed
    if not same:
        replay.findings.append(Finding(step, what, recorded, replayed))
