"""`envharness check ENV`: check an environment's contract, or (`--floor`) its adversarial floor.

    envharness check echo                                    # the server's checks; harness checks skipped
    envharness check browsergym --tasks click-test,enter-text
    envharness check textarena --episodes 3
    envharness check browsergym --env-option tasks=mypkg.webtasks --tasks all
    envharness check browsergym --floor --tasks all --floor-out runs/floor   # random/noop/hostile/repeat
    envharness check textarena --floor --tasks Wordle-v0,Mastermind-v0 --floor-episodes 5

Contract: one line per check (PASS / FAIL / SKIP and why); exit 1 on any FAIL, 0 otherwise,
2 for bad usage. Floor: the per-task table (successes / episodes per policy) and every task
where a policy scored, with its episodes; exit 0, or 1 when `--floor-max-success` is passed
and some policy's success rate on a task is above it.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from envharness.cli import options
from envharness.cli.declared import add_declared, from_args
from envharness.core.declared import check_options, option
from envharness.harness import run_options as shared
from envharness.harness.groups import ServerArgs


@dataclass(frozen=True)
class FloorArgs:
    """`--floor`: the adversarial floor instead of the contract checks (docs/adversarial_floor.md)."""

    group: ClassVar[str] = "adversarial floor"

    floor: bool = option(
        False,
        "run the adversarial floor instead of the contract checks: random, noop, hostile and repeat "
        "policies, whose success must be near zero",
    )
    floor_episodes: int = option(
        3, "episodes per task and policy (default %(default)s)", metavar="N", minimum=1
    )
    floor_policies: list[str] | None = option(
        None, "the policies to run (default: random,noop,hostile,repeat)", type=shared.names, metavar="P[,P]"
    )
    floor_out: str | None = option(None, "write floor.json and floor.md (the table) there", metavar="DIR")
    floor_max_success: float | None = option(
        None,
        "exit 1 when a policy's success rate on a task is above RATE (default: report only)",
        type=float,
        metavar="RATE",
        minimum=0,
    )


@dataclass(frozen=True)
class CheckConfig(FloorArgs, ServerArgs):
    """`envharness check ENV`: the environment's options, tasks and server (the declarations
    `eval` and `train` use), the episodes the checks play, and the floor's options."""

    env_options: dict[str, Any] = shared.env_options()
    tasks: list[str] = shared.tasks()
    seed: int = shared.seed(0, "first episode seed; episodes use SEED..SEED+N-1")
    #: None: 20 for the contract's episodes, 5 for the floor's.
    max_steps: int | None = option(
        None,
        "actions per episode (default 20 for the contract's episodes, 5 for the floor's)",
        flags=("--max-steps", "--max-turns"),
        dest="max_steps",
        type=int,
        metavar="N",
        minimum=1,
    )
    episodes: int = option(
        2, "contract: seeds per task, each played twice (default %(default)s)", metavar="N", minimum=1
    )
    concurrency: int = option(4, "episodes in flight at once (default %(default)s)", metavar="N", minimum=1)
    episode_timeout_s: float | None = option(
        120.0,
        "seconds before an episode is failed (default %(default)s)",
        flags=("--episode-timeout",),
        metavar="S",
        minimum=0,
        from_cli=lambda seconds: seconds or None,
    )
    #: Only an opponent the server plays: the checked seat's policy is the check's own.
    opponent: str = option(
        "",
        "who plays the other seats of multi-player games: an opponent the server plays "
        "(default: the environment's first, a legal random move for TextArena)",
        metavar="SPEC",
    )
    seat: str = option("alternate", "the seat the policies play", metavar="0|1|alternate|random")
    progress: bool = option(True, "no progress bar (floor)", flags=("--no-progress",), dest="progress")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from envharness.core.registry import ENVIRONMENTS

    parser.add_argument(
        "env", metavar="ENV", help=f"environment: {', '.join(ENVIRONMENTS)}, or module.path:attribute"
    )
    add_declared(parser, CheckConfig, options.help_values())


def config_from_args(args: argparse.Namespace) -> CheckConfig:
    """The `CheckConfig` the command line describes, its bounds checked (ValueError in words)."""
    config = from_args(CheckConfig, args)
    check_options(config)
    return config


def run(args: argparse.Namespace) -> int:
    from envharness.check import CheckSetupError
    from envharness.check.playground import seated_options

    try:
        config = config_from_args(args)  # a malformed --env-option, a bound: ValueError
        env_options, opponent = seated_options(
            args.env, config.env_options, config.tasks, config.opponent, config.seat, bool(config.env_url)
        )
        if opponent:
            print(f"multi-player games: the checked seat plays against the server's {opponent} player")
        return (
            run_floor(args.env, config, env_options)
            if config.floor
            else run_contract(args.env, config, env_options)
        )
    except CheckSetupError as exc:
        print(f"envharness check: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"envharness check: {exc}", file=sys.stderr)
        return 2


def run_contract(env: str, config: CheckConfig, env_options: dict) -> int:
    from envharness.check import check_environment

    report = check_environment(
        env,
        env_options,
        tasks=config.tasks,
        episodes=config.episodes,
        seed=config.seed,
        max_steps=config.max_steps or 20,
        concurrency=config.concurrency,
        env_url=config.env_url,
        episode_timeout_s=config.episode_timeout_s,
    )
    print(report.format())
    return 0 if report.ok else 1


def run_floor(env: str, config: CheckConfig, env_options: dict) -> int:
    from envharness.check import POLICIES, run_floor as floor
    from envharness.check.report import floor_markdown, floor_text

    report = floor(
        env,
        env_options,
        tasks=config.tasks,
        policies=config.floor_policies or list(POLICIES),
        episodes=config.floor_episodes,
        seed=config.seed,
        max_steps=config.max_steps or 5,
        concurrency=config.concurrency,
        env_url=config.env_url,
        episode_timeout_s=config.episode_timeout_s,
        progress=config.progress,
    )
    print(floor_text(report))
    if config.floor_out:
        out = Path(config.floor_out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "floor.json").write_text(json.dumps(report.to_json(), indent=1) + "\n", encoding="utf-8")
        (out / "floor.md").write_text(floor_markdown(report), encoding="utf-8")
        print(f"\nwrote {out / 'floor.json'} and {out / 'floor.md'}")
    if config.floor_max_success is not None:
        rate, task, policy = report.worst_rate()
        if rate > config.floor_max_success:
            print(
                f"FAIL  floor: {policy} won {rate:.0%} of its episodes on {task} (above --floor-max-success "
                f"{config.floor_max_success:g})"
            )
            return 1
    return 0
