"""The plan of play: what a run plays, resolved once from the environment group
(`groups.EnvironmentArgs`) into a frozen `PlayPlan` that `eval`, `train` and `sft` all run.

A plan has one `PlanRow` per environment: its tasks expanded from the environment's listing,
who sits in the other seats of its games (`opponents.SeatPlan`), the prompt style it plays and
the options its server starts with. A single-environment run is a plan of one row; a mix
(`train --mix`) is a plan of several. The resolver refuses bad input with a `PlanError` in
words (each command raises it as its own setup error, the words unchanged); the commands keep
only what is theirs (eval's tools, train's kinds, sft's demonstrations).

The prompt is chosen here by name only (the group's, else the environment's style for the
command); what a style can do (screenshots, a conversation) is the command's to check, through
`envharness.prompts`, a layer above this one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from envharness.core.registry import ResolvedEnv, resolve_environment
from envharness.harness.env_harness import EnvHarness
from envharness.harness.groups import EnvironmentArgs
from envharness.harness.opponents import SeatPlan, check_running_servers, plan_mix_seats, plan_seats


class PlanError(ValueError):
    """What a run is asked to play cannot be played (an unknown task, a bad seat), in words."""


@dataclass(frozen=True)
class PlayDefaults:
    """What a command plays where the environment group leaves a setting out."""

    #: Every default task of the environment (eval, sft), or only the first (a training run).
    all_tasks: bool = False
    #: The environment's prompt style for the command: "train" (`EnvHarness.train_prompt`) or
    #: "default" (`EnvHarness.default_prompt`, what `eval` shows).
    prompt: str = "train"

    def tasks(self, harness: EnvHarness) -> list[str]:
        return list(harness.default_tasks if self.all_tasks else harness.default_tasks[:1])

    def prompt_of(self, harness: EnvHarness) -> str:
        return harness.train_prompt if self.prompt == "train" else harness.default_prompt


#: A training run (`train`): the first default task, the training prompt style.
TRAINING = PlayDefaults()
#: An evaluation (`eval`): every default task, the environment's default prompt style.
EVALUATION = PlayDefaults(all_tasks=True, prompt="default")
#: Demonstrations (`sft`): every default task, the training prompt style they teach.
DEMONSTRATION = PlayDefaults(all_tasks=True)


@dataclass(frozen=True)
class PlanRow:
    """One environment of a plan: its tasks (its own names, without a mix's ``env:`` prefix),
    the prompt style it plays, who sits in the other seats of its games and the options its
    server is given (`--env-option`)."""

    name: str
    env: ResolvedEnv
    tasks: tuple[str, ...]
    prompt: str
    seats: SeatPlan = field(default_factory=SeatPlan)
    options: Mapping[str, Any] = field(default_factory=dict)

    @property
    def server_options(self) -> dict[str, Any]:
        """What its server starts with: its options, joined by an opponent the server plays."""
        return {**self.options, **self.seats.server_options}


@dataclass(frozen=True)
class PlayPlan:
    """What a run plays: one row per environment (one for a single environment, several for a
    mix), resolved once and never changed."""

    rows: tuple[PlanRow, ...]

    @property
    def env(self) -> ResolvedEnv:
        """The run's environment (a mix's first: the one a run's saved settings name)."""
        return self.rows[0].env

    @property
    def model_seats(self) -> list[PlanRow]:
        """The rows whose other seats a model plays through the run's client (`self`, a spec)."""
        return [row for row in self.rows if row.seats.client_opponent is not None]


def expand_tasks(env: ResolvedEnv, tasks: Sequence[str], what: str = "") -> list[str]:
    """`tasks` of `env` (names, split names, `all`) expanded from its listing; a `PlanError`
    saying why not, after `what` (the option) where given."""
    harness = env.require_harness()
    try:
        return list(harness.task_list().expand(list(tasks), harness.check_task))
    except (ValueError, KeyError, ImportError) as exc:
        raise PlanError(f"{what}: {exc}" if what else str(exc)) from None


def resolve_plan(
    group: EnvironmentArgs,
    defaults: PlayDefaults,
    *,
    running: bool = False,
    prompt: str = "",
) -> PlayPlan:
    """The plan of one environment: the group's environment looked up with its options, its
    tasks expanded (or the command's defaults), its seats planned and its prompt style named
    (`prompt`: a style the command requires, else the group's, else the command's default).
    `running`: the run plays on servers it does not start (`--env-url`, `--env-urls`), which
    must have been started with the seating."""
    try:
        env = group.resolve_env()
    except ValueError as exc:
        raise PlanError(str(exc)) from None
    harness = env.require_harness()
    tasks = expand_tasks(env, group.tasks or defaults.tasks(harness))
    if not tasks:
        raise PlanError("no tasks given")
    try:
        seats = plan_seats(harness, tasks, group.opponent, group.seat)
        check_running_servers(seats, group.opponent, group.env_options, running)
    except ValueError as exc:
        raise PlanError(str(exc)) from None
    chosen = prompt or group.prompt.strip() or defaults.prompt_of(harness)
    row = PlanRow(group.env, env, tuple(tasks), chosen, seats, dict(group.env_options))
    return PlayPlan((row,))


def resolve_mix(
    mix: Mapping[str, Sequence[str]],
    opponent: str,
    seat: str,
    defaults: PlayDefaults = TRAINING,
    flag: str = "--mix",
) -> PlayPlan:
    """The plan of a mix: a row per environment (`mix`: name -> its tasks), each with its own
    tasks, server and prompt style; `--opponent` seats the environments with multi-player
    tasks (`plan_mix_seats`), the others play as ever."""
    rows = tuple(_mix_row(name, tasks, defaults, flag) for name, tasks in mix.items())
    harnesses = {row.name: row.env.require_harness() for row in rows}
    try:
        seats = plan_mix_seats(harnesses, {row.name: list(row.tasks) for row in rows}, opponent, seat)
    except ValueError as exc:
        raise PlanError(str(exc)) from None
    return PlayPlan(tuple(replace(row, seats=seats[row.name]) if row.name in seats else row for row in rows))


def _mix_row(name: str, tasks: Sequence[str], defaults: PlayDefaults, flag: str) -> PlanRow:
    try:
        env = resolve_environment(name, {})
        env.require_harness()
    except (KeyError, ImportError, AttributeError, ValueError) as exc:
        raise PlanError(f"{flag} {name}: {exc}") from None
    expanded = expand_tasks(env, tasks, f"{flag} {name}")
    return PlanRow(name, env, tuple(expanded), defaults.prompt_of(env.require_harness()))


__all__ = [
    "DEMONSTRATION",
    "EVALUATION",
    "TRAINING",
    "PlanError",
    "PlanRow",
    "PlayDefaults",
    "PlayPlan",
    "expand_tasks",
    "resolve_mix",
    "resolve_plan",
]
