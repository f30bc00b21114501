"""`envharness eval`: evaluate a model on an environment's tasks (MiniWoB++ by default) and write a report.

    envharness eval                                           # embedded SmolLM2-135M, default task set
    envharness eval --model scripted --tasks click-test,enter-text --episodes 10
    envharness eval --prompt compact --model runs/train/final  # a `train --out runs/train` checkpoint, on its prompt
    envharness eval --model openai:gpt-4o-mini@https://api.openai.com/v1 --out runs/gpt
    envharness eval --out runs/gpt --resume                   # finish an interrupted run
    envharness eval --compare runs/smol runs/gpt              # per-task side by side
    envharness eval --model openai:qwen-vl@http://127.0.0.1:8000/v1 --vision   # screenshots in the prompts
    envharness eval --env textarena --tasks Wordle-v0 --model scripted        # another environment

Writes to `--out` (default runs/eval-<time>): episodes.jsonl, report.html,
success_rate.png, summary.json, screenshots/. Prints the per-task table and the paths.
"""

from __future__ import annotations

import argparse
import sys
import time

from envharness.cli import options
from envharness.eval.config import EvalConfig

_D = EvalConfig(out="")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    # shared with train (and mcp): same names, same choices (envharness.cli.options)
    options.add_env(parser)
    options.add_env_options(parser)
    options.add_model(parser, _D.model)
    options.add_tasks(parser)
    options.add_prompt(parser, _D.prompt)
    options.add_out(parser, "episodes.jsonl, report.html, success_rate.png, summary.json", "runs/eval-<time>")
    options.add_env_url(parser)
    options.add_seed(parser, _D.seed, "first episode seed; episodes use SEED..SEED+N-1")
    options.add_max_turns(parser, _D.max_steps)
    options.add_max_new_tokens(parser, _D.max_new_tokens)
    options.add_temperature(parser, _D.temperature, "sampling temperature, 0 for greedy")
    options.add_threads(parser)
    options.add_device(parser)
    # eval's own
    parser.add_argument(
        "--episodes",
        type=int,
        default=_D.episodes,
        help="episodes per task, seeds SEED..SEED+N-1 (default %(default)s)",
    )
    parser.add_argument(
        "--axtree-tokens",
        type=int,
        default=_D.axtree_tokens,
        help="token budget of the page text in a prompt (default %(default)s)",
    )
    parser.add_argument(
        "--history-steps",
        type=int,
        default=_D.history_steps,
        help="earlier steps recalled in a prompt (default %(default)s)",
    )
    parser.add_argument(
        "--actions",
        type=options.names,
        default=[],
        help="comma-separated actions (tools) the model may use (default: the environment's)",
    )
    parser.add_argument(
        "--concurrency",
        type=int,
        default=_D.concurrency,
        help="episodes in flight at once (default %(default)s)",
    )
    parser.add_argument(
        "--batch-wait",
        type=float,
        default=None,
        help="seconds a batch of model calls waits for episodes still in the browser "
        "(default: 2 for local models, 0.05 for remote/scripted)",
    )
    parser.add_argument(
        "--resume", action="store_true", help="skip the episodes the run folder already holds"
    )
    parser.add_argument("--overwrite", action="store_true", help="replace the run folder's results")
    parser.add_argument("--no-screenshots", action="store_true", help="do not take or keep screenshots")
    parser.add_argument(
        "--episode-timeout",
        type=float,
        default=None,
        help="seconds before an episode is failed, model time included (default: none)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument(
        "--record-tokens",
        action="store_true",
        help="keep each episode's exact token ids in episodes.jsonl, as training sees them (conversation prompts)",
    )
    parser.add_argument(
        "--compare",
        nargs=2,
        metavar=("RUN_A", "RUN_B"),
        help="print two runs' results side by side, run nothing",
    )
    # -- vision policies --
    parser.add_argument(
        "--vision",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="put the page's screenshot into every prompt (default: when the model is a vision model)",
    )
    parser.add_argument(
        "--screenshot-max-side",
        type=int,
        default=_D.screenshot_max_side,
        help="vision: longer side of prompt screenshots in pixels, as `train` uses (default %(default)s; 0: as taken)",
    )
    options.add_fleet(parser)


def config_from_args(args: argparse.Namespace) -> EvalConfig:
    return EvalConfig(
        out=args.out or time.strftime("runs/eval-%Y%m%d-%H%M%S"),
        env=args.env,
        env_options=options.env_options(args.env_options),
        tasks=args.tasks,
        episodes=args.episodes,
        model=args.model,
        device=args.device,
        dtype=args.dtype,
        prompt=args.prompt,
        temperature=args.temperature,
        max_steps=args.max_turns,
        max_new_tokens=args.max_new_tokens,
        axtree_tokens=args.axtree_tokens,
        history_steps=args.history_steps,
        actions=args.actions,
        concurrency=args.concurrency,
        batch_wait_s=args.batch_wait,
        seed=args.seed,
        env_url=args.env_url,
        resume=args.resume,
        overwrite=args.overwrite,
        screenshots=not args.no_screenshots,
        episode_timeout_s=args.episode_timeout or None,
        progress=not args.no_progress,
        vision=args.vision,
        screenshot_max_side=args.screenshot_max_side or None,
        record_tokens=args.record_tokens,
        env_urls=args.env_urls,
        servers=args.servers,
        ray_address=args.ray_address,
    )


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

    from envharness.eval.runner import run_eval
    from envharness.eval.stats import format_table

    from envharness.cli.interrupts import InterruptGuard, resume_command, say_interrupted

    config = config_from_args(args)
    with InterruptGuard() as guard:
        try:
            options.set_threads(args.threads)
            result = run_eval(config)
        except ValueError as exc:  # EvalSetupError, or an unreadable run folder
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
    print()
    print(
        f"{config.model} on {len(config.tasks)} task(s), {config.episodes} episode(s) each "
        f"({result.ran} run now, {result.skipped} from before) in {result.seconds:.0f}s"
        + (f", on {result.placement['device']} in {result.placement['dtype']}" if result.placement else "")
    )
    print(format_table(result.stats))
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
