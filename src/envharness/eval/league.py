"""`envharness eval --league A B C ...`: a round robin of players on multi-player games, and
their ratings.

Every pair of players meets in `--episodes` games of each task, seats alternating by seed. A
player is a model spec (`embedded`, a run's checkpoint, `openai:MODEL@URL`), `scripted` (the
environment's strong player, reading its own conversation) or one of the players the server
seats (`random`). Each pairing is one ordinary `eval` run with `--opponent` (its own folder,
report and games table): the player that can be asked through a conversation plays the
model's seat, the other the opponent's.

Ratings are Bradley-Terry strengths on the Elo scale (400 points: 10 to 1 odds), fitted by
minorization-maximization with a draw counted half a win each way, and one virtual draw per
pairing so that a player who won every game still gets a finite rating (with few games, read
the scores beside the ratings). The first server player listed (or the mean) is 0.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SCRIPTED = "scripted"


@dataclass
class Pairing:
    """One meeting: `model` plays the model's seat, `opponent` the others; results for `first`."""

    first: str
    second: str
    model: str
    opponent: str
    folder: str = ""
    #: From `first`'s side: wins, draws, losses, and games that did not finish.
    wins: int = 0
    draws: int = 0
    losses: int = 0
    unfinished: int = 0

    @property
    def games(self) -> int:
        return self.wins + self.draws + self.losses


@dataclass
class League:
    players: list[str]
    pairings: list[Pairing] = field(default_factory=list)
    ratings: dict[str, float] = field(default_factory=dict)

    def score(self, player: str) -> tuple[float, int]:
        """(points, games): a win 1, a draw 1/2, over every finished game of `player`."""
        points, games = 0.0, 0
        for p in self.pairings:
            if player in (p.first, p.second):
                won = p.wins if player == p.first else p.losses
                points += won + p.draws / 2
                games += p.games
        return points, games

    def to_json(self) -> dict[str, Any]:
        return {
            "players": self.players,
            "ratings": self.ratings,
            "pairings": [dataclasses.asdict(p) | {"games": p.games} for p in self.pairings],
        }


def plan_pairings(players: Sequence[str], server_players: Sequence[str]) -> list[Pairing]:
    """Every pair once. A server player can only sit in the opponent's seats, so two of them
    cannot meet (refused in words)."""
    if len(set(players)) != len(players) or len(players) < 2:
        raise ValueError("--league needs two or more different players")
    served = [p for p in players if p in server_players and p != SCRIPTED]
    if len(served) > 1:
        raise ValueError(
            f"--league {' '.join(served)}: players the server seats cannot play each other; keep one of them"
        )
    pairings = []
    for i, first in enumerate(players):
        for second in players[i + 1 :]:
            model, opponent = (second, first) if first in served else (first, second)
            pairings.append(Pairing(first, second, model=model, opponent=opponent))
    return pairings


def tally(pairing: Pairing, records: list[dict[str, Any]]) -> None:
    """Count the pairing's games (from the model's seat) on `first`'s side."""
    flip = pairing.model != pairing.first
    for record in records:
        outcome = (record.get("verify_metrics") or {}).get("outcome")
        if outcome == "unfinished" or outcome is None:
            pairing.unfinished += 1
        elif outcome == "draw":
            pairing.draws += 1
        elif (outcome == "win") != flip:
            pairing.wins += 1
        else:
            pairing.losses += 1


def fit_ratings(
    players: Sequence[str], pairings: Sequence[Pairing], anchor: str | None = None
) -> dict[str, float]:
    """Bradley-Terry strengths (minorization-maximization), on the Elo scale."""
    strength = dict.fromkeys(players, 1.0)
    for _ in range(2000):
        updated = {}
        for player in players:
            won, denominator = 0.0, 0.0
            for p in pairings:
                if player not in (p.first, p.second):
                    continue
                other = p.second if player == p.first else p.first
                mine = (p.wins if player == p.first else p.losses) + (p.draws + 1) / 2  # + a virtual draw
                won += mine
                denominator += (p.games + 1) / (strength[player] + strength[other])
            updated[player] = won / denominator if denominator else strength[player]
        total = sum(updated.values())
        updated = {k: v * len(players) / total for k, v in updated.items()}
        converged = max(abs(updated[k] - strength[k]) for k in players) < 1e-10
        strength = updated
        if converged:
            break
    elo = {k: 400 * math.log10(v) for k, v in strength.items()}
    zero = elo[anchor] if anchor in elo else sum(elo.values()) / len(elo)
    return {k: round(v - zero, 1) for k, v in elo.items()}


def run_league(
    base: Any, players: Sequence[str], server_players: Sequence[str], run: Callable[[Any], Any]
) -> League:
    """Play every pairing with `run` (eval's `run_eval`) on copies of the eval config `base`,
    each in its own folder under `base.out`, then fit the ratings."""
    league = League(list(players), plan_pairings(players, server_players))
    for pairing in league.pairings:
        folder = Path(base.out) / f"{_label(pairing.model)}-vs-{_label(pairing.opponent)}"
        config = dataclasses.replace(base, model=pairing.model, opponent=pairing.opponent, out=str(folder))
        pairing.folder = str(folder)
        tally(pairing, run(config).records)
    anchor = next((p for p in players if p in server_players and p != SCRIPTED), None)
    league.ratings = fit_ratings(league.players, league.pairings, anchor)
    Path(base.out).mkdir(parents=True, exist_ok=True)
    (Path(base.out) / "league.json").write_text(
        json.dumps(league.to_json(), indent=1) + "\n", encoding="utf-8"
    )
    return league


def _label(spec: str) -> str:
    """A folder-safe short name: a checkpoint's run folder and name, else the spec."""
    path = Path(spec)
    text = f"{path.parent.name}-{path.name}" if path.is_dir() and path.parent.name else spec
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text)[:60]


def format_league(league: League) -> str:
    """The ratings table, best first, and who beat whom."""
    rows = [("rank", "player", "rating", "score", "games")]
    ranked = sorted(league.players, key=lambda p: -league.ratings.get(p, 0.0))
    for rank, player in enumerate(ranked, 1):
        points, games = league.score(player)
        rows.append((str(rank), player, f"{league.ratings[player]:+.0f}", f"{points:g}/{games}", str(games)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.append("")
    for p in league.pairings:
        lines.append(
            f"{p.first} vs {p.second}: {p.wins}-{p.draws}-{p.losses} (win-draw-loss)"
            + (f", {p.unfinished} unfinished" if p.unfinished else "")
        )
    lines.append("rating: Bradley-Terry on the Elo scale, a draw half a win, one virtual draw per pairing")
    return "\n".join(lines)


__all__ = ["League", "Pairing", "fit_ratings", "format_league", "plan_pairings", "run_league", "tally"]
