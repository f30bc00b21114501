"""Who plays the seats of a multi-player task that the model under test does not (`--opponent`,
`--seat` of `eval` and `train`), checked before anything starts.

An environment says what it can seat through its `EnvHarness`: ``players(task)`` (the fewest
and most players a task takes) and ``opponent_options(opponent, seat)`` (the server options
that make its server play the other seats with one of ``server_opponents``). Those opponents
ride on the server's options, so every client path (eval, train, TRL's environment_factory,
the fleet) gets them unchanged. A model in the other seats (``self``, a model spec) needs the
client to play them: `SeatPlan.client_opponent` names it for the layers that do.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envharness.harness.env_harness import EnvHarness

SEAT_CHOICES = ("alternate", "random")
#: Model specs an opponent may name besides a model directory (`models.load_backend`).
MODEL_OPPONENTS = ("embedded", "tiny")
MODEL_PREFIXES = ("openai:",)


@dataclass(frozen=True)
class SeatPlan:
    """What `--opponent` / `--seat` come to: server options to merge into ``--env-option``, or a
    model the client must play the other seats with."""

    server_options: Mapping[str, Any] = field(default_factory=dict)
    client_opponent: str | None = None
    seat: str = "alternate"


def check_seat(seat: str) -> str:
    """``0``, ``1``, ... or ``alternate`` / ``random``; ValueError in words otherwise."""
    seat = str(seat).strip()
    if seat in SEAT_CHOICES or (seat.isdigit() and int(seat) < 64):
        return seat
    raise ValueError(f"--seat {seat}: a player number (0, 1, ...), or {' or '.join(SEAT_CHOICES)}")


def is_model_spec(spec: str) -> bool:
    """A spec `--model` loads without the hub: a built-in, an OpenAI-compatible URL, a model folder."""
    if spec in MODEL_OPPONENTS or spec == "self":
        return True
    if spec.startswith(MODEL_PREFIXES):
        return "@" in spec
    path = Path(spec).expanduser()
    return path.is_dir() and any((path / name).is_file() for name in ("config.json", "adapter_config.json"))


def plan_seats(harness: EnvHarness, tasks: Sequence[str], opponent: str, seat: str = "alternate") -> SeatPlan:
    """`--opponent` and `--seat` for `tasks` of `harness`'s environment, or ValueError saying why
    not: an opponent for a single-player task, an unknown spec, a seat without an opponent."""
    opponent, seat = (opponent or "").strip(), check_seat(seat or "alternate")
    if not opponent:
        if seat != "alternate":
            raise ValueError(f"--seat {seat} needs --opponent for the other seats")
        return SeatPlan(seat=seat)
    if harness.players is None:
        raise ValueError(f"--opponent {opponent}: every task of {harness.env} is played by one agent alone")
    alone = [task for task in tasks if harness.players(task)[1] < 2]
    if alone:
        raise ValueError(
            f"--opponent {opponent}: {', '.join(alone)} "
            f"{'is a single-player game' if len(alone) == 1 else 'are single-player games'}: "
            "there is no other seat to play"
        )
    if seat.isdigit():
        for task in tasks:
            if int(seat) >= harness.players(task)[1]:
                raise ValueError(f"--seat {seat}: {task} has seats 0 to {harness.players(task)[1] - 1}")
    if opponent in harness.server_opponents and harness.opponent_options is not None:
        return SeatPlan(server_options=dict(harness.opponent_options(opponent, seat)), seat=seat)
    if is_model_spec(opponent):
        return SeatPlan(client_opponent=opponent, seat=seat)
    choices = [*harness.server_opponents, "self", *MODEL_OPPONENTS, "openai:MODEL@URL", "a model directory"]
    raise ValueError(f"--opponent {opponent}: unknown; one of {', '.join(choices)}")


def plan_mix_seats(
    harnesses: Mapping[str, EnvHarness],
    tasks: Mapping[str, Sequence[str]],
    opponent: str,
    seat: str = "alternate",
) -> dict[str, SeatPlan]:
    """`plan_seats` for each environment of a mix (name -> its harness, its tasks) with a task
    of more than one player; the others play as ever and are left out. ValueError in words
    where no environment has such a task (or as `plan_seats` says)."""
    opponent = (opponent or "").strip()
    if not opponent:
        for harness in harnesses.values():
            plan_seats(harness, [], "", seat)  # a seat without an opponent, refused
        return {}
    games = [name for name, harness in harnesses.items() if _has_games(harness, tasks.get(name, []))]
    if not games:
        listed = ", ".join(f"{name}:{task}" for name in harnesses for task in tasks.get(name, []))
        raise ValueError(
            f"--opponent {opponent}: no environment of the mix has a multi-player task "
            f"({listed}: each played by one agent alone)"
        )
    return {name: plan_seats(harnesses[name], tasks[name], opponent, seat) for name in games}


def _has_games(harness: EnvHarness, tasks: Sequence[str]) -> bool:
    return harness.players is not None and any(harness.players(task)[1] >= 2 for task in tasks)


def seated_options(
    harness: EnvHarness,
    tasks: Sequence[str],
    opponent: str,
    seat: str,
    options: Mapping[str, Any],
    running: bool = False,
) -> tuple[dict[str, Any], SeatPlan]:
    """`plan_seats` then `check_running_servers`: the server options with the seating an opponent
    the server plays needs, and the plan (whose `client_opponent` the client must seat itself).
    ValueError in words for bad input."""
    plan = plan_seats(harness, tasks, opponent, seat)
    check_running_servers(plan, opponent, options, running)
    return {**options, **plan.server_options}, plan


def check_running_servers(plan: SeatPlan, opponent: str, given: Mapping[str, Any], running: bool) -> None:
    """A run on servers it did not start (`--env-url(s)`) cannot give them the seating: unless
    ``--env-option`` says they were started with it, refuse in words with what to run."""
    if not running or not plan.server_options:
        return
    if all(str(given.get(k)) == str(v) for k, v in plan.server_options.items()):
        return
    options = " ".join(f"--option {k}={v}" for k, v in plan.server_options.items())
    said = " ".join(f"--env-option {k}={v}" for k, v in plan.server_options.items())
    raise ValueError(
        f"--opponent {opponent} with --env-url/--env-urls: the run does not start those servers; "
        f"start them with `serve ... {options}` and say so with {said}"
    )


__all__ = [
    "SEAT_CHOICES",
    "SeatPlan",
    "check_running_servers",
    "check_seat",
    "is_model_spec",
    "plan_mix_seats",
    "plan_seats",
    "seated_options",
]
