"""The groups of options the commands compose, as TRL composes
`HfArgumentParser((ScriptArguments, GRPOConfig, ModelConfig))`: each a frozen dataclass whose
fields are declared once (`run_options.py`, `core/declared.py`), with the rules about two of
its fields written once, as its `rules()` (`core.declared.check_options` runs them).

    EnvironmentArgs  which environment, its server options, tasks, opponent, seat, prompt
    ServerArgs       a running server of it (`--env-url`)
    FleetArgs        or a fleet: running servers (`--env-urls`) or N servers on Ray
    ModelArgs        the model, where it runs and in which dtype, torch's threads
    TrainingModelArgs  the same, with the dtype of a training run (mixed precision)

`EvalConfig(EnvironmentArgs, FleetArgs, ModelArgs)`, `TrainConfig(EnvironmentArgs, FleetArgs,
TrainingModelArgs)` and `SFTRunConfig(EnvironmentArgs, ServerArgs, TrainingModelArgs)` add
their command's own options; `--help` shows each group as its own section.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from envharness.core.registry import ResolvedEnv, resolve_environment
from envharness.harness import run_options as shared


@dataclass(frozen=True)
class EnvironmentArgs:
    """What is played: the environment, its server options, its tasks, who sits in the other
    seats of its games, and the prompt style."""

    group: ClassVar[str] = "environment"

    #: The environment (`envharness serve NAME`): a registered name or module.path:attribute.
    env: str = shared.env()
    #: Options of the environment server (`serve NAME --option`): the server the run starts gets
    #: them, and the task list follows them.
    env_options: dict[str, Any] = shared.env_options()
    #: Task names, split names or `all` of the environment; empty: its default tasks.
    tasks: list[str] = shared.tasks()
    #: Who plays the other seats of a multi-player game, and the model's seat (`harness/opponents.py`).
    opponent: str = shared.opponent()
    seat: str = shared.seat()
    #: A prompt style of the environment (the same names in every command) or
    #: 'module.path:function'; empty: the environment's default for the command.
    prompt: str = shared.prompt()

    def resolve_env(self) -> ResolvedEnv:
        """The environment with these server options, looked up once (ValueError in words)."""
        try:
            env = resolve_environment(self.env, self.env_options)
            env.require_harness()
        except (KeyError, ImportError, AttributeError, ValueError) as exc:
            raise ValueError(f"--env {self.env}: {exc}") from None
        return env


@dataclass(frozen=True)
class ServerArgs:
    """Where episodes are played: a running server, or (None) one started on loopback."""

    group: ClassVar[str] = "servers"

    env_url: str | None = shared.env_url()


@dataclass(frozen=True)
class FleetArgs(ServerArgs):
    """Or several servers: running ones, or N started on Ray."""

    env_urls: list[str] = shared.env_urls()
    servers: int = shared.servers()
    ray_address: str | None = shared.ray_address()

    def rules(self) -> None:
        one_fleet(self.env_url, self.env_urls, self.servers, self.ray_address)


def one_fleet(env_url: str | None, env_urls: Any, servers: int, ray_address: str | None = None) -> None:
    """ValueError unless at most one place to play is given, and Ray only for a fleet it starts."""
    if sum(map(bool, (env_url, env_urls, servers))) > 1:
        raise ValueError("give one of --env-url, --env-urls and --servers")
    if ray_address and not servers:
        raise ValueError("--ray-address needs --servers")


@dataclass(frozen=True)
class ModelArgs:
    """The model, where it runs (`models/device.py`) and torch's CPU threads."""

    group: ClassVar[str] = "model"

    #: A `load_backend` spec: embedded, tiny, a model directory or hub id, openai:MODEL@URL, ...
    model: str = shared.model("embedded")
    #: auto = the GPU in bf16 when there is one, else the CPU in fp32.
    device: str = shared.device()
    dtype: str = shared.dtype(training=False)
    #: On a machine shared with other jobs, 1 thread avoids OpenMP threads waiting on each other.
    threads: int | None = shared.threads()


@dataclass(frozen=True)
class TrainingModelArgs(ModelArgs):
    """The model of a training run: bf16/fp16 run as mixed precision over float32 weights."""

    dtype: str = shared.dtype(training=True)
