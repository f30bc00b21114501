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
import sys
import time

from envharness.cli import options
from envharness.curriculum import SAMPLERS
from envharness.integrations.trl.mix import parse_mix
from envharness.integrations.trl.tracking import REPORT_TO
from envharness.integrations.trl.training import TrainConfig

_DEFAULTS = TrainConfig()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    d = _DEFAULTS
    # shared with eval (and mcp): same names, same choices (envharness.cli.options)
    options.add_env(parser)
    options.add_env_options(parser)
    options.add_model(parser, d.model)
    options.add_tasks(parser)
    options.add_prompt(parser, d.prompt)
    options.add_out(
        parser, "checkpoints, final/, episodes.jsonl, train_log.jsonl, reward_curve.png", "runs/train-<time>"
    )
    options.add_env_url(parser)
    options.add_seed(parser, d.seed, "training seed (episode pages are drawn from it)")
    options.add_max_turns(parser, d.max_turns)
    options.add_max_new_tokens(parser, d.max_completion_length)
    options.add_temperature(parser, d.temperature, "sampling temperature, > 0 (GRPO needs sampling)")
    options.add_threads(parser)
    options.add_device(parser, training=True)
    # train's own
    parser.add_argument(
        "--steps",
        type=int,
        default=d.max_steps,
        help="optimizer steps (ignored with --minutes; default %(default)s)",
    )
    parser.add_argument("--minutes", type=float, default=None, help="train for this long instead of --steps")
    parser.add_argument(
        "--lora", action="store_true", help="train a LoRA adapter (peft) instead of all weights"
    )
    parser.add_argument("--lora-rank", type=int, default=d.lora_rank)
    parser.add_argument(
        "--num-generations",
        type=int,
        default=d.num_generations,
        help="episodes per task page (GRPO group size)",
    )
    parser.add_argument("--groups-per-step", type=int, default=d.groups_per_step, help="task pages per step")
    parser.add_argument(
        "--micro-batch",
        type=int,
        default=d.micro_batch,
        metavar="N",
        help="episodes per loss pass (forward and backward); the step's gradient is the same, memory "
        "follows N, not the batch; must divide the batch (default: one group, --num-generations)",
    )
    parser.add_argument(
        "--gradient-checkpointing",
        action="store_true",
        help="recompute activations in the backward pass: about half a loss pass's memory, slower",
    )
    parser.add_argument(
        "--lr", "--learning-rate", dest="lr", type=float, default=d.learning_rate, help="learning rate"
    )
    parser.add_argument("--beta", type=float, default=d.beta, help="KL coefficient (0: no reference model)")
    parser.add_argument(
        "--loss-type", default=d.loss_type, help="TRL loss type (dapo, grpo, dr_grpo, bnpo, ...)"
    )
    parser.add_argument(
        "--reward",
        "--rewards",
        dest="rewards",
        action="append",
        metavar="NAME",
        help="reward function(s): success, sum, mean, max of the environment's reward, or one the "
        "environment adds (textarena: its shaped Wordle rewards); repeatable (default success)",
    )
    parser.add_argument(
        "--mix",
        action="append",
        metavar="ENV:TASKS",
        help="train on a mix of environments, repeatable: --mix browsergym:click-test,enter-text "
        "--mix textarena:Wordle-v0 (each its own server and prompt, one batch drawn across them)",
    )
    parser.add_argument(
        "--curriculum",
        default=d.curriculum,
        choices=list(SAMPLERS),
        help="which task each group plays: uniform (the tasks in turn) or signal (weighted by p(1-p) "
        "of the task's recent success: the tasks whose groups disagree, where GRPO learns)",
    )
    parser.add_argument(
        "--curriculum-floor",
        type=float,
        default=d.curriculum_floor,
        help="with --curriculum signal, the least weight of a task (so none is forgotten)",
    )
    parser.add_argument(
        "--eval-every",
        type=int,
        default=d.eval_every,
        metavar="N",
        help="every N steps, greedy episodes on held-out seeds of every trained task and of "
        "--eval-tasks, logged beside the training curves; the best model is kept in <out>/best",
    )
    parser.add_argument(
        "--eval-tasks",
        default="",
        help="comma-separated transfer tasks (never trained) that --eval-every also plays",
    )
    parser.add_argument(
        "--eval-episodes", type=int, default=d.eval_episodes, help="held-out seeds per task for --eval-every"
    )
    parser.add_argument("--save-steps", type=int, default=d.save_steps, help="checkpoint every N steps")
    parser.add_argument(
        "--use-vllm", action="store_true", help="generate with TRL's vLLM (needs a CUDA GPU and vllm)"
    )
    parser.add_argument(
        "--no-logprob-correction",
        dest="logprob_correction",
        action="store_false",
        help="log the gap between sampled and training logprobs but do not correct it "
        "(default: truncated importance sampling, as TRL does behind vLLM)",
    )
    # -- experiment tracking --
    parser.add_argument(
        "--report-to",
        default=d.report_to,
        choices=list(REPORT_TO),
        help="experiment tracker (default none: nothing leaves the machine); tensorboard writes "
        "<output-dir>/runs/, trackio logs locally, wandb uploads unless WANDB_MODE=offline",
    )
    options.add_fleet(parser)
    # -- vision policies: `--model <VLM directory>` or `--model tiny-vlm` trains on screenshots --
    parser.add_argument(
        "--screenshot-max-side",
        type=int,
        default=d.screenshot_max_side,
        help="vision models: longest side of the screenshots they see, in pixels",
    )
    parser.add_argument(
        "--vision-page-text",
        choices=["elements", "axtree", "none"],
        default=d.vision_page_text,
        help="vision models: page text shown beside the screenshot",
    )
    # agents that own their loop
    parser.add_argument(
        "--agent",
        default=None,
        metavar="MODULE:FUNCTION",
        help="train your own agent (module.path:function or path/to/agent.py:function, written against "
        "the openai and mcp SDKs) through the policy endpoint, instead of the harness's loop",
    )
    parser.add_argument(
        "--agent-timeout",
        type=float,
        default=d.agent_timeout_s,
        metavar="S",
        help="with --agent: seconds one agent may take for its rollout; a late one is cancelled, its row "
        "masked, counted and named in the log (default %(default)s; 0: no limit)",
    )
    # resuming
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue from the latest checkpoint in --out (records and curve continue)",
    )


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    """The `TrainConfig` the command line describes (validated)."""
    for name in (
        "steps",
        "num_generations",
        "groups_per_step",
        "max_new_tokens",
        "max_turns",
        "save_steps",
        "lora_rank",
    ):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be at least 1")
    if args.model.strip() == "scripted" or args.model.startswith(("openai:", "trl-vllm:")):
        raise ValueError(
            f"--model {args.model} has no weights to train: use embedded, tiny, a model directory or a hub id"
        )
    if args.micro_batch < 0:
        raise ValueError("--micro-batch must be at least 1 (0: one group)")
    if args.num_generations < 2:
        raise ValueError("--num-generations must be at least 2 (GRPO compares episodes within a group)")
    if args.threads is not None and args.threads < 1:
        raise ValueError("--threads must be at least 1")
    if args.agent_timeout is not None and args.agent_timeout < 0:
        raise ValueError("--agent-timeout must not be negative (0: no limit)")
    if args.minutes is not None and args.minutes <= 0:
        raise ValueError("--minutes must be positive")
    if args.temperature <= 0:
        raise ValueError("--temperature must be positive (GRPO needs sampling)")
    if sum(map(bool, (args.env_url, args.env_urls, args.servers))) > 1 or args.servers < 0:
        raise ValueError("give one of --env-url, --env-urls and --servers (N >= 1)")
    if args.ray_address and not args.servers:
        raise ValueError("--ray-address needs --servers")
    if args.agent and (args.env_urls or args.servers):
        raise ValueError(
            "--agent plays through one server's /mcp: give --env-url (or nothing), not --env-urls/--servers"
        )
    if args.resume and not args.out:
        raise ValueError("--resume needs --out (the run folder to continue)")
    return TrainConfig(
        tasks=args.tasks,
        env=args.env,
        env_options=options.env_options(args.env_options),
        model=args.model,
        output_dir=args.out or time.strftime("runs/train-%Y%m%d-%H%M%S"),
        lora=args.lora,
        lora_rank=args.lora_rank,
        max_steps=args.steps,
        minutes=args.minutes,
        num_generations=args.num_generations,
        groups_per_step=args.groups_per_step,
        micro_batch=args.micro_batch,
        gradient_checkpointing=args.gradient_checkpointing,
        max_completion_length=args.max_new_tokens,
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
        device=args.device,
        dtype=args.dtype,
        logprob_correction=args.logprob_correction,
        mix=parse_mix(args.mix or []),
        curriculum=args.curriculum,
        curriculum_floor=args.curriculum_floor,
        eval_every=args.eval_every,
        eval_tasks=[t.strip() for t in args.eval_tasks.split(",") if t.strip()],
        eval_episodes=args.eval_episodes,
        report_to=args.report_to,
        env_urls=args.env_urls,
        servers=args.servers,
        ray_address=args.ray_address,
        screenshot_max_side=args.screenshot_max_side,
        vision_page_text=args.vision_page_text,
        resume=args.resume,
        agent=args.agent,
        agent_timeout_s=args.agent_timeout or None,
    )


def check_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    options.check_prompt(parser, args)
    options.check_device(parser, args)


def run(args: argparse.Namespace) -> int:
    try:
        config = config_from_args(args)
    except ValueError as exc:
        print(f"envharness train: {exc}", file=sys.stderr)
        return 2
    import os

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from envharness.cli.interrupts import InterruptGuard, say_checkpoints_kept
    from envharness.integrations.trl.training import TrainSetupError, train

    with InterruptGuard() as guard:
        try:
            result = train(config)
        except TrainSetupError as exc:
            print(f"envharness train: {exc}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM: the finished steps are checkpointed
            from envharness.integrations.trl.resume import count_step_records

            return say_checkpoints_kept(
                "train",
                guard,
                getattr(args, "_argv", None),
                config.output_dir,
                lambda latest: (
                    f"{latest.step} step(s) in {latest.path} and their "
                    f"{count_step_records(config.output_dir, latest.step)} episode record(s)"
                ),
            )
    print(f"trained {result.steps} steps in {result.seconds:.0f}s")
    print(f"  model:        {result.final_model_dir}")
    print(f"  episodes:     {result.records_path}")
    print(f"  reward curve: {result.reward_curve_path or '(nothing logged)'}")
    return 0
