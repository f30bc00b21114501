"""One GRPO run on an environment's tasks (MiniWoB by default), shared by `envharness train`
and the learning experiments.

`train(TrainConfig(...))` checks the configuration (`checks.py`), picks the kind of run
(`kinds/`: text, vision, a mix, an agent's own loop), loads the model, opens the kind's servers
or clients, trains with TRL's `GRPOTrainer` (or the kind's trainer class) over the kind's
rollout function, and leaves in `output_dir`: checkpoints, the final model, `episodes.jsonl`
(every episode of every step, in the shared records format), `train_log.jsonl` (TRL's logs)
and `reward_curve.png`. Defaults fit a 2-core CPU: small groups, short completions, one turn.

From here users import `train` and what it takes, returns and raises (`TrainConfig`,
`TrainResult`, `TrainSetupError`); the helpers live in the modules of their responsibility
(`grpo_args.grpo_config`, `loading.load_model`, `servers.env_clients`, ...). Their old
import from this module still works and warns (`envharness/_deprecated.py`).
"""

from __future__ import annotations

import contextlib
import functools
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from envharness._deprecated import deprecated_names
from envharness.curriculum import TaskSampler, make_sampler
from envharness.integrations.trl import checks, grpo_args, loss_memory, ranks
from envharness.integrations.trl.async_rollout import AsyncRollout
from envharness.integrations.trl.callbacks import (
    ProgressCallback,
    StepBoundary,
    TimeBudgetCallback,
    plot_reward_curve,
    save_finished_steps,
)
from envharness.integrations.trl.checks import CheckedRun, config_json, sampler_options
from envharness.integrations.trl.config import TrainConfig, TrainResult
from envharness.integrations.trl.curriculum import CurriculumLayer
from envharness.integrations.trl.dynamic_sampling import DynamicSampling
from envharness.integrations.trl.errors import TrainSetupError
from envharness.integrations.trl.exploration import GroupStats
from envharness.integrations.trl.held_out import HeldOutEvaluation
from envharness.integrations.trl.kinds import RunParts
from envharness.integrations.trl.layers import stack_layers
from envharness.integrations.trl.logprob_agreement import measure_and_correct
from envharness.integrations.trl.mix import prompt_key
from envharness.integrations.trl.no_signal import skip_batches_without_signal
from envharness.integrations.trl.precision import check_model_device
from envharness.integrations.trl.reference import give_reference_a_source, measure_reference
from envharness.integrations.trl.resume import clear_run, trim_to_step
from envharness.integrations.trl.rollout import task_dataset
from envharness.integrations.trl.step_timing import RolloutCallTimer, StepClock, StepTimer
from envharness.models.device import resolve

__all__ = ["TrainConfig", "TrainResult", "TrainSetupError", "train"]
# The helpers this module used to re-export, kept for old callers with a warning.
__getattr__ = deprecated_names(__name__)


def train(
    config: TrainConfig,
    *,
    model: Any = None,
    tokenizer: Any = None,
    client_factory: Callable[[], Any] | None = None,
    callbacks: list[Any] = (),  # type: ignore[assignment]
    **grpo_overrides: Any,
) -> TrainResult:
    """Run GRPO as configured; see the module docstring for what lands in `output_dir`.

    The steps are the same for every kind of run. Under a launcher every process runs them:
    rank 0 alone prepares the folder and writes the files (`ranks.py`), each rank plays its
    share of the batch on its kind's servers, and TRL gathers the rewards of every group."""
    ranks.join()
    run = checks.check_config(config, model=model, tokenizer=tokenizer)
    config, kind = run.config, run.kind
    out = _prepare_folder(run)
    placement = resolve(config.device, config.dtype)
    if model is None:
        model, tokenizer = kind.load_model(config, placement)
    grpo_args.check_loss_fits_upfront(config, model, placement)
    give_reference_a_source(model, out, config.beta, lora=config.lora)  # the KL term's start, reloadable
    text_tokenizer = getattr(tokenizer, "tokenizer", tokenizer)  # a VLM's processor holds one
    if text_tokenizer.pad_token is None:
        text_tokenizer.pad_token = text_tokenizer.eos_token
    resuming = run.checkpoint is not None
    with kind.open(run.plan, client_factory) as clients, contextlib.ExitStack() as stack:
        records = ranks.RankedRecords(out / "episodes.jsonl", append=resuming)
        stack.callback(records.close)
        clock = StepClock()  # the timed backend and the StepTimer layer share it
        parts = RunParts(run.plan, tokenizer, records, clock.backend_factory)
        sampler = _sampler(config)  # the curriculum's: it also learns from the dropped groups
        layers = [  # inside-out: each wraps the one before; their callbacks log in this order
            functools.partial(StepTimer, clock=clock),  # time/generate_s, time/env_s, time/train_s
            GroupStats,  # all-failed / all-succeeded groups, their errors, sampled_nll
            *_dynamic_sampling(config, sampler, kind.prompt_for),  # groups without signal replaced
            functools.partial(CurriculumLayer, sampler=sampler, prompt_for=kind.prompt_for),
            functools.partial(ranks.RankFlush, records=records),  # every rank's episodes to rank 0
            *_async(config, kind.prompt_for),  # --async: the next batch sampled during the loss pass
            functools.partial(RolloutCallTimer, clock=clock),  # TRL's call: the step's rest is its loss pass
        ]
        rollout = stack_layers(kind.rollout(parts, clients), layers)
        stack.callback(rollout.close)  # what the rollout holds: a policy endpoint, an opponent
        # one prompt per group; with a time budget, TRL cycles through this many pages
        num_prompts = config.groups_per_step * (config.max_steps if config.minutes is None else 500)
        evaluate_task = kind.evaluate_task(run.plan, tokenizer, clients) if config.eval_every else None
        trainer = kind.trainer_class()(
            model=model,
            processing_class=tokenizer,
            reward_funcs=kind.reward_funcs(run.plan),
            args=grpo_args.grpo_config(config, **grpo_overrides),
            train_dataset=task_dataset(config.tasks, num_prompts, seed=config.seed),
            rollout_func=rollout,
            peft_config=grpo_args.lora_config(config) if config.lora else None,
            callbacks=[
                *rollout.callbacks(),
                *([_held_out(config, evaluate_task, tokenizer, out)] if evaluate_task else []),
                *([ProgressCallback(out / "train_log.jsonl", append=resuming)] if ranks.is_main() else []),
                *([TimeBudgetCallback(config.minutes)] if config.minutes else []),
                *callbacks,
            ],
        )
        seconds = _run_trainer(trainer, run, placement)
    return _finish(trainer, tokenizer, config, out, seconds)


def _sampler(config: TrainConfig) -> TaskSampler:
    """The curriculum's sampler of each group's task (`--curriculum`)."""
    return make_sampler(config.curriculum, config.tasks, seed=config.seed, **sampler_options(config))


def _dynamic_sampling(config: TrainConfig, sampler: TaskSampler, prompt_for: Any) -> list[Any]:
    """DAPO's dynamic sampling as a layer (none with `--max-extra-groups 0`), inside the
    curriculum: a dropped group's successes still reach its sampler."""
    if not config.max_extra_groups:
        return []

    def learn(group: str, successes: list[bool]) -> None:
        sampler.update(prompt_key(group), successes)

    layer = functools.partial(DynamicSampling, max_extra=config.max_extra_groups, seed=config.seed)
    return [functools.partial(layer, prompt_for=prompt_for, on_dropped=learn)]


def _async(config: TrainConfig, prompt_for: Any) -> list[Any]:
    """`--async` (none without it), outside every layer but the call timer: it samples everything inside."""
    if not config.async_rollout:
        return []
    return [functools.partial(AsyncRollout, max_staleness=config.max_staleness, seed=config.seed,
                              prompt_for=prompt_for)]  # fmt: skip


def _prepare_folder(run: CheckedRun) -> Path:
    """The run folder: an earlier run cleared (--overwrite) or cut back to the checkpoint it
    resumes from, and the resolved settings in train_config.json."""
    config = run.config
    if config.threads:
        torch.set_num_threads(config.threads)
    out = Path(config.output_dir)
    ranks.barrier()  # every rank has read the folder (check_config) before rank 0 changes it
    if ranks.is_main():  # the others wait for the folder
        if config.overwrite:
            clear_run(out)
        out.mkdir(parents=True, exist_ok=True)
        if run.checkpoint is not None:  # the steps after the checkpoint will be played again
            trim_to_step(out, run.checkpoint.step)
        (out / "train_config.json").write_text(json.dumps(config_json(config), indent=2))
    ranks.barrier()
    return out


def _held_out(config: TrainConfig, evaluate_task: Any, tokenizer: Any, out: Path) -> HeldOutEvaluation:
    """The `--eval-every` callback: held-out seeds of the trained and the transfer tasks."""
    return HeldOutEvaluation(
        evaluate_task,
        every=config.eval_every,
        tasks=config.tasks,
        transfer=config.eval_tasks,
        episodes=config.eval_episodes,
        on_start=config.eval_on_start,
        out=out,
        tokenizer=tokenizer,
    )


def _run_trainer(trainer: Any, run: CheckedRun, placement: Any) -> float:
    """The trainer's guards installed, then its steps; returns the seconds they took."""
    boundary = StepBoundary()
    trainer.add_callback(boundary)
    check_model_device(trainer.model, placement)
    loss_memory.guard_loss_memory(trainer)  # inside the skip: skipped passes cost nothing
    if run.config.skip_no_signal:
        skip_batches_without_signal(trainer)
    measure_and_correct(
        trainer, correct=run.config.logprob_correction
    )  # after the skip: it knows skipped batches
    measure_reference(trainer)  # with --beta: the reference model's memory and time, each step
    started = time.perf_counter()
    try:
        trainer.train(resume_from_checkpoint=str(run.checkpoint.path) if run.checkpoint else None)
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: keep the finished steps, then stop
        save_finished_steps(trainer, boundary)
        raise
    return time.perf_counter() - started


def _finish(trainer: Any, tokenizer: Any, config: TrainConfig, out: Path, seconds: float) -> TrainResult:
    """The final model saved and the reward curve drawn from what each step logged."""
    final_dir = out / "final"
    trainer.save_model(str(final_dir))  # rank 0 writes it (the Trainer's own rule)
    history = list(trainer.state.log_history)
    if not ranks.is_main():  # rank 0 writes the tokenizer and draws the curve
        return TrainResult(trainer.model, out, final_dir, out / "episodes.jsonl", None,
                           trainer.state.global_step, seconds, history)  # fmt: skip
    tokenizer.save_pretrained(str(final_dir))
    logged = (
        out / "train_log.jsonl"
    )  # what callbacks added to each step's log (exploration, timing) is only here
    plotted = (
        [json.loads(line) for line in logged.read_text().splitlines() if line.strip()]
        if logged.exists()
        else history
    )
    curve = plot_reward_curve(plotted, out / "reward_curve.png", title=f"GRPO on {', '.join(config.tasks)}")
    return TrainResult(
        trainer.model,
        out,
        final_dir,
        out / "episodes.jsonl",
        curve,
        trainer.state.global_step,
        seconds,
        history,
    )
