"""`envharness sft`: fine-tune a model on demonstrations before GRPO (behaviour cloning).

    envharness sft --tasks enter-text,login-user --episodes 64 --out runs/sft      # the scripted policy's
    envharness sft --demos runs/mine --tasks all --out runs/rft                     # a run's own successes
    envharness eval --model runs/sft/final --prompt compact --tasks enter-text      # then evaluate, or
    envharness train --model runs/sft/final --tasks enter-text                      # go on with GRPO

Leaves `demos/` (the demonstration episodes, an eval run folder with exact token ids),
checkpoints, `final/` (a model directory), `train_log.jsonl` and `sft_config.json` in `--out`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from envharness.cli import options
from envharness.cli.declared import add_declared, from_args
from envharness.core.declared import check_options
from envharness.harness.plan import DEMONSTRATION, PlanError, resolve_plan
from envharness.integrations.trl.errors import TrainSetupError
from envharness.integrations.trl.sft import SFTRunConfig


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Every option `SFTRunConfig` declares (integrations/trl/sft.py)."""
    add_declared(parser, SFTRunConfig, options.help_values())


def config_from_args(args: argparse.Namespace) -> SFTRunConfig:
    """The `SFTRunConfig` the command line describes, its bounds checked (ValueError)."""
    options.resume_needs_out(args)
    config = from_args(SFTRunConfig, args)
    check_options(config)
    return config


def check_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    options.check_prompt(parser, args)
    options.check_device(parser, args)


def prepare(config: SFTRunConfig) -> tuple[SFTRunConfig, Any, Any]:
    """Settings checked (TrainSetupError naming the first bad one); (the configuration resolved
    from its plan of play, `harness.plan.resolve_plan`: its prompt style, its tasks, its opponent
    on the server's options; the checkpoint; the demonstrations' EvalConfig, resolved, or None
    for a run folder's)."""
    from envharness.integrations.trl.loading import check_model_spec
    from envharness.integrations.trl.resume import plan_resume
    from envharness.prompts import get_prompt_style

    check_model_spec(config.model)
    try:
        (row,) = resolve_plan(config, DEMONSTRATION).rows
    except PlanError as exc:
        raise TrainSetupError(str(exc)) from None
    if not get_prompt_style(row.prompt, row.env).conversation:
        raise TrainSetupError(
            f"prompt style {row.prompt!r} builds a fresh prompt every step; demonstrations are one "
            "token sequence per episode: use a conversation style (the environment's training style)"
        )
    out = Path(config.output_dir)
    demos = None
    if config.demos == "scripted":
        demos = _scripted_demos(config, row.prompt, out / "demos")
    elif not (Path(config.demos) / "episodes.jsonl").is_file():
        raise TrainSetupError(
            f"--demos {config.demos!r}: neither 'scripted' nor an eval run folder (no episodes.jsonl)"
        )
    harness = row.env.require_harness()
    if row.seats.client_opponent is not None and config.eval_every:
        raise TrainSetupError(
            f"--eval-every with --opponent {config.opponent}: the held-out evaluation plays an opponent "
            f"the server plays ({' or '.join(harness.server_opponents)})"
        )
    # a run folder's demonstrations keep the tasks asked for (none: all it holds)
    tasks = list(demos.tasks) if demos is not None else config.tasks
    config = replace(config, prompt=row.prompt, tasks=tasks, env_options=row.server_options)
    try:
        checkpoint = plan_resume(out, asdict(config), config.resume, config_name="sft_config.json")
    except ValueError as exc:
        raise TrainSetupError(str(exc)) from None
    return config, checkpoint, demos


def _scripted_demos(config: SFTRunConfig, prompt: str, folder: Path) -> Any:
    """The eval run that records the scripted policy's demonstrations, resolved (`check()`)."""
    from envharness.eval.config import EvalConfig, EvalSetupError

    demos = EvalConfig(
        out=str(folder),
        env=config.env,
        env_options=config.env_options,
        tasks=list(config.tasks),
        episodes=config.episodes,
        model="scripted",
        prompt=prompt,
        max_steps=config.max_turns,
        seed=config.seed,
        opponent=config.opponent,
        seat=config.seat,
        record_tokens=True,
        screenshots=False,
        progress=False,
        env_url=config.env_url,
        resume=config.resume and folder.is_dir(),
    )
    try:
        return demos.check().config
    except EvalSetupError as exc:
        raise TrainSetupError(str(exc)) from None


def fine_tune(config: SFTRunConfig) -> dict:
    """Demonstrations, then SFT; returns `run_sft`'s summary plus the demonstrations' numbers."""
    from envharness.eval.demonstrations import DemonstrationError, from_records, read_run, scripted_records
    from envharness.integrations.trl.loading import load_model
    from envharness.integrations.trl.sft import run_sft, training_rows

    config, checkpoint, demos = prepare(config)
    options.set_threads(config.threads)
    Path(config.output_dir).mkdir(parents=True, exist_ok=True)
    from envharness.models.device import resolve

    model, tokenizer = load_model(config.model, resolve(config.device, config.dtype))
    try:
        records = (
            asyncio.run(scripted_records(demos, tokenizer)) if demos is not None else read_run(config.demos)
        )
        if demos is None and config.tasks:  # a run folder: keep the tasks asked for
            records = [r for r in records if r.get("task") in set(config.tasks)]
        limit = getattr(getattr(model, "config", None), "max_position_embeddings", None)
        chosen = from_records(records, tokenizer, max_length=limit)
    except DemonstrationError as exc:
        raise TrainSetupError(str(exc)) from None
    print(f"[sft] {chosen.summary()}", file=sys.stderr, flush=True)
    from envharness.integrations.trl.sft_eval import held_out_callback

    with held_out_callback(config, tokenizer, chosen.demonstrations) as held_out:
        result = run_sft(
            config,
            training_rows(chosen.demonstrations),
            model,
            tokenizer,
            checkpoint=checkpoint,
            callbacks=[held_out] if held_out else [],
        )
    return {**result, "demonstrations": len(chosen.demonstrations), "episodes": chosen.episodes}


def run(args: argparse.Namespace) -> int:
    try:
        config = config_from_args(args)
    except ValueError as exc:
        print(f"envharness sft: {exc}", file=sys.stderr)
        return 2
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from envharness.cli.interrupts import InterruptGuard, say_checkpoints_kept

    with InterruptGuard() as guard:
        try:
            result = fine_tune(config)
        except TrainSetupError as exc:
            print(f"envharness sft: {exc}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM: the finished steps are checkpointed
            return say_checkpoints_kept("sft", guard, getattr(args, "_argv", None), config.output_dir)
    print(
        f"fine-tuned {result['steps']} steps on {result['demonstrations']} demonstrations "
        f"({result['episodes']} episodes) in {result['seconds']:.0f}s"
    )
    print(f"  model:          {result['final']}")
    print(
        f"  demonstrations: {Path(config.demos if config.demos != 'scripted' else Path(config.output_dir) / 'demos')}"
    )
    print(f"  log:            {Path(config.output_dir) / 'train_log.jsonl'}")
    if config.eval_every:
        print(f"  best held-out:  {Path(config.output_dir) / 'best'} (eval_log.jsonl)")
    return 0
