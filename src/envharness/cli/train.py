"""`envharness train`: GRPO (TRL) on an environment's tasks (MiniWoB++ by default) through the harness.

    envharness train --tasks click-test --steps 30                # SmolLM2-135M-Instruct, full fine-tune
    envharness train --tasks click-button --lora --minutes 20 --out runs/cb
    envharness train --model ./my-model --env-url http://127.0.0.1:8000 --reward success --reward sum
    envharness eval --prompt compact --model runs/cb/final        # evaluate it on the prompt it learned
    envharness train --model ./my-qwen2-vl --max-turns 2          # a vision-language model: screenshots
    envharness train --tasks click-button --lora --out runs/cb --resume   # go on after Ctrl-C, SIGTERM, SIGKILL
    envharness train --env textarena --tasks Wordle-v0 --max-turns 6 --reward success --reward greens
    envharness train --agent examples/openai_mcp_agent/agent.py:play --tasks click-test   # your own agent's loop

Leaves checkpoints, `final/`, `episodes.jsonl` (every episode of every step), `train_log.jsonl`
and `reward_curve.png` in `--out` (old spelling: `--output-dir`).
"""

from __future__ import annotations

import argparse
import os
import sys

from envharness.cli import options
from envharness.cli.declared import add_declared, from_args
from envharness.cli.interrupts import InterruptGuard, say_checkpoints_kept
from envharness.core.declared import check_bounds
from envharness.integrations.trl.config import TrainConfig


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Every option `TrainConfig` declares (integrations/trl/config.py), and the file a rank
    of `--processes N` loads its configuration from (the parent's, checked before launch)."""
    add_declared(parser, TrainConfig, options.help_values())
    parser.add_argument("--launch-config", default=None, help=argparse.SUPPRESS)


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    """The `TrainConfig` the command line describes, its bounds checked (ValueError)."""
    options.resume_needs_out(args)
    config = from_args(TrainConfig, args)
    check_bounds(config)
    return config


def check_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    options.check_prompt(parser, args)
    options.check_device(parser, args)


def given(args: argparse.Namespace) -> tuple[TrainConfig, list[str] | None]:
    """(the configuration, the user's command line): parsed here, or, in a rank of
    `--processes N`, loaded from what the parent checked (`ranks.read_launch_config`)."""
    if args.launch_config:
        from envharness.integrations.trl.ranks import read_launch_config

        return read_launch_config(args.launch_config)
    return config_from_args(args), getattr(args, "_argv", None)


def run(args: argparse.Namespace) -> int:
    try:
        config, argv = given(args)
    except ValueError as exc:
        print(f"envharness train: {exc}", file=sys.stderr)
        return 2
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    if config.processes > 1 and "WORLD_SIZE" not in os.environ:
        return _launch(config, argv or [])
    # torch and TRL load when a run starts, not for --help or a refused option
    from envharness.integrations.trl.resume import count_step_records
    from envharness.integrations.trl.training import TrainSetupError, train

    with InterruptGuard() as guard:
        try:
            result = train(config)
        except TrainSetupError as exc:
            print(f"envharness train: {exc}", file=sys.stderr)
            return 2
        except Exception as exc:
            if not _stopped_with_the_others(exc, guard):
                raise
            from envharness.integrations.trl.ranks import stopped_by_another_rank

            print(f"envharness train: rank {os.environ['RANK']} stopped: {_first_line(exc)}", file=sys.stderr)
            return guard.exit_code if guard.signum else stopped_by_another_rank()
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM: the finished steps are checkpointed
            return say_checkpoints_kept(
                "train",
                guard,
                argv,
                config.output_dir,
                lambda latest: (
                    f"{latest.step} step(s) in {latest.path} and their "
                    f"{count_step_records(config.output_dir, latest.step)} episode record(s)"
                ),
            )
    from envharness.integrations.trl import ranks

    if ranks.is_main():  # rank 0 says what the run left
        print(f"trained {result.steps} steps in {result.seconds:.0f}s")
        print(f"  model:        {result.final_model_dir}")
        print(f"  episodes:     {result.records_path}")
        print(f"  reward curve: {result.reward_curve_path or '(nothing logged)'}")
    ranks.leave(0)  # under a launcher: every rank waits for rank 0's last files, and ends here
    return 0


def _stopped_with_the_others(exc: Exception, guard: InterruptGuard) -> bool:
    """Whether `exc` on a rank is only the echo of another rank's end: the launcher's SIGTERM
    (it stops every rank once one failed) or a collective whose peer went away. That rank's
    own words name the cause; this one says it in a line, not a traceback."""
    if os.environ.get("WORLD_SIZE", "1") == "1":
        return False
    return guard.signum is not None or "closed by peer" in str(exc) or "reset by peer" in str(exc)


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"[:300]


def _launch(config: TrainConfig, argv: list[str]) -> int:
    """The run checked once, here, then started as `--processes` ranks under
    torch.distributed.run; each rank loads this configuration from the run folder
    (`ranks.write_launch_config`) instead of parsing the command line again."""
    from envharness.integrations.trl.checks import check_config
    from envharness.integrations.trl.errors import TrainSetupError
    from envharness.integrations.trl.ranks import RankFailedError, launch, write_launch_config

    try:
        check_config(config)  # as the ranks will run it: a refusal comes once, before any starts
    except TrainSetupError as exc:
        print(f"envharness train: {exc}", file=sys.stderr)
        return 2
    path = write_launch_config(config, argv)
    try:
        return launch(["train", "--launch-config", str(path)], config.processes, config.device, run_rank)
    except ValueError as exc:
        print(f"envharness train: {exc}", file=sys.stderr)
        return 2
    except RankFailedError as exc:
        print(f"envharness train: {exc}", file=sys.stderr)
        return 1


def run_rank(*argv: str) -> None:
    """One rank of `--processes N` (`ranks.launch` forks it from its forkserver): `envharness
    ARGV`, ended with its exit status. An exception is printed here, as the interpreter would
    (torch's hook prefixes each line with `[rankN]:`): torch's worker wrapper would otherwise keep
    it for the launcher, and the rank's output would not say why."""
    from envharness.cli import main
    from envharness.integrations.trl.ranks import stop_with_the_launcher

    stop_with_the_launcher()
    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        sys.excepthook(*sys.exc_info())
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    if code:
        os._exit(code)  # the launcher sees the exit status and stops the other ranks
    # returned: torch's wrapper hands the launcher this rank's result, then ends the process
    # without the interpreter's teardown (multiprocessing's children end in os._exit)
