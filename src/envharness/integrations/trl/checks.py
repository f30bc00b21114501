"""Every setting of a training run checked before anything slow starts: `check_config` picks
the kind of run, lets it resolve its environment and defaults, checks what all kinds share,
and returns the frozen, resolved configuration the run uses."""

from __future__ import annotations

import importlib.util
from dataclasses import asdict, dataclass
from typing import Any

from envharness.core.declared import check_options
from envharness.core.registry import ResolvedEnv
from envharness.curriculum import make_sampler
from envharness.integrations.trl import ranks
from envharness.integrations.trl.config import TrainConfig
from envharness.integrations.trl.errors import TrainSetupError
from envharness.integrations.trl.grpo_args import loss_passes
from envharness.integrations.trl.kinds import RunKind, RunPlan, pick_run
from envharness.integrations.trl.loading import check_model_spec
from envharness.integrations.trl.prompting import prompt_style, reward_functions
from envharness.integrations.trl.resume import Checkpoint, plan_resume
from envharness.integrations.trl.tracking import TrackerUnavailableError, check_report_to
from envharness.models.device import DeviceError, resolve
from envharness.models.vision_processors import is_vision_spec


@dataclass(frozen=True)
class CheckedRun:
    """A run ready to start: its resolved plan, kind, and the checkpoint it resumes from (None:
    a fresh run)."""

    plan: RunPlan
    kind: RunKind
    checkpoint: Checkpoint | None

    @property
    def config(self) -> TrainConfig:
        return self.plan.config

    @property
    def env(self) -> ResolvedEnv:
        return self.plan.env


def check_config(config: TrainConfig, *, model: Any = None, tokenizer: Any = None) -> CheckedRun:
    """The run `config` describes, checked (a `TrainSetupError` naming the first bad setting).
    With `model` given, its `tokenizer` says whether it is a vision-language model (a processor)."""
    try:
        check_options(config)  # bounds, and the groups' rules (one of --env-url/--env-urls/--servers)
    except ValueError as exc:
        raise TrainSetupError(str(exc)) from None
    if model is None:
        check_model_spec(config.model)
        vision = is_vision_spec(config.model)
    else:
        vision = hasattr(tokenizer, "image_processor")  # a VLM's processor, transformers' attribute
    kind = pick_run(config, vision)
    n = processes(config)
    plan = kind.resolve(config)
    _check_model_seats(plan, kind, n)
    config = plan.config
    _check_schedule(config, n)
    _check_episodes(plan, kind)
    _check_machine(config)
    _check_processes(config, n)
    if (why := why_not_async(config, kind.name)) is not None:
        raise TrainSetupError(why)
    try:
        checkpoint = plan_resume(
            config.output_dir, config_json(config), config.resume, overwrite=config.overwrite
        )
    except ValueError as exc:
        raise TrainSetupError(str(exc)) from None
    return CheckedRun(plan, kind, checkpoint)


def why_not_async(config: Any, kind_name: str) -> str | None:
    """Why `--async` cannot serve this run, in words (None: it can)."""
    if not config.async_rollout:
        return None
    refused = {
        "--use-vllm": config.use_vllm,  # TRL's AsyncGRPOTrainer is the asynchronous path behind vLLM
        "--agent": bool(config.agent),  # an agent samples through its own policy endpoint
        f"a {kind_name} run": kind_name in ("vision", "agent"),
    }
    named = [flag for flag, given in refused.items() if given]
    if named:
        return f"--async cannot run with {', '.join(named)} yet: train without --async, or without {named[0]}"
    return None


def processes(config: TrainConfig) -> int:
    """How many processes the run trains as: the launcher's count under one, `--processes`
    before the launch (the parent checks the run once, as its ranks will run it)."""
    started = ranks.world_size()
    return started if started > 1 else config.processes


def config_json(config: TrainConfig) -> dict[str, Any]:
    """The settings `train_config.json` records (and `--resume` compares): all but `overwrite`,
    which says what to do with the folder, not how to train."""
    data = asdict(config)
    data.pop("overwrite")
    return data


def sampler_options(config: TrainConfig) -> dict[str, Any]:
    """The options of the configured curriculum sampler."""
    return {"floor": config.curriculum_floor} if config.curriculum == "signal" else {}


def _check_model_seats(plan: RunPlan, kind: RunKind, processes: int) -> None:
    """A model in the other seats (the plan's seating) is the run's client's to play, where the
    kind and the environment can."""
    for row in plan.model_seats:
        _check_model_opponent(
            plan.config, row.env.require_harness(), row.seats.client_opponent or "", kind, processes
        )


def _check_model_opponent(
    config: TrainConfig, harness: Any, opponent: str, kind: RunKind, processes: int
) -> None:
    """A model in the other seats (`self` or a model spec) is played by the run's client."""
    flag = f"--opponent {config.opponent.strip()}"
    if config.agent:
        raise TrainSetupError(
            f"{flag} with --agent: an agent's own loop plays one seat; train without --agent"
        )
    if processes > 1:
        raise TrainSetupError(f"{flag} trains on one process; it cannot run as --processes {processes} yet")
    if not kind.seats_models:
        raise TrainSetupError(f"{flag}: a {kind.name} run cannot seat a model in the other seats")
    if opponent == "self" and harness.seat_views is None:
        raise TrainSetupError(f"{flag}: {harness.env} cannot show a game seat by seat for self-play")
    if opponent != "self" and harness.seat_client is None:
        raise TrainSetupError(f"{flag}: {harness.env} cannot seat a model in the other seats")


def _check_schedule(config: TrainConfig, processes: int) -> None:
    """Tasks, curriculum, batch and held-out evaluation."""
    if not config.tasks:
        raise TrainSetupError("no tasks given")
    try:
        make_sampler(config.curriculum, config.tasks, **sampler_options(config))
    except ValueError as exc:
        raise TrainSetupError(f"--curriculum: {exc}") from None
    loss_passes(config, processes)
    if config.eval_every < 0 or config.eval_episodes < 1:
        raise TrainSetupError("--eval-every must be >= 0 and --eval-episodes >= 1")
    if config.eval_on_start and not config.eval_every:
        raise TrainSetupError("--eval-on-start plays --eval-every's held-out seeds: give --eval-every N too")


def _check_episodes(plan: RunPlan, kind: RunKind) -> None:
    """How episodes are played: the server, the rewards, the prompt, held-out evaluation."""
    config, env = plan.config, plan.env
    if config.agent and (config.env_urls or config.servers):
        raise TrainSetupError(
            "--agent plays through one server's /mcp: give --env-url (or nothing), not --env-urls/--servers"
        )
    if config.env_url and not config.env_url.startswith(("http://", "https://")):
        raise TrainSetupError(f"--env-url must be an http(s) URL, got {config.env_url!r}")
    known = reward_functions(env)
    unknown = [r for r in config.rewards if r not in known]
    if unknown:
        raise TrainSetupError(f"unknown reward(s) {unknown}; choose from {sorted(known)}")
    if config.prompt and not prompt_style(config.prompt, env).conversation and config.max_turns > 1:
        raise TrainSetupError(
            f"prompt style {config.prompt!r} builds a fresh prompt every step, so turns after the first are not one "
            "token sequence: train it with max_turns=1, or use a conversation style (compact, harness)"
        )
    if config.eval_every and (why := kind.why_no_held_out(plan)) is not None:
        raise TrainSetupError(why)


def _check_processes(config: TrainConfig, n: int) -> None:
    """What cannot run as several processes yet, refused in words."""
    started = ranks.world_size()
    if started > 1 and config.processes not in (1, started):
        raise TrainSetupError(
            f"--processes {config.processes} under a launcher that started {started}: give one"
        )
    if n == 1:
        return
    if config.agent:
        raise TrainSetupError(f"--agent trains on one process; it cannot run as {n} processes yet")
    if config.use_vllm:
        raise TrainSetupError(f"--use-vllm is not wired for {n} processes yet: train without it")


def _check_machine(config: TrainConfig) -> None:
    """What the machine must have: the tracker, the device, vLLM."""
    try:
        check_report_to(config.report_to)
    except TrackerUnavailableError as exc:
        raise TrainSetupError(str(exc)) from None
    try:
        resolve(config.device, config.dtype)
    except DeviceError as exc:
        raise TrainSetupError(str(exc)) from None
    if config.use_vllm and importlib.util.find_spec("vllm") is None:
        raise TrainSetupError(
            "use_vllm needs vLLM and a CUDA GPU (pip install 'trl[vllm]'; start `trl vllm-serve --model ...` "
            "for server mode). This machine has neither: train without use_vllm."
        )
