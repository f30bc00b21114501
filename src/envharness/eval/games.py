"""The games table of an eval run against an opponent (`--opponent`): per task and opponent,
wins / draws / losses with Wilson 95% intervals, the invalid-move rate and the seat split.

It reads what a session's `verify` reports for a seated game (``verify_metrics``): ``seat``,
``opponent``, ``outcome`` (win, draw, loss, unfinished) and ``invalid_move``; episodes without
an ``outcome`` (single-player tasks) are not games here.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from envharness.eval.stats import wilson_interval
from envharness.harness.failures import is_env_error, is_infra_failure

OUTCOMES = ("win", "draw", "loss", "unfinished")


@dataclass
class GameStats:
    """One task against one opponent."""

    task: str
    opponent: str
    games: int
    counts: dict[str, int]
    #: outcome -> (low, high) of its Wilson 95% interval.
    intervals: dict[str, tuple[float, float]]
    invalid_moves: int
    #: seat -> (games, wins) in that seat.
    seats: dict[int, tuple[int, int]] = field(default_factory=dict)

    @property
    def invalid_rate(self) -> float:
        return self.invalid_moves / self.games if self.games else 0.0

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["seats"] = {str(k): {"games": g, "wins": w} for k, (g, w) in self.seats.items()}
        data["invalid_rate"] = self.invalid_rate
        return data


def _metrics(record: dict[str, Any]) -> dict[str, Any]:
    return record.get("verify_metrics") or {}


def game_stats(records: Iterable[dict[str, Any]]) -> list[GameStats]:
    """One row per (task, opponent) of the seated games among `records`, in first-seen order."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for record in records:
        if is_infra_failure(record) or is_env_error(record) or not _metrics(record).get("outcome"):
            continue
        key = (str(record.get("task")), str(_metrics(record).get("opponent") or "?"))
        groups.setdefault(key, []).append(_metrics(record))
    rows = []
    for (task, opponent), games in groups.items():
        n = len(games)
        counts = {o: sum(1 for g in games if g["outcome"] == o) for o in OUTCOMES}
        seats: dict[int, tuple[int, int]] = {}
        for g in games:
            played, won = seats.get(int(g.get("seat") or 0), (0, 0))
            seats[int(g.get("seat") or 0)] = (played + 1, won + (g["outcome"] == "win"))
        rows.append(
            GameStats(
                task=task,
                opponent=opponent,
                games=n,
                counts=counts,
                intervals={o: wilson_interval(counts[o], n) for o in OUTCOMES},
                invalid_moves=sum(1 for g in games if g.get("invalid_move")),
                seats=dict(sorted(seats.items())),
            )
        )
    return rows


def format_games(rows: list[GameStats]) -> str:
    """A fixed-width table: rates with their 95% intervals, and wins/games in each seat."""

    def rate(row: GameStats, outcome: str) -> str:
        low, high = row.intervals[outcome]
        return f"{row.counts[outcome] / row.games:.2f} [{low:.2f}, {high:.2f}]"

    header = ("task", "opponent", "n", "win", "draw", "loss", "unfinished", "invalid", "seats (wins/games)")
    lines = [header]
    for r in rows:
        seats = " ".join(f"{seat}:{won}/{played}" for seat, (played, won) in r.seats.items())
        lines.append(
            (r.task, r.opponent, str(r.games), rate(r, "win"), rate(r, "draw"), rate(r, "loss"),
             str(r.counts["unfinished"]), f"{r.invalid_rate:.2f}", seats)
        )  # fmt: skip
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    out = ["  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in lines]
    out.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(out)


__all__ = ["OUTCOMES", "GameStats", "format_games", "game_stats"]
