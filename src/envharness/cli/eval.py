"""`envharness eval`: evaluate a model on MiniWoB++ tasks and write a report.

    envharness eval                                           # embedded SmolLM2-135M, default task set
    envharness eval --model scripted --tasks click-test,enter-text --episodes 10
    envharness eval --model openai:gpt-4o-mini@https://api.openai.com/v1 --out runs/gpt
    envharness eval --out runs/gpt --resume                   # finish an interrupted run
    envharness eval --compare runs/smol runs/gpt              # per-task side by side

Writes to `--out` (default runs/eval-<time>): episodes.jsonl, report.html,
success_rate.png, summary.json, screenshots/. Prints the per-task table and the paths.
"""

from __future__ import annotations

import argparse
import sys
import time

from envharness.eval.config import DEFAULT_TASKS, EvalConfig

_D = EvalConfig(out="")


def _names(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default=_D.model,
                        help="embedded (SmolLM2-135M-Instruct, offline), scripted, a model directory or hub id, "
                             "openai:MODEL@BASE_URL, trl-vllm:URL (default: embedded)")
    parser.add_argument("--tasks", type=_names, default=list(DEFAULT_TASKS),
                        help=f"comma-separated MiniWoB tasks (default: {','.join(DEFAULT_TASKS)})")
    parser.add_argument("--episodes", type=int, default=_D.episodes, help="episodes per task, seeds SEED..SEED+N-1 (default %(default)s)")
    parser.add_argument("--max-steps", type=int, default=_D.max_steps, help="actions per episode (default %(default)s)")
    parser.add_argument("--max-new-tokens", type=int, default=_D.max_new_tokens, help="tokens per model reply (default %(default)s)")
    parser.add_argument("--temperature", type=float, default=_D.temperature, help="sampling temperature, 0 for greedy (default %(default)s)")
    parser.add_argument("--prompt", default=_D.prompt, help="prompt builder: 'default' or module.path:function")
    parser.add_argument("--axtree-tokens", type=int, default=_D.axtree_tokens, help="token budget of the page text in a prompt (default %(default)s)")
    parser.add_argument("--history-steps", type=int, default=_D.history_steps, help="earlier steps recalled in a prompt (default %(default)s)")
    parser.add_argument("--actions", type=_names, default=list(_D.actions), help="comma-separated actions the model may use")
    parser.add_argument("--concurrency", type=int, default=_D.concurrency, help="episodes in flight at once (default %(default)s)")
    parser.add_argument("--batch-wait", type=float, default=None,
                        help="seconds a batch of model calls waits for episodes still in the browser "
                             "(default: 2 for local models, 0.05 for remote/scripted)")
    parser.add_argument("--seed", type=int, default=_D.seed, help="first episode seed (default %(default)s)")
    parser.add_argument("--out", default=None, help="run folder (default runs/eval-<time>)")
    parser.add_argument("--resume", action="store_true", help="skip the episodes the run folder already holds")
    parser.add_argument("--overwrite", action="store_true", help="replace the run folder's results")
    parser.add_argument("--env-url", default=None, help="a running `envharness serve browsergym` (default: start one)")
    parser.add_argument("--no-screenshots", action="store_true", help="do not take or keep screenshots")
    parser.add_argument("--episode-timeout", type=float, default=None,
                        help="seconds before an episode is failed, model time included (default: none)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--compare", nargs=2, metavar=("RUN_A", "RUN_B"), help="print two runs' results side by side, run nothing")


def config_from_args(args: argparse.Namespace) -> EvalConfig:
    return EvalConfig(
        out=args.out or time.strftime("runs/eval-%Y%m%d-%H%M%S"),
        tasks=args.tasks,
        episodes=args.episodes,
        model=args.model,
        prompt=args.prompt,
        temperature=args.temperature,
        max_steps=args.max_steps,
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
    )


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
            result = run_eval(config)
        except ValueError as exc:  # EvalSetupError, or an unreadable run folder
            print(f"envharness eval: {exc}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM: finished episodes are already on disk
            from envharness.eval.runner import count_finished

            kept = f"{count_finished(config)} finished episode(s) in {config.out}/episodes.jsonl"
            return say_interrupted("eval", guard, kept, resume_command(getattr(args, "_argv", None), out_flag="--out", out=config.out))
    print()
    print(f"{config.model} on {len(config.tasks)} task(s), {config.episodes} episode(s) each "
          f"({result.ran} run now, {result.skipped} from before) in {result.seconds:.0f}s")
    print(format_table(result.stats))
    print()
    for name, path in result.paths.items():
        print(f"  {name + ':':10s}{path}")
    crashed = sum(1 for r in result.records if r.get("error"))
    if crashed:
        print(f"warning: {crashed} episode(s) crashed (see `error` in episodes.jsonl); --resume reruns them", file=sys.stderr)
    return 0
