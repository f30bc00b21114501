"""One GRPO run on an environment's tasks (MiniWoB by default), shared by `envharness train`
and the learning experiments.

`train(TrainConfig(...))` loads the model, starts the environment's server on loopback (unless
given one), trains with TRL's `GRPOTrainer` through `build_env_rollout_func`, and
leaves in `output_dir`: checkpoints, the final model, `episodes.jsonl` (every episode of
every step, in the shared records format), `train_log.jsonl` (TRL's logs) and
`reward_curve.png`. Defaults fit a 2-core CPU: small groups, short completions, one turn.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Union

from envharness.core.client_pool import ClientPool
from envharness.harness.types import HarnessRunLimits
from envharness.curriculum import make_sampler
from envharness.integrations.trl.curriculum import CurriculumRollout
from envharness.integrations.trl.mix import mix_prompt
from envharness.integrations.trl.rollout import build_env_rollout_func, task_dataset, task_prompt
from envharness.integrations.trl.errors import TrainSetupError
from envharness.integrations.trl import loss_memory
from envharness.integrations.trl.rewards import REWARD_FUNCS
from envharness.integrations.trl.tracking import (
    TrackerUnavailableError,
    check_report_to,
    grpo_tracking_options,
)
from envharness.prompts import get_prompt_style, opening_builder
from envharness.prompts.text import tokenizer_counter
from envharness.core.registry import DEFAULT_ENV, ResolvedEnv, resolve_environment, resolved


@dataclass
class TrainConfig:
    #: Task names, split names or `all` of the environment; empty: its first default task.
    tasks: list[str] = field(default_factory=list)
    #: The environment (`envharness serve NAME`): a registered name or module.path:attribute.
    env: str = DEFAULT_ENV
    #: Options of the environment server (`serve NAME --option`): the server train starts gets
    #: them, and the task list follows them (e.g. the browser's ``tasks``).
    env_options: dict[str, Any] = field(default_factory=dict)
    #: "embedded" (SmolLM2-135M-Instruct, offline), "tiny" (random, for tests), or a path / hub id.
    #: A vision-language model directory (or "tiny-vlm[:qwen2-vl|qwen3-vl]") trains on screenshots
    #: with `VisionGRPOTrainer` (integrations/trl/vision.py).
    model: str = "embedded"
    output_dir: str = "runs/train"
    lora: bool = False
    lora_rank: int = 16
    max_steps: int = 30
    #: Stop after this many minutes of training (checked after each step).
    minutes: float | None = None
    num_generations: int = 4
    #: Prompts (task pages) per step; the batch is groups_per_step * num_generations episodes.
    groups_per_step: int = 2
    #: Episodes per loss pass (forward and backward; 0: one group). The step's gradient is the
    #: same, summed over the passes; memory follows this, not the whole batch (loss_memory.py).
    micro_batch: int = 0
    #: Recompute each layer in the backward pass instead of keeping its activations (slower,
    #: about half the memory of a loss pass).
    gradient_checkpointing: bool = False
    max_completion_length: int = 16
    max_turns: int = 1
    temperature: float = 1.0
    learning_rate: float = 2e-5
    beta: float = 0.0
    loss_type: str = "dapo"
    rewards: list[str] = field(default_factory=lambda: ["success"])
    save_steps: int = 10
    seed: int = 0
    #: URL of a running `envharness serve ENV`; None starts one on loopback.
    env_url: str | None = None
    #: A prompt style of the environment (the same names as `envharness eval --prompt`); empty:
    #: the environment's training style (the browser's "compact": goal + named elements + one
    #: worked example, which small models can follow; "harness" the seed tutorial's; "default"
    #: eval's per-step prompt, one turn only).
    prompt: str = ""
    use_vllm: bool = False
    #: torch CPU threads (None: torch's default). On a machine shared with other jobs, 1 thread
    #: avoids OpenMP threads waiting on each other (much faster generation on a busy CPU).
    threads: int | None = None
    #: Experiment tracker: "none", "tensorboard", "trackio" (local) or "wandb" (see tracking.py).
    report_to: str = "none"
    #: A fleet instead of one server: running servers' urls, or N servers on Ray
    #: (`ray_address`: the cluster; None starts Ray here).
    env_urls: list[str] = field(default_factory=list)
    servers: int = 0
    ray_address: str | None = None
    #: An agent that owns its loop (`module:function` or `path/to/agent.py:function`):
    #: trained through the policy endpoint instead of the harness's own loop.
    agent: str | None = None
    #: Seconds one agent may take for its rollout; past it, it is cancelled and its row masked,
    #: counted and named in the log (never a reward of 0). None: no limit.
    agent_timeout_s: float | None = 600.0
    # -- vision policies (integrations/trl/vision.py) --
    #: Longest side of the screenshots shown to a vision model, in pixels.
    screenshot_max_side: int | None = 448
    #: Page text beside the screenshot: "elements", "axtree" or "none".
    vision_page_text: str = "elements"
    #: Continue from the latest checkpoint in `output_dir` (see `integrations/trl/resume.py`).
    resume: bool = False
    #: Skip TRL's loss forward/backward on a batch whose advantages are all 0 (exact with
    #: beta 0 and no entropy bonus: that loss and its gradient are 0); see no_signal.py.
    skip_no_signal: bool = True
    #: Where training runs (`models/device.py`: auto = the GPU when there is one). bf16/fp16
    #: run as mixed precision over float32 weights (`precision.py`).
    device: str = "auto"
    dtype: str = "auto"
    #: Correct the gap between the sampled and the training forward's logprobs with truncated
    #: importance sampling (`logprob_agreement.py`); the gap is logged either way.
    logprob_correction: bool = True
    #: Which task each group plays: "uniform" (the tasks in turn) or "signal" (weighted by p(1-p)
    #: of its recent success, at least `curriculum_floor`; see envharness/curriculum).
    curriculum: str = "uniform"
    curriculum_floor: float = 0.02
    #: Every N steps (0: never), greedy episodes on held-out seeds 0..eval_episodes-1 of every
    #: trained task and of `eval_tasks` (transfer: never trained); the best model goes to best/.
    eval_every: int = 0
    eval_tasks: list[str] = field(default_factory=list)
    eval_episodes: int = 8
    #: A mix of environments, {env: [tasks]} (`mix.py`): one server and one rollout each, one
    #: batch drawn across them; `env` and `tasks` then follow from it (tasks named env:task).
    mix: dict[str, list[str]] = field(default_factory=dict)


def _mix_envs(config: TrainConfig) -> dict[str, Any]:
    """Each environment of the mix, resolved once for the run."""
    envs = {}
    for name in config.mix:
        try:
            envs[name] = resolve_environment(name, {})
            envs[name].require_harness()
        except (KeyError, ImportError, AttributeError, ValueError) as exc:
            raise TrainSetupError(f"--mix {name}: {exc}") from None
    return envs


def _check_mix(config: TrainConfig, envs: dict[str, Any]) -> None:
    """A mix's environments and tasks checked; `config.tasks` becomes their env:task names (and
    `config.eval_tasks`, given as env:task, is checked against the mix's environments)."""
    from envharness.integrations.trl.mix import mix_key, split_key

    refused = {
        "--tasks": config.tasks,
        "--agent": config.agent,
        "--env-url": config.env_url,
        "--env-urls/--servers": config.env_urls or config.servers,
        "--prompt": config.prompt,
        "--env-option": config.env_options,
    }
    given = [name for name, value in refused.items() if value]
    if given:
        raise TrainSetupError(
            f"--mix trains with each environment's own server and prompt; leave out {', '.join(given)}"
        )
    unknown = [r for r in config.rewards if r not in REWARD_FUNCS]
    if unknown:
        raise TrainSetupError(
            f"--mix: reward(s) {', '.join(unknown)} are one environment's; a mix takes {', '.join(REWARD_FUNCS)}"
        )
    keys = []
    for name, tasks in config.mix.items():
        harness = envs[name].require_harness()
        try:
            keys += [mix_key(name, t) for t in harness.task_list().expand(tasks, harness.check_task)]
        except (ValueError, KeyError) as exc:
            raise TrainSetupError(f"--mix {name}: {exc}") from None
    config.tasks = keys
    transfer = []
    for key in config.eval_tasks:  # env:task, of an environment of the mix (its server is there)
        name, task = split_key(key)
        if name not in config.mix or not task:
            raise TrainSetupError(
                f"--eval-tasks {key!r}: with --mix, name ENV:TASK of one of {', '.join(config.mix)}"
            )
        harness = envs[name].require_harness()
        try:
            transfer += [mix_key(name, t) for t in harness.task_list().expand([task], harness.check_task)]
        except (ValueError, KeyError) as exc:
            raise TrainSetupError(f"--eval-tasks {key}: {exc}") from None
    config.eval_tasks = transfer


@contextlib.contextmanager
def mix_clients(envs: dict[str, Any]) -> Iterator[dict[str, Callable[[], Any]]]:
    """A client factory per environment of the mix, each on a server of its own (`env_clients`)."""
    with contextlib.ExitStack() as stack:
        yield {name: stack.enter_context(env_clients(env)) for name, env in envs.items()}


def _mix_rollout(
    config: TrainConfig,
    envs: dict[str, Any],
    clients: dict[str, Callable[[], Any]],
    tokenizer: Any,
    records: Any,
    **kwargs: Any,
) -> Any:
    """One rollout over the mix: each environment's own rollout, prompt and parser (`mix.py`)."""
    from envharness.integrations.trl.mix import mixed_rollout

    rollouts = {}
    for name, tasks in config.mix.items():
        env = envs[name]
        rollouts[name] = build_env_rollout_func(
            env,
            clients[name],
            default_task=tasks[0],
            records=records,
            session_factory_kwargs=prompt_options(_train_prompt(env), tokenizer, env),
            **kwargs,
        )
    rollout = mixed_rollout(rollouts)
    rollout.records = records  # type: ignore[attr-defined]
    return rollout


def _held_out(config: TrainConfig, tokenizer: Any, make_client: Any, out: Path, is_vlm: bool) -> list[Any]:
    """The held-out evaluation callback (`held_out.py`) when ``eval_every`` asks for one."""
    if not config.eval_every:
        return []
    if is_vlm or config.agent:
        raise TrainSetupError(
            "--eval-every evaluates text policies played by the harness (not --agent, not vision)"
        )
    from envharness.integrations.trl.held_out import HeldOutEvaluation

    def evaluate_task(model: Any, task: str, seeds: list[int]) -> float:
        if not config.mix:
            return evaluate(model, tokenizer, make_client, config, seeds, task=task, temperature=0.0)
        from envharness.integrations.trl.mix import split_key

        name, env_task = split_key(task)  # a mix: its environment's server, prompt and tasks
        one_env = dataclasses.replace(config, env=name, env_options={}, prompt="", mix={})
        return evaluate(model, tokenizer, make_client[name], one_env, seeds, task=env_task, temperature=0.0)

    return [
        HeldOutEvaluation(
            evaluate_task,
            every=config.eval_every,
            tasks=config.tasks,
            transfer=config.eval_tasks,
            episodes=config.eval_episodes,
            out=out,
            tokenizer=tokenizer,
        )
    ]


def _sampler_options(config: TrainConfig) -> dict[str, Any]:
    return {"floor": config.curriculum_floor} if config.curriculum == "signal" else {}


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


def load_model(spec: str, placement: Any = None) -> tuple[Any, Any]:
    """(model, tokenizer) for `TrainConfig.model`, with float32 weights on `placement`'s device
    (default: the CPU; the trainer's mixed precision is the placement's dtype, see precision.py)."""
    from envharness.integrations.trl.precision import master_weights
    from envharness.models import embedded
    from envharness.models.device import resolve

    placement = placement or resolve("cpu")
    if spec == "embedded":
        model, tokenizer = embedded.load_model()
    elif spec == "tiny":
        model, tokenizer = embedded.tiny_test_model()
    else:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        try:  # float32 master weights even from a bf16 checkpoint (as hub checkpoints are saved)
            model, tokenizer = (
                AutoModelForCausalLM.from_pretrained(spec, dtype=torch.float32),
                AutoTokenizer.from_pretrained(spec),
            )
        except (OSError, ValueError) as exc:  # the hub library's long story, cut to its first line
            raise TrainSetupError(
                f"cannot load model {spec!r}: {str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__}"
            ) from None
    return master_weights(model, placement), tokenizer


#: An environment by name, or as the run resolved it (`core.registry.ResolvedEnv`): the entry
#: point resolves it once, the helpers below take either.
EnvRef = Union[str, ResolvedEnv, None]


def prompt_options(style: str, tokenizer: Any = None, env: EnvRef = None) -> dict[str, Any]:
    """Session factory options for a prompt style of the environment: the opening messages
    `envharness eval --prompt STYLE` also gives (page text budgets counted with `tokenizer`,
    as eval counts them with the model's)."""
    chosen = _prompt_style(style, env)
    options: dict[str, Any] = {
        "prompt_builder": opening_builder(chosen, count_tokens=tokenizer_counter(tokenizer))
    }
    if chosen.observation_text is not None:  # how later turns show the page (compact: its elements)
        options["observation_text"] = chosen.observation_text
    return options


def loss_passes(config: TrainConfig) -> tuple[int, int]:
    """(episodes per loss pass, passes per step) of the configured batch."""
    batch = config.num_generations * config.groups_per_step
    micro = min(config.micro_batch or config.num_generations, batch)
    if micro < 1 or batch % micro:
        raise TrainSetupError(
            f"--micro-batch {config.micro_batch} must divide the batch of {batch} episodes "
            f"(--num-generations {config.num_generations} x --groups-per-step {config.groups_per_step})"
        )
    return micro, batch // micro


def check_loss_fits_upfront(config: TrainConfig, model: Any, placement: Any) -> None:
    """Refuse before any episode a loss pass that cannot fit even with no prompt at all
    (`max_turns` full completions); each real pass is checked again at its real size."""
    from types import SimpleNamespace

    from envharness.integrations.trl.precision import trainer_precision

    micro, _ = loss_passes(config)
    width = config.max_turns * config.max_completion_length
    loss_memory.check_pass(
        loss_memory.ModelShape.of(model),
        micro,
        width,
        width,
        placement.device,
        activation_bytes=loss_memory.activation_bytes(SimpleNamespace(**trainer_precision(placement))),
        checkpointing=config.gradient_checkpointing,
    )


def grpo_config(config: TrainConfig, **overrides: Any) -> Any:
    """TRL's `GRPOConfig` for a run on the configured device (fp32 on a CPU), one generation per
    optimizer step and its loss in passes of `micro_batch` episodes."""
    from trl import GRPOConfig

    from envharness.integrations.trl.precision import trainer_precision
    from envharness.models.device import resolve

    micro, passes = loss_passes(config)
    options: dict[str, Any] = dict(
        output_dir=str(config.output_dir),
        **trainer_precision(resolve(config.device, config.dtype)),
        gradient_checkpointing=config.gradient_checkpointing,
        max_steps=config.max_steps if config.minutes is None else 1_000_000,
        # one generation per optimizer step, its batch split into `passes` loss passes whose
        # gradients add up to the whole batch's (TRL normalizes each over the whole batch)
        per_device_train_batch_size=micro,
        gradient_accumulation_steps=passes,
        steps_per_generation=passes,
        num_generations=config.num_generations,
        max_completion_length=config.max_completion_length,
        temperature=config.temperature,
        learning_rate=config.learning_rate,
        lr_scheduler_type="constant",
        warmup_steps=0,
        beta=config.beta,
        loss_type=config.loss_type,
        logging_steps=1,
        save_strategy="steps",
        save_steps=config.save_steps,
        save_total_limit=2,
        **grpo_tracking_options(config.report_to, config.output_dir),
        seed=config.seed,
        use_vllm=config.use_vllm,
        dataloader_num_workers=0,
        disable_tqdm=config.minutes is not None,  # no step count to show; ProgressCallback prints each step
    )
    options.update(overrides)
    return GRPOConfig(**options)


def train_server_options(env: EnvRef = DEFAULT_ENV) -> dict[str, Any]:
    """The options `train` starts its own server of `env` with (`EnvHarness.train_server_options`)."""
    return dict(resolved(env).require_harness().train_server_options)


@contextlib.contextmanager
def env_clients(
    env: EnvRef = DEFAULT_ENV,
    env_url: str | None = None,
    *,
    env_urls: list[str] | None = None,
    servers: int = 0,
    ray_address: str | None = None,
    env_options: dict[str, Any] | None = None,
) -> Iterator[Callable[[], Any]]:
    """A factory of pooled clients of `env` (one lease per episode) on `env_url`, or on a server
    started on loopback for the duration of the block; with `env_urls` or `servers`, a fleet
    router spreading the episodes over many servers (`envharness.fleet`)."""
    from envharness.core.client import sync_client_class

    env = resolved(env, env_options)
    options = {**train_server_options(env), **(env_options or {})}
    if env_urls or servers:
        from envharness.fleet.start import open_fleet

        with open_fleet(
            env.name, env_urls=env_urls or [], servers=servers, ray_address=ray_address, env_options=options
        ) as router:
            yield router
        return
    with contextlib.ExitStack() as stack:
        if not env_url:
            from envharness.core.launchers import LocalServer

            env_url = stack.enter_context(LocalServer(env.name, **options)).base_url
        pool = ClientPool(functools.partial(sync_client_class(env.client_class), base_url=env_url))
        stack.callback(pool.close)
        yield pool


@contextlib.contextmanager
def agent_env_url(
    env: EnvRef, env_url: str | None, env_options: dict[str, Any] | None = None
) -> Iterator[str]:
    """The URL of a server of `env` (with `/mcp`) for agents that play through MCP: `env_url`,
    or a server started on loopback for the duration of the block."""
    if env_url:
        yield env_url
        return
    from envharness.core.launchers import LocalServer

    env = resolved(env, env_options)
    with LocalServer(env.name, **{**train_server_options(env), **(env_options or {})}) as server:
        yield server.base_url


def _train_prompt(env: EnvRef) -> str:
    return resolved(env).require_harness().train_prompt


def reward_functions(env: EnvRef = DEFAULT_ENV) -> dict[str, Callable[..., Any]]:
    """The rewards `--rewards` picks from: the generic ones (success, sum, mean, max of the
    environment's own reward) and the environment's shaped ones (`EnvHarness.reward_functions`)."""
    from envharness.core.registry import load_target

    harness = resolved(env).require_harness()
    shaped = load_target(harness.reward_functions) if harness.reward_functions else {}
    return {**REWARD_FUNCS, **shaped}


def _prompt_style(style: str, env: EnvRef = None) -> Any:
    try:
        return get_prompt_style(style, env)
    except ValueError as exc:
        raise TrainSetupError(str(exc)) from None


def check_model_spec(spec: str) -> None:
    """Refuse, in words, a model that cannot be loaded: a missing directory, one without
    `config.json`, or a name that is neither a path nor a hub id."""
    if spec in ("embedded", "tiny", "embedded-vlm") or spec.split(":")[0] == "tiny-vlm":
        return
    path = Path(spec).expanduser()
    if path.is_dir():
        if not any((path / name).is_file() for name in ("config.json", "adapter_config.json")):
            raise TrainSetupError(f"--model {spec}: not a model directory (no config.json in it)")
        return
    if path.exists():
        raise TrainSetupError(f"--model {spec}: a file, not a model directory")
    if spec.startswith(("/", ".", "~")) or spec.count("/") > 1 or "" in spec.split("/"):
        raise TrainSetupError(
            f"--model {spec}: no model directory there "
            "(use 'embedded', 'tiny', a model directory or a hub id org/name)"
        )


def _check(
    config: TrainConfig, env: Any = None, *, model_given: bool = False, mix_envs: dict[str, Any] | None = None
) -> Any:
    """Every setting checked before anything slow starts; returns the checkpoint to resume from."""
    import importlib.util

    from envharness.integrations.trl.resume import plan_resume

    if not model_given:
        check_model_spec(config.model)
    try:
        env = env or resolve_environment(config.env, config.env_options)
        harness = env.require_harness()
        if config.mix:
            _check_mix(config, mix_envs or _mix_envs(config))
        else:
            config.tasks = harness.task_list().expand(
                config.tasks or harness.default_tasks[:1], harness.check_task
            )
    except (ValueError, KeyError, ImportError) as exc:
        raise TrainSetupError(str(exc)) from None
    if not config.tasks:
        raise TrainSetupError("no tasks given")
    try:
        make_sampler(config.curriculum, config.tasks, **_sampler_options(config))
    except ValueError as exc:
        raise TrainSetupError(f"--curriculum: {exc}") from None
    loss_passes(config)
    if config.eval_every < 0 or config.eval_episodes < 1:
        raise TrainSetupError("--eval-every must be >= 0 and --eval-episodes >= 1")
    if config.eval_tasks and not config.mix:
        try:
            config.eval_tasks = harness.task_list().expand(config.eval_tasks, harness.check_task)
        except (ValueError, KeyError) as exc:
            raise TrainSetupError(f"--eval-tasks: {exc}") from None
    config.prompt = config.prompt or harness.train_prompt
    if config.env_url and not config.env_url.startswith(("http://", "https://")):
        raise TrainSetupError(f"--env-url must be an http(s) URL, got {config.env_url!r}")
    known = reward_functions(env)
    unknown = [r for r in config.rewards if r not in known]
    if unknown:
        raise TrainSetupError(f"unknown reward(s) {unknown}; choose from {sorted(known)}")
    if not _prompt_style(config.prompt, env).conversation and config.max_turns > 1:
        raise TrainSetupError(
            f"prompt style {config.prompt!r} builds a fresh prompt every step, so turns after the first are not one "
            "token sequence: train it with max_turns=1, or use a conversation style (compact, harness)"
        )
    try:
        check_report_to(config.report_to)
    except TrackerUnavailableError as exc:
        raise TrainSetupError(str(exc)) from None
    from envharness.models.device import DeviceError, resolve

    try:
        resolve(config.device, config.dtype)
    except DeviceError as exc:
        raise TrainSetupError(str(exc)) from None
    if config.use_vllm and importlib.util.find_spec("vllm") is None:
        raise TrainSetupError(
            "use_vllm needs vLLM and a CUDA GPU (pip install 'trl[vllm]'; start `trl vllm-serve --model ...` "
            "for server mode). This machine has neither: train without use_vllm."
        )
    try:
        return plan_resume(config.output_dir, asdict(config), config.resume)
    except ValueError as exc:
        raise TrainSetupError(str(exc)) from None


def train(
    config: TrainConfig,
    *,
    model: Any = None,
    tokenizer: Any = None,
    client_factory: Callable[[], Any] | None = None,
    callbacks: list[Any] = (),  # type: ignore[assignment]
    **grpo_overrides: Any,
) -> TrainResult:
    """Run GRPO as configured; see the module docstring for what lands in `output_dir`."""
    from trl import GRPOTrainer

    from envharness.harness.records import EpisodeRecordWriter
    from envharness.integrations.trl.callbacks import ProgressCallback, TimeBudgetCallback, plot_reward_curve
    from envharness.integrations.trl.resume import StepBoundary, save_finished_steps, trim_to_step
    from envharness.integrations.trl.logprob_agreement import measure_and_correct
    from envharness.integrations.trl.no_signal import skip_batches_without_signal
    from envharness.integrations.trl.precision import check_model_device, master_weights
    from envharness.models.device import resolve
    from envharness.integrations.trl.exploration import GroupStats
    from envharness.integrations.trl.step_timing import StepTimer

    from envharness.integrations.trl import vision as vision_grpo

    mix_envs = _mix_envs(config)  # {} without a mix
    if mix_envs:  # the first environment of the mix stands for the run where one is needed
        config.env = next(iter(mix_envs))
    try:  # the environment, looked up once for the whole run
        env = resolve_environment(config.env, config.env_options)
        env.require_harness()
    except (KeyError, ImportError, AttributeError, ValueError) as exc:
        raise TrainSetupError(f"--env {config.env}: {exc}") from None
    is_vlm = (
        vision_grpo.is_vision_spec(config.model) if model is None else hasattr(tokenizer, "image_processor")
    )
    if is_vlm and config.prompt not in (
        "vision",
        "",
        "compact",
    ):  # "" / compact: the browser's training default
        raise TrainSetupError(
            f"a vision-language model trains on --prompt vision (screenshots in every turn), not {config.prompt!r}"
        )
    if not is_vlm and not config.mix:  # a mix plays each environment's own training prompt
        config.prompt = config.prompt or _train_prompt(env)
    if not is_vlm and _prompt_style(config.prompt, env).vision:
        raise TrainSetupError(
            f"--prompt vision shows screenshots: {config.model!r} is not a vision-language model"
        )
    if is_vlm:
        config.prompt = (
            "vision"  # recorded in train_config.json: `eval --prompt vision` plays what was trained
        )
    checkpoint = _check(config, env, model_given=model is not None, mix_envs=mix_envs)
    if config.threads:
        import torch

        torch.set_num_threads(config.threads)
    out = Path(config.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    if checkpoint is not None:  # the steps after the checkpoint will be played again
        trim_to_step(out, checkpoint.step)
    (out / "train_config.json").write_text(json.dumps(asdict(config), indent=2))
    placement = resolve(config.device, config.dtype)
    if model is None:
        if is_vlm:
            model, tokenizer = vision_grpo.load_vision_model(config.model)
            model = master_weights(model, placement)
        else:
            model, tokenizer = load_model(config.model, placement)
    check_loss_fits_upfront(config, model, placement)
    text_tokenizer = getattr(tokenizer, "tokenizer", tokenizer)  # a VLM's processor holds one
    if text_tokenizer.pad_token is None:
        text_tokenizer.pad_token = text_tokenizer.eos_token

    if config.agent:  # the agent plays through the server's /mcp: it needs the server's URL
        environment = agent_env_url(env, config.env_url, config.env_options)
    elif config.mix:
        environment = mix_clients(mix_envs)
    else:
        environment = (
            contextlib.nullcontext(client_factory)
            if client_factory
            else env_clients(
                env,
                config.env_url,
                env_urls=config.env_urls,
                servers=config.servers,
                ray_address=config.ray_address,
                env_options=config.env_options,
            )
        )
    with environment as make_client:
        records_path = out / "episodes.jsonl"
        timer = StepTimer()  # logs time/generate_s, time/env_s, time/train_s per step
        groups = GroupStats()  # logs all-failed / all-succeeded groups, their errors, sampled_nll per step
        if config.agent:
            from envharness.integrations.trl.agent_rollout import build_agent_rollout_func
            from envharness.policy.agents import load_agent

            rollout_func = build_agent_rollout_func(
                load_agent(config.agent),
                env_url=make_client,
                backend_factory=timer.backend_factory,
                agent_kwargs={"max_turns": config.max_turns},
                timeout_s=config.agent_timeout_s,
                records=EpisodeRecordWriter(records_path, append=checkpoint is not None),
            )
        elif config.mix:
            rollout_func = _mix_rollout(
                config,
                mix_envs,
                make_client,
                tokenizer,
                EpisodeRecordWriter(records_path, append=checkpoint is not None),
                limits=HarnessRunLimits(max_turns=config.max_turns),
                backend_factory=timer.backend_factory,
            )
        elif is_vlm:
            rollout_func = vision_grpo.build_vision_rollout_func(
                make_client,
                env=env,
                default_task=config.tasks[0],
                limits=HarnessRunLimits(max_turns=config.max_turns),
                records=EpisodeRecordWriter(records_path, append=checkpoint is not None),
                backend_factory=functools.partial(
                    timer.backend_factory, inner_factory=vision_grpo.vision_trainer_backend
                ),
                vision=vision_grpo.VisionPromptConfig(
                    max_side=config.screenshot_max_side, page_text=config.vision_page_text
                ),
            )
        else:
            rollout_func = build_env_rollout_func(
                env,
                make_client,
                default_task=config.tasks[0],
                limits=HarnessRunLimits(max_turns=config.max_turns),
                records=EpisodeRecordWriter(records_path, append=checkpoint is not None),
                session_factory_kwargs=prompt_options(config.prompt, tokenizer, env),
                backend_factory=timer.backend_factory,
            )
        curriculum = CurriculumRollout(
            make_sampler(config.curriculum, config.tasks, seed=config.seed, **_sampler_options(config)),
            prompt_for=mix_prompt if config.mix else task_prompt,
        )
        # one prompt per group; with a time budget, TRL cycles through this many pages
        num_prompts = config.groups_per_step * (config.max_steps if config.minutes is None else 500)
        trainer = (vision_grpo.VisionGRPOTrainer if is_vlm else GRPOTrainer)(
            model=model,
            processing_class=tokenizer,
            reward_funcs=[reward_functions(env)[r] for r in config.rewards],
            args=grpo_config(config, **grpo_overrides),
            train_dataset=task_dataset(config.tasks, num_prompts, seed=config.seed),
            rollout_func=curriculum.wrap(groups.wrap(timer.wrap(rollout_func))),
            peft_config=_lora_config(config) if config.lora else None,
            callbacks=[
                timer.callback(),
                groups.callback(),
                curriculum.callback(),
                *_held_out(config, tokenizer, make_client, out, is_vlm),
                ProgressCallback(out / "train_log.jsonl", append=checkpoint is not None),
                *([TimeBudgetCallback(config.minutes)] if config.minutes else []),
                *callbacks,
            ],
        )
        boundary = StepBoundary()
        trainer.add_callback(boundary)
        check_model_device(trainer.model, placement)
        loss_memory.guard_loss_memory(trainer)  # inside the skip: skipped passes cost nothing
        if config.skip_no_signal:
            skip_batches_without_signal(trainer)
        measure_and_correct(
            trainer, correct=config.logprob_correction
        )  # after the skip: it knows skipped batches
        started = time.perf_counter()
        try:
            trainer.train(resume_from_checkpoint=str(checkpoint.path) if checkpoint else None)
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM: keep the finished steps, then stop
            save_finished_steps(trainer, boundary)
            raise
        finally:
            rollout_func.records.close()
            getattr(rollout_func, "close", lambda: None)()  # an agent's policy endpoint
        seconds = time.perf_counter() - started

    final_dir = out / "final"
    trainer.save_model(str(final_dir))
    tokenizer.save_pretrained(str(final_dir))
    history = list(trainer.state.log_history)
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
        trainer.model, out, final_dir, records_path, curve, trainer.state.global_step, seconds, history
    )


def evaluate(
    model: Any,
    tokenizer: Any,
    client_factory: Callable[[], Any],
    config: TrainConfig,
    seeds: list[int],
    *,
    records: str | Path | None = None,
    task: str | None = None,
    temperature: float | None = None,
) -> float:
    """Success rate of `model` on `task` (default `config.tasks[0]`) over `seeds`, played exactly
    as in training (same prompt, turns, token budget; sampled at the training temperature unless
    `temperature` is given: 0 is greedy)."""
    from envharness.harness import BatchingModelStep, run_coroutine_sync, run_episodes, write_records
    from envharness.integrations.trl.rollout import TaskPromptSessionFactory, episode_success
    from envharness.models.transformers_backend import TransformersBackend

    task = task or config.tasks[0]
    env = resolve_environment(config.env, config.env_options)
    harness = env.require_harness()
    style = config.prompt or harness.train_prompt
    factory = TaskPromptSessionFactory(
        harness.session_factory(client_factory, default_task=task, **prompt_options(style, tokenizer, env))
    )
    batcher = BatchingModelStep(
        TransformersBackend(model, tokenizer), tool_call_parser=harness.tool_call_parser, send_tools=False
    )
    sampling = {
        "temperature": config.temperature if temperature is None else temperature,
        "max_tokens": config.max_completion_length,
    }
    results = run_coroutine_sync(
        run_episodes(
            factory,
            [task] * len(seeds),
            seeds=seeds,
            backend=batcher,
            limits=HarnessRunLimits(max_turns=config.max_turns, sampling=sampling),
            max_concurrency=8,
        )
    )
    if records is not None:
        write_records(records, results)
    failed = [r.error for r in results if r.error]
    if failed:
        raise RuntimeError(f"{len(failed)} of {len(results)} evaluation episodes failed, e.g. {failed[0]}")
    return sum(map(episode_success, results)) / len(results)


def _lora_config(config: TrainConfig) -> Any:
    from peft import LoraConfig

    return LoraConfig(
        r=config.lora_rank,
        lora_alpha=2 * config.lora_rank,
        lora_dropout=0.0,
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        task_type="CAUSAL_LM",
    )
