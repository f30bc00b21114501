"""What a training run is asked to do (`TrainConfig`) and what it leaves (`TrainResult`).

Each field is its option, declared once (`core/declared.py`): `envharness train`'s parser,
``--help`` and bounds come from it. `TrainConfig` is frozen: `train()` checks it once
(`checks.check_config`), which returns the resolved copy (tasks expanded, the prompt style
chosen) that the run uses and writes to ``train_config.json``. Importing this module stays
light (no torch, no TRL): the command line reads it for ``--help``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envharness.core.declared import option
from envharness.curriculum import SAMPLERS
from envharness.harness import run_options as shared
from envharness.harness.groups import EnvironmentArgs, FleetArgs, TrainingModelArgs
from envharness.integrations.trl.mix import parse_mix
from envharness.integrations.trl.tracking import REPORT_TO


@dataclass(frozen=True)
class TrainConfig(EnvironmentArgs, FleetArgs, TrainingModelArgs):
    """A GRPO run: the environment, servers and model groups (`harness/groups.py`; empty
    `tasks`: the environment's first default task; `model`: "embedded", "tiny", a path / hub
    id, or a vision-language model, which trains on screenshots with `VisionGRPOTrainer`),
    and train's own options below."""

    output_dir: str = shared.out(
        "runs/train",
        "checkpoints, final/, episodes.jsonl, train_log.jsonl, reward_curve.png",
        "runs/train-<time>",
        "runs/train-%Y%m%d-%H%M%S",
    )
    lora: bool = option(False, "train a LoRA adapter (peft) instead of all weights")
    lora_rank: int = option(16, "the LoRA adapter's rank (default %(default)s)", minimum=1)
    max_steps: int = option(
        30, "optimizer steps (ignored with --minutes; default %(default)s)", flags=("--steps",), minimum=1
    )
    #: Stop after this many minutes of training (checked after each step).
    minutes: float | None = option(None, "train for this long instead of --steps", type=float, positive=True)
    num_generations: int = option(4, "episodes per task page (GRPO group size)", minimum=2)
    #: The batch is groups_per_step * num_generations episodes.
    groups_per_step: int = option(2, "task pages per step", minimum=1)
    #: The step's gradient is the same, summed over the passes (loss_memory.py).
    micro_batch: int = option(
        0,
        "episodes per loss pass (forward and backward); the step's gradient is the same, memory "
        "follows N, not the batch; must divide the batch (default: one group, --num-generations)",
        metavar="N",
        minimum=0,
    )
    gradient_checkpointing: bool = option(
        False, "recompute activations in the backward pass: about half a loss pass's memory, slower"
    )
    max_completion_length: int = shared.max_new_tokens(16)
    max_turns: int = shared.max_turns(1)
    temperature: float = shared.temperature(
        1.0, "sampling temperature, > 0 (GRPO needs sampling)", positive=True
    )
    learning_rate: float = option(2e-5, "learning rate", flags=("--lr", "--learning-rate"), positive=True)
    beta: float = option(0.0, "KL coefficient (0: no reference model)", minimum=0)
    loss_type: str = option("dapo", "TRL loss type (dapo, grpo, dr_grpo, bnpo, ...)")
    rewards: list[str] = option(
        ["success"],
        "reward function(s): success, sum, mean, max of the environment's reward, or one the "
        "environment adds (e.g. a game's shaped rewards); repeatable (default success)",
        flags=("--reward", "--rewards"),
        dest="rewards",
        action="append",
        cli_default=None,
        metavar="NAME",
        from_cli=lambda given: given or ["success"],
    )
    save_steps: int = option(10, "checkpoint every N steps", minimum=1)
    seed: int = shared.seed(0, "training seed (episode pages are drawn from it)")
    use_vllm: bool = option(False, "generate with TRL's vLLM (needs a CUDA GPU and vllm)")
    #: Started under a launcher (torchrun, accelerate launch), its WORLD_SIZE counts instead.
    processes: int = option(
        1,
        "train as N processes on this machine (started through torch.distributed.run; each plays "
        "its share of the batch, one set of files; on GPUs one process per GPU)",
        metavar="N",
        minimum=1,
    )
    #: Experiment tracker (see tracking.py).
    report_to: str = option(
        "none",
        "experiment tracker (default none: nothing leaves the machine); tensorboard writes "
        "<output-dir>/runs/, trackio logs locally, wandb uploads unless WANDB_MODE=offline",
        choices=tuple(REPORT_TO),
    )
    #: An agent that owns its loop, trained through the policy endpoint.
    agent: str | None = option(
        None,
        "train your own agent (module.path:function or path/to/agent.py:function, written against "
        "the openai and mcp SDKs) through the policy endpoint, instead of the harness's loop",
        metavar="MODULE:FUNCTION",
    )
    #: Past it, an agent is cancelled and its row masked, counted and named in the log (never a
    #: reward of 0). None: no limit.
    agent_timeout_s: float | None = option(
        600.0,
        "with --agent: seconds one agent may take for its rollout; a late one is cancelled, its row "
        "masked, counted and named in the log (default %(default)s; 0: no limit)",
        flags=("--agent-timeout",),
        metavar="S",
        minimum=0,
        from_cli=lambda seconds: seconds or None,
    )
    # -- vision policies (integrations/trl/vision.py) --
    screenshot_max_side: int | None = shared.screenshot_max_side(
        448, "vision models: longest side of the screenshots they see, in pixels"
    )
    #: Observation text beside the screenshot, one of the vision prompt's text views.
    vision_page_text: str = option(
        "elements",
        "vision models: the text shown beside the screenshot, one of the environment's text views "
        "(its vision prompt style's), or none (default %(default)s)",
    )
    resume: bool = shared.resume("continue from the latest checkpoint in --out (records and curve continue)")
    overwrite: bool = option(False, "replace the run already in --out (its checkpoints, records and model)")
    #: Exact with beta 0 and no entropy bonus: that loss and its gradient are 0; see no_signal.py.
    skip_no_signal: bool = option(
        True, "skip TRL's loss forward/backward on a batch whose advantages are all 0", cli=False
    )
    #: Truncated importance sampling (`logprob_agreement.py`); the gap is logged either way.
    logprob_correction: bool = option(
        True,
        "log the gap between sampled and training logprobs but do not correct it "
        "(default: truncated importance sampling, as TRL does behind vLLM)",
        flags=("--no-logprob-correction",),
        dest="logprob_correction",
    )
    curriculum: str = option(
        "uniform",
        "which task each group plays: uniform (the tasks in turn) or signal (weighted by p(1-p) "
        "of the task's recent success: the tasks whose groups disagree, where GRPO learns)",
        choices=tuple(SAMPLERS),
    )
    curriculum_floor: float = option(
        0.02, "with --curriculum signal, the least weight of a task (so none is forgotten)"
    )
    #: DAPO's dynamic sampling (`dynamic_sampling.py`); 0 keeps every group as first drawn.
    max_extra_groups: int = option(
        0,
        "replace each group whose rewards all agree (no signal) with a fresh seed of its task, "
        "drawing at most N extra groups a step (default %(default)s: none replaced)",
        metavar="N",
        minimum=0,
    )
    #: Asynchronous rollouts (`async_rollout.py`): the next step's episodes sampled during the loss pass.
    async_rollout: bool = option(
        False,
        "sample the next step's episodes while this step's loss pass runs (on a copy of the "
        "policy; each episode records its policy version; see --max-staleness)",
        flags=("--async",),
        dest="async_rollout",
    )
    max_staleness: int = option(
        1,
        "with --async, drop (and count) a batch sampled more than K policy versions before the "
        "step that would train it (default %(default)s; 0: nothing sampled ahead)",
        metavar="K",
        minimum=0,
    )
    eval_every: int = shared.eval_every("the training curves")
    eval_tasks: list[str] = shared.eval_tasks()
    eval_episodes: int = shared.eval_episodes()
    eval_on_start: bool = shared.eval_on_start()
    #: {env: [tasks]} (`mix.py`); `env` and `tasks` then follow from it (tasks named env:task).
    mix: dict[str, list[str]] = option(
        {},
        "train on a mix of environments, repeatable: --mix ENV:TASK,TASK --mix ENV:TASK "
        "(each its own server and prompt, one batch drawn across them)",
        action="append",
        cli_default=None,
        metavar="ENV:TASKS",
        from_cli=lambda specs: parse_mix(specs or []),
    )


@dataclass
class TrainResult:
    model: Any  # the trained model (a PeftModel with --lora)
    output_dir: Path
    final_model_dir: Path
    records_path: Path
    reward_curve_path: Path | None
    steps: int
    seconds: float
    log_history: list[dict[str, Any]]
