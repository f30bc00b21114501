"""What an eval run is asked to do (`EvalConfig`), checked before anything starts."""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import asdict, dataclass
from typing import Any

from envharness._deprecated import FILE_KEYS, OBSERVATION_TOKENS_FLAG
from envharness.core.declared import check_bounds, option
from envharness.core.registry import resolve_environment
from envharness.harness import run_options as shared
from envharness.harness.opponents import seated_options
from envharness.prompts import get_prompt_style


class EvalSetupError(ValueError):
    """The run cannot start as asked (bad option, a run folder in the way, no model)."""


@dataclass
class EvalConfig:
    """What `envharness eval` is asked to do; each field is its option (`core/declared.py`)."""

    out: str = shared.out(
        dataclasses.MISSING,
        "episodes.jsonl, report.html, success_rate.png, summary.json",
        "runs/eval-<time>",
        "runs/eval-%Y%m%d-%H%M%S",
    )
    #: The environment (`envharness serve NAME`): a registered name or module.path:attribute.
    env: str = shared.env()
    #: Options of the environment server (`serve NAME --option`): the server the run starts
    #: gets them, and the harness (its task list) follows them.
    env_options: dict[str, Any] = shared.env_options()
    #: Task names, split names or `all` (the environment's listing); empty: its default tasks.
    tasks: list[str] = shared.tasks()
    #: Who plays the other seats of a multi-player game, and the model's seat (`harness/opponents.py`).
    opponent: str = shared.opponent()
    seat: str = shared.seat()
    episodes: int = option(5, "episodes per task, seeds SEED..SEED+N-1 (default %(default)s)", minimum=1)
    #: A `load_backend` spec: embedded, scripted, a model dir, openai:MODEL@URL, trl-vllm:URL.
    model: str = shared.model("embedded")
    #: Where a local model runs and in which dtype (`models/device.py`): auto = the GPU in bf16
    #: when there is one, else the CPU in fp32.
    device: str = shared.device()
    dtype: str = shared.dtype(training=False)
    #: A prompt style of the environment (the same names as `envharness train --prompt`) or
    #: 'module.path:function' (a per-step builder). Empty: the environment's default.
    prompt: str = shared.prompt()
    temperature: float = shared.temperature(0.0, "sampling temperature, 0 for greedy", minimum=0)
    #: Model turns per episode (`--max-turns`; the field keeps its older name, as config.json does).
    max_steps: int = shared.max_turns(5)
    max_new_tokens: int = shared.max_new_tokens(32)
    #: Token budget of the observation text in a per-step prompt.
    observation_tokens: int = option(
        1024,
        "token budget of the observation text (e.g. a page's) in a prompt (default %(default)s)",
        flags=("--observation-tokens", OBSERVATION_TOKENS_FLAG),
        dest="observation_tokens",
        minimum=1,
    )
    history_steps: int = option(4, "earlier steps recalled in a prompt (default %(default)s)", minimum=0)
    #: The tools the model may call; empty: the environment's default tools.
    actions: list[str] = option(
        [],
        "comma-separated actions (tools) the model may use (default: the environment's)",
        type=shared.names,
    )
    concurrency: int = option(8, "episodes in flight at once (default %(default)s)", minimum=1)
    seed: int = shared.seed(0, "first episode seed; episodes use SEED..SEED+N-1")
    #: A running `envharness serve ENV`; None starts one on loopback for the run.
    env_url: str | None = shared.env_url()
    resume: bool = shared.resume("skip the episodes the run folder already holds")
    overwrite: bool = option(False, "replace the run folder's results")
    screenshots: bool = option(
        True, "do not take or keep screenshots", flags=("--no-screenshots",), dest="screenshots"
    )
    #: Waiting for a slow model counts, so this is for remote models that may hang; the env
    #: client has its own reply timeouts.
    episode_timeout_s: float | None = option(
        None,
        "seconds before an episode is failed, model time included (default: none)",
        flags=("--episode-timeout",),
        type=float,
        minimum=0,
        from_cli=lambda seconds: seconds or None,
    )
    #: None: 2 s for backends that tokenize and batch (a full batch costs little more than one
    #: request), 0.05 s for the others (remote chat APIs, scripted). A backend that batches
    #: continuously (a local transformers model) waits only while idle, at most 0.02 s.
    batch_wait_s: float | None = option(
        None,
        "seconds a batch of model calls waits for episodes still busy in the environment "
        "(default: 2 for local models, 0.05 for remote/scripted; a model that batches continuously "
        "waits only while idle, at most 0.02)",
        flags=("--batch-wait",),
        type=float,
        minimum=0,
    )
    progress: bool = option(True, "no progress bar", flags=("--no-progress",), dest="progress")
    #: None: on when the backend sees (`backend.vision`, or a vision processor), off otherwise.
    vision: bool | None = option(
        None,
        "put the observation's screenshot into every prompt (default: when the model is a vision model)",
        action=argparse.BooleanOptionalAction,
    )
    #: 448, as `envharness train` shows them to vision models: eval what was trained.
    screenshot_max_side: int | None = shared.screenshot_max_side(
        448,
        "vision: longer side of prompt screenshots in pixels, as `train` uses (default %(default)s; 0: as taken)",
        minimum=28,
    )
    #: Exact token ids (prompt_ids, completion_ids, logprobs, env_mask), as training sees them.
    record_tokens: bool = option(
        False,
        "keep each episode's exact token ids in episodes.jsonl, as training sees them (conversation prompts)",
    )
    #: torch CPU threads (`cli/options.set_threads`; not part of the run's identity).
    threads: int | None = shared.threads()
    #: A fleet instead of one server (not part of the run's identity).
    env_urls: list[str] = shared.env_urls()
    servers: int = shared.servers()
    ray_address: str | None = shared.ray_address()

    def check(self) -> Any:
        """Raise `EvalSetupError` naming the first bad setting; task names are normalized. Returns
        the environment resolved (`core.registry.ResolvedEnv`), which the run hands down."""
        try:
            env = resolve_environment(self.env, self.env_options)
            harness = env.require_harness()
        except (KeyError, ImportError, AttributeError, ValueError) as exc:
            raise EvalSetupError(f"--env {self.env}: {exc}") from None
        try:
            check_bounds(self)
        except ValueError as exc:
            raise EvalSetupError(str(exc)) from None
        if len(set(self.tasks)) != len(self.tasks):
            raise EvalSetupError("a task is listed twice")
        try:  # split names and `all` expand; `miniwob.x` -> `x`
            self.tasks = harness.task_list().expand(self.tasks or harness.default_tasks, harness.check_task)
        except ValueError as exc:
            raise EvalSetupError(str(exc)) from None
        if not self.tasks:
            raise EvalSetupError("no tasks given")
        self._seat_opponents(harness)
        self.actions = list(self.actions or harness.default_tools or [])
        try:  # the session factory knows its tools: an unknown one is refused here, before anything starts
            harness.session_factory(lambda: None, tools=self.actions)
        except (ValueError, KeyError) as exc:
            raise EvalSetupError(f"--actions: {exc}") from None
        try:
            style = get_prompt_style(self.prompt, env)
        except ValueError as exc:
            raise EvalSetupError(str(exc)) from None
        self.prompt = style.name
        if self.vision and not self.screenshots:
            raise EvalSetupError("--vision shows the model the page's screenshot: drop --no-screenshots")
        if self.record_tokens and not style.conversation:
            raise EvalSetupError(
                f"--record-tokens needs a conversation prompt style (compact, harness), not {self.prompt!r}: "
                "a per-step prompt is a fresh token sequence every step"
            )
        if self.resume and self.overwrite:
            raise EvalSetupError("--resume and --overwrite contradict each other")
        if sum(map(bool, (self.env_url, self.env_urls, self.servers))) > 1:
            raise EvalSetupError("give one of --env-url, --env-urls and --servers")
        if self.ray_address and not self.servers:
            raise EvalSetupError("--ray-address needs --servers")
        return env

    def _seat_opponents(self, harness: Any) -> None:
        """`--opponent` / `--seat`: an opponent the server plays joins the server's options."""
        running = bool(self.env_url or self.env_urls)
        try:
            options, plan = seated_options(
                harness, self.tasks, self.opponent, self.seat, self.env_options, running
            )
        except ValueError as exc:
            raise EvalSetupError(str(exc)) from None
        if plan.client_opponent is not None and harness.seat_client is None:
            raise EvalSetupError(
                f"--opponent {self.opponent}: {harness.env} cannot seat a model in the other seats; "
                f"its server plays {' or '.join(harness.server_opponents)}"
            )
        self.env_options = options

    def to_json(self) -> dict[str, Any]:
        """The run's settings as config.json holds them (under the keys it always had)."""
        data = {FILE_KEYS.get(k, k): v for k, v in asdict(self).items()}
        for key in (
            "resume",
            "overwrite",
            "progress",
            "threads",
            "env_url",
            "env_urls",
            "servers",
            "ray_address",
        ):
            data.pop(key)
        return data
