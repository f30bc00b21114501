"""`envharness train`: GRPO (TRL) on MiniWoB++ tasks through the harness.

    envharness train --task click-test --steps 30                 # SmolLM2-135M-Instruct, full fine-tune
    envharness train --task click-button --lora --minutes 20 --output-dir runs/cb
    envharness train --model ./my-model --env-url http://127.0.0.1:8000 --reward success --reward sum
    envharness train --task click-button --lora --output-dir runs/cb --resume   # go on after Ctrl-C, SIGTERM, SIGKILL

Leaves checkpoints, `final/`, `episodes.jsonl` (every episode of every step), `train_log.jsonl`
and `reward_curve.png` in `--output-dir`.
"""

from __future__ import annotations

import argparse
import sys
import time

from envharness.integrations.trl.training import TrainConfig

_DEFAULTS = TrainConfig()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    d = _DEFAULTS
    parser.add_argument("--task", dest="tasks", action="append", metavar="TASK", help="MiniWoB task (repeatable; default click-test)")
    parser.add_argument("--model", default=d.model, help="'embedded' (SmolLM2-135M-Instruct, offline), 'tiny' (random, for smoke tests), or a path / hub id")
    parser.add_argument("--output-dir", default=None, help="where checkpoints, records and the curve go (default runs/train-<time>)")
    parser.add_argument("--lora", action="store_true", help="train a LoRA adapter (peft) instead of all weights")
    parser.add_argument("--lora-rank", type=int, default=d.lora_rank)
    parser.add_argument("--steps", type=int, default=d.max_steps, help="optimizer steps (ignored with --minutes)")
    parser.add_argument("--minutes", type=float, default=None, help="train for this long instead of --steps")
    parser.add_argument("--num-generations", type=int, default=d.num_generations, help="episodes per task page (GRPO group size)")
    parser.add_argument("--groups-per-step", type=int, default=d.groups_per_step, help="task pages per step")
    parser.add_argument("--max-completion-length", type=int, default=d.max_completion_length, help="tokens per model turn")
    parser.add_argument("--max-turns", type=int, default=d.max_turns, help="model turns per episode")
    parser.add_argument("--temperature", type=float, default=d.temperature)
    parser.add_argument("--lr", type=float, default=d.learning_rate, help="learning rate")
    parser.add_argument("--beta", type=float, default=d.beta, help="KL coefficient (0: no reference model)")
    parser.add_argument("--loss-type", default=d.loss_type, help="TRL loss type (dapo, grpo, dr_grpo, bnpo, ...)")
    parser.add_argument("--reward", dest="rewards", action="append", choices=["success", "sum", "mean", "max"], help="reward function(s) (default success)")
    parser.add_argument("--save-steps", type=int, default=d.save_steps, help="checkpoint every N steps")
    parser.add_argument("--seed", type=int, default=d.seed)
    parser.add_argument("--env-url", default=None, help="a running `envharness serve browsergym` (default: start one on loopback)")
    parser.add_argument("--prompt", choices=["compact", "default"], default=d.prompt, help="prompt style (compact suits small models)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (1 is fastest when other jobs share the cores)")
    parser.add_argument("--use-vllm", action="store_true", help="generate with TRL's vLLM (needs a CUDA GPU and vllm)")
    # resuming (issue 17)
    parser.add_argument("--resume", action="store_true",
                        help="continue from the latest checkpoint in --output-dir (records and curve continue)")


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    """The `TrainConfig` the command line describes (validated)."""
    for name in ("steps", "num_generations", "groups_per_step", "max_completion_length", "max_turns", "save_steps", "lora_rank"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be at least 1")
    if args.num_generations < 2:
        raise ValueError("--num-generations must be at least 2 (GRPO compares episodes within a group)")
    if args.threads is not None and args.threads < 1:
        raise ValueError("--threads must be at least 1")
    if args.minutes is not None and args.minutes <= 0:
        raise ValueError("--minutes must be positive")
    if args.temperature <= 0:
        raise ValueError("--temperature must be positive (GRPO needs sampling)")
    if args.resume and not args.output_dir:
        raise ValueError("--resume needs --output-dir (the run folder to continue)")
    return TrainConfig(
        tasks=args.tasks or ["click-test"],
        model=args.model,
        output_dir=args.output_dir or time.strftime("runs/train-%Y%m%d-%H%M%S"),
        lora=args.lora,
        lora_rank=args.lora_rank,
        max_steps=args.steps,
        minutes=args.minutes,
        num_generations=args.num_generations,
        groups_per_step=args.groups_per_step,
        max_completion_length=args.max_completion_length,
        max_turns=args.max_turns,
        temperature=args.temperature,
        learning_rate=args.lr,
        beta=args.beta,
        loss_type=args.loss_type,
        rewards=args.rewards or ["success"],
        save_steps=args.save_steps,
        seed=args.seed,
        env_url=args.env_url,
        prompt=args.prompt,
        use_vllm=args.use_vllm,
        threads=args.threads,
        resume=args.resume,
    )


def run(args: argparse.Namespace) -> int:
    try:
        config = config_from_args(args)
    except ValueError as exc:
        print(f"envharness train: {exc}", file=sys.stderr)
        return 2
    import os

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from envharness.cli.interrupts import InterruptGuard, resume_command, say_interrupted
    from envharness.integrations.trl.training import TrainSetupError, train

    with InterruptGuard() as guard:
        try:
            result = train(config)
        except TrainSetupError as exc:
            print(f"envharness train: {exc}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM: the finished steps are checkpointed
            from envharness.integrations.trl.resume import count_step_records, latest_checkpoint

            argv = getattr(args, "_argv", None)
            latest = latest_checkpoint(config.output_dir)
            if latest is None:  # nothing to resume from: the same command starts over
                command = resume_command(argv, out_flag="--output-dir", out=config.output_dir).removesuffix(" --resume")
                return say_interrupted("train", guard, f"nothing (no step finished) in {config.output_dir}", command)
            kept = f"{latest.step} step(s) in {latest.path} and their {count_step_records(config.output_dir, latest.step)} episode record(s)"
            return say_interrupted("train", guard, kept, resume_command(argv, out_flag="--output-dir", out=config.output_dir))
    print(f"trained {result.steps} steps in {result.seconds:.0f}s")
    print(f"  model:        {result.final_model_dir}")
    print(f"  episodes:     {result.records_path}")
    print(f"  reward curve: {result.reward_curve_path or '(nothing logged)'}")
    return 0
