"""`envharness eval`: evaluate a model on an environment's tasks (MiniWoB++ by default) and write a report.

    envharness eval                                           # embedded SmolLM2-135M, default task set
    envharness eval --model scripted --tasks click-test,enter-text --episodes 10
    envharness eval --prompt compact --model runs/train/final  # a `train --out runs/train` checkpoint, on its prompt
    envharness eval --model openai:gpt-4o-mini@https://api.openai.com/v1 --out runs/gpt
    envharness eval --out runs/gpt --resume                   # finish an interrupted run
    envharness eval --compare runs/smol runs/gpt              # per-task side by side
    envharness eval --env textarena --tasks KuhnPoker-v0 --league embedded runs/a/final random   # ratings
    envharness eval --model openai:qwen-vl@http://127.0.0.1:8000/v1 --vision   # screenshots in the prompts
    envharness eval --env textarena --tasks Wordle-v0 --model scripted        # another environment

Writes to `--out` (default runs/eval-<time>): episodes.jsonl, report.html,
success_rate.png, summary.json, screenshots/. Prints the per-task table and the paths.
"""

from __future__ import annotations

import argparse
import sys

from envharness.cli import options
from envharness.cli.declared import add_declared, from_args
from envharness.eval.config import EvalConfig


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Every option `EvalConfig` declares (eval/config.py), and `--compare`, which runs nothing."""
    add_declared(parser, EvalConfig, options.help_values())
    parser.add_argument(
        "--compare",
        nargs=2,
        metavar=("RUN_A", "RUN_B"),
        help="print two runs' results side by side, run nothing",
    )
    parser.add_argument(
        "--league",
        nargs="+",
        metavar="PLAYER",
        help="a round robin on multi-player games: model specs, scripted, or a player the server "
        "seats (random); --episodes games per pairing and task; prints ratings",
    )


def config_from_args(args: argparse.Namespace) -> EvalConfig:
    """The `EvalConfig` the command line describes (checked when the run starts: `EvalConfig.check`)."""
    return from_args(EvalConfig, args)


def check_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    options.check_prompt(parser, args)
    options.check_device(parser, args)


def run(args: argparse.Namespace) -> int:
    if args.compare:
        from envharness.eval.compare import compare_table

        try:
            print(compare_table(*args.compare))
        except (OSError, ValueError) as exc:
            print(f"envharness eval --compare: {exc}", file=sys.stderr)
            return 2
        return 0

    if args.league:
        return run_league(args)

    from envharness.cli.interrupts import InterruptGuard, resume_command, say_interrupted
    from envharness.core.launchers import LaunchError
    from envharness.eval.games import format_games, game_stats
    from envharness.eval.runner import run_eval
    from envharness.eval.stats import format_table

    config = config_from_args(args)
    with InterruptGuard() as guard:
        try:
            options.set_threads(args.threads)
            result = run_eval(config)
        except ValueError as exc:  # EvalSetupError, or an unreadable run folder
            print(f"envharness eval: {exc}", file=sys.stderr)
            return 2
        except LaunchError as exc:  # the server refused its options (its own words are in exc)
            print(f"envharness eval: {exc}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM: finished episodes are already on disk
            from envharness.eval.runner import count_finished

            kept = f"{count_finished(config)} finished episode(s) in {config.out}/episodes.jsonl"
            return say_interrupted(
                "eval",
                guard,
                kept,
                resume_command(getattr(args, "_argv", None), out_flag="--out", out=config.out),
            )
    config = result.config  # as the run resolved it: the tasks expanded
    print()
    print(
        f"{config.model} on {len(config.tasks)} task(s), {config.episodes} episode(s) each "
        f"({result.ran} run now, {result.skipped} from before) in {result.seconds:.0f}s"
        + (f", on {result.placement['device']} in {result.placement['dtype']}" if result.placement else "")
    )
    print(format_table(result.stats))
    games = game_stats(result.records)
    if games:  # against an opponent: wins / draws / losses, invalid moves, seats
        print()
        print(format_games(games))
    print()
    for name, path in result.paths.items():
        print(f"  {name + ':':10s}{path}")
    lost = sum(s.infra_failures for s in result.stats if s.task != "all")
    if lost:
        print(
            f"warning: {lost} episode(s) lost to a dead environment server, left out of the scores; --resume reruns them",
            file=sys.stderr,
        )
    crashed = sum(1 for r in result.records if r.get("error"))
    if crashed:
        print(
            f"warning: {crashed} episode(s) crashed (see `error` in episodes.jsonl); --resume reruns them",
            file=sys.stderr,
        )
    return 0


def run_league(args: argparse.Namespace) -> int:
    """`--league`: every pairing an eval run against `--opponent`, then the ratings table."""
    from envharness.core.launchers import LaunchError
    from envharness.core.registry import env_harness
    from envharness.eval.league import format_league, run_league as play
    from envharness.eval.runner import run_eval

    config = config_from_args(args)
    if config.opponent:
        print("envharness eval: --league chooses the opponents; leave out --opponent", file=sys.stderr)
        return 2
    options.set_threads(args.threads)
    try:
        served = env_harness(config.env, config.env_options).server_opponents
        league = play(config, args.league, served, run_eval)
    except (ValueError, KeyError, LaunchError) as exc:
        print(f"envharness eval --league: {exc}", file=sys.stderr)
        return 2
    print(format_league(league))
    print(f"\n  league:   {config.out}/league.json (each pairing's run in its own folder there)")
    return 0
