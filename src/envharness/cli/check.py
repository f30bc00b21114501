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
from pathlib import Path

from envharness.cli import options


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from envharness.core.registry import ENVIRONMENTS

    parser.add_argument(
        "env", metavar="ENV", help=f"environment: {', '.join(ENVIRONMENTS)}, or module.path:attribute"
    )
    options.add_env_options(parser)
    options.add_tasks(parser)
    options.add_env_url(parser)
    options.add_seed(parser, 0, "first episode seed; episodes use SEED..SEED+N-1")
    parser.add_argument(
        "--max-steps",
        "--max-turns",
        dest="max_steps",
        type=int,
        default=None,
        metavar="N",
        help="actions per episode (default 20 for the contract's episodes, 5 for the floor's)",
    )
    parser.add_argument(
        "--episodes",
        type=int,
        default=2,
        metavar="N",
        help="contract: seeds per task, each played twice (default %(default)s)",
    )
    parser.add_argument(
        "--concurrency",
        type=int,
        default=4,
        metavar="N",
        help="episodes in flight at once (default %(default)s)",
    )
    parser.add_argument(
        "--episode-timeout",
        type=float,
        default=120.0,
        metavar="S",
        help="seconds before an episode is failed (default %(default)s)",
    )
    floor = parser.add_argument_group("adversarial floor")
    floor.add_argument(
        "--floor",
        action="store_true",
        help="run the adversarial floor instead of the contract checks: random, noop, hostile and repeat "
        "policies, whose success must be near zero",
    )
    floor.add_argument(
        "--floor-episodes",
        type=int,
        default=3,
        metavar="N",
        help="episodes per task and policy (default %(default)s)",
    )
    floor.add_argument(
        "--floor-policies",
        type=options.names,
        default=None,
        metavar="P[,P]",
        help="the policies to run (default: random,noop,hostile,repeat)",
    )
    floor.add_argument(
        "--floor-out", default=None, metavar="DIR", help="write floor.json and floor.md (the table) there"
    )
    floor.add_argument(
        "--floor-max-success",
        type=float,
        default=None,
        metavar="RATE",
        help="exit 1 when a policy's success rate on a task is above RATE (default: report only)",
    )
    parser.add_argument(
        "--opponent",
        default="",
        metavar="SPEC",
        help="who plays the other seats of multi-player games: an opponent the server plays "
        "(default: the environment's first, a legal random move for TextArena)",
    )
    parser.add_argument(
        "--seat", default="alternate", metavar="0|1|alternate|random", help="the seat the policies play"
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar (floor)")


def run(args: argparse.Namespace) -> int:
    from envharness.check import CheckSetupError
    from envharness.check.playground import seated_options

    try:
        env_options = options.env_options(args.env_options)
        env_options, opponent = seated_options(
            args.env, env_options, args.tasks or [], args.opponent, args.seat, bool(args.env_url)
        )
        if opponent:
            print(f"multi-player games: the checked seat plays against the server's {opponent} player")
        return run_floor(args, env_options) if args.floor else run_contract(args, env_options)
    except CheckSetupError as exc:
        print(f"envharness check: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:  # a malformed --env-option
        print(f"envharness check: {exc}", file=sys.stderr)
        return 2


def run_contract(args: argparse.Namespace, env_options: dict) -> int:
    from envharness.check import check_environment

    report = check_environment(
        args.env,
        env_options,
        tasks=args.tasks,
        episodes=args.episodes,
        seed=args.seed,
        max_steps=args.max_steps or 20,
        concurrency=args.concurrency,
        env_url=args.env_url,
        episode_timeout_s=args.episode_timeout or None,
    )
    print(report.format())
    return 0 if report.ok else 1


def run_floor(args: argparse.Namespace, env_options: dict) -> int:
    from envharness.check import POLICIES, run_floor as floor
    from envharness.check.report import floor_markdown, floor_text

    report = floor(
        args.env,
        env_options,
        tasks=args.tasks,
        policies=args.floor_policies or list(POLICIES),
        episodes=args.floor_episodes,
        seed=args.seed,
        max_steps=args.max_steps or 5,
        concurrency=args.concurrency,
        env_url=args.env_url,
        episode_timeout_s=args.episode_timeout or None,
        progress=not args.no_progress,
    )
    print(floor_text(report))
    if args.floor_out:
        out = Path(args.floor_out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "floor.json").write_text(json.dumps(report.to_json(), indent=1) + "\n", encoding="utf-8")
        (out / "floor.md").write_text(floor_markdown(report), encoding="utf-8")
        print(f"\nwrote {out / 'floor.json'} and {out / 'floor.md'}")
    if args.floor_max_success is not None:
        rate, task, policy = report.worst_rate()
        if rate > args.floor_max_success:
            print(
                f"FAIL  floor: {policy} won {rate:.0%} of its episodes on {task} (above --floor-max-success "
                f"{args.floor_max_success:g})"
            )
            return 1
    return 0
