"""What an eval run is asked to do (`EvalConfig`), checked before anything starts."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from envharness.core.registry import DEFAULT_ENV


class EvalSetupError(ValueError):
    """The run cannot start as asked (bad option, a run folder in the way, no model)."""


@dataclass
class EvalConfig:
    out: str
    #: The environment (`envharness serve NAME`): a registered name or module.path:attribute.
    env: str = DEFAULT_ENV
    #: Options of the environment server (`serve NAME --option`): the server the run starts
    #: gets them, and the harness (its task list) follows them, e.g. the browser's ``tasks``.
    env_options: dict[str, Any] = field(default_factory=dict)
    #: Task names, split names or `all` (the environment's listing); empty: its default tasks.
    tasks: list[str] = field(default_factory=list)
    episodes: int = 5
    #: A `load_backend` spec: embedded, scripted, a model dir, openai:MODEL@URL, trl-vllm:URL.
    model: str = "embedded"
    #: Where a local model runs and in which dtype (`models/device.py`): auto = the GPU in bf16
    #: when there is one, else the CPU in fp32.
    device: str = "auto"
    dtype: str = "auto"
    #: A prompt style of the environment ('default', 'compact', 'harness', ...: the same
    #: names as `envharness train --prompt`) or 'module.path:function' (a per-step builder).
    #: Empty: the environment's default.
    prompt: str = ""
    temperature: float = 0.0
    max_steps: int = 5
    max_new_tokens: int = 32
    axtree_tokens: int = 1024
    history_steps: int = 4
    #: The tools the model may call; empty: the environment's default tools.
    actions: list[str] = field(default_factory=list)
    concurrency: int = 8
    seed: int = 0
    #: A running `envharness serve ENV`; None starts one on loopback for the run.
    env_url: str | None = None
    resume: bool = False
    overwrite: bool = False
    screenshots: bool = True
    #: Fail an episode that runs longer (None: never). Waiting for a slow model counts, so
    #: this is for remote models that may hang; the env client has its own reply timeouts.
    episode_timeout_s: float | None = None
    #: How long a batch of model calls waits for episodes still busy in the browser. None:
    #: 2 s for backends that tokenize and batch (a full batch costs little more than one
    #: request), 0.05 s for the others (remote chat APIs, scripted).
    batch_wait_s: float | None = None
    progress: bool = True
    #: Vision policies: the page's screenshot goes into the latest user turn of every prompt.
    #: None: on when the backend sees (`backend.vision`, or a vision processor), off otherwise.
    vision: bool | None = None
    #: Shrink prompt screenshots so their longer side is at most this many pixels (None: as
    #: taken). 448, as `envharness train` shows them to vision models: eval what was trained.
    screenshot_max_side: int | None = 448
    #: Keep each episode's exact token ids (prompt_ids, completion_ids, logprobs, env_mask) in
    #: episodes.jsonl, as training sees them (conversation prompt styles only).
    record_tokens: bool = False
    #: A fleet instead of one server: running servers' urls, or N servers on Ray
    #: (`ray_address`: the cluster; None starts Ray here). Not part of the run's identity.
    env_urls: list[str] = field(default_factory=list)
    servers: int = 0
    ray_address: str | None = None

    def check(self) -> Any:
        """Raise `EvalSetupError` naming the first bad setting; task names are normalized. Returns
        the environment resolved (`core.registry.ResolvedEnv`), which the run hands down."""
        from envharness.core.registry import resolve_environment

        try:
            env = resolve_environment(self.env, self.env_options)
            harness = env.require_harness()
        except (KeyError, ImportError, AttributeError, ValueError) as exc:
            raise EvalSetupError(f"--env {self.env}: {exc}") from None
        positive = ("episodes", "max_steps", "max_new_tokens", "axtree_tokens", "concurrency")
        for name in positive:
            if getattr(self, name) < 1:
                raise EvalSetupError(f"--{name.replace('_', '-')} must be at least 1")
        if self.history_steps < 0 or self.temperature < 0 or (self.batch_wait_s or 0) < 0:
            raise EvalSetupError("--history-steps, --temperature and --batch-wait must not be negative")
        if len(set(self.tasks)) != len(self.tasks):
            raise EvalSetupError("a task is listed twice")
        try:  # split names and `all` expand; `miniwob.x` -> `x`
            self.tasks = harness.task_list().expand(self.tasks or harness.default_tasks, harness.check_task)
        except ValueError as exc:
            raise EvalSetupError(str(exc)) from None
        if not self.tasks:
            raise EvalSetupError("no tasks given")
        self.actions = list(self.actions or harness.default_tools or [])
        try:  # the session factory knows its tools: an unknown one is refused here, before anything starts
            harness.session_factory(lambda: None, tools=self.actions)
        except (ValueError, KeyError) as exc:
            raise EvalSetupError(f"--actions: {exc}") from None
        from envharness.prompts import get_prompt_style

        try:
            style = get_prompt_style(self.prompt, env)
        except ValueError as exc:
            raise EvalSetupError(str(exc)) from None
        self.prompt = style.name
        if self.vision and not self.screenshots:
            raise EvalSetupError("--vision shows the model the page's screenshot: drop --no-screenshots")
        if self.screenshot_max_side is not None and self.screenshot_max_side < 28:
            raise EvalSetupError("--screenshot-max-side must be at least 28 pixels (0: as taken)")
        if self.record_tokens and not style.conversation:
            raise EvalSetupError(
                f"--record-tokens needs a conversation prompt style (compact, harness), not {self.prompt!r}: "
                "a per-step prompt is a fresh token sequence every step"
            )
        if self.resume and self.overwrite:
            raise EvalSetupError("--resume and --overwrite contradict each other")
        if sum(map(bool, (self.env_url, self.env_urls, self.servers))) > 1:
            raise EvalSetupError("give one of --env-url, --env-urls and --servers")
        if self.servers < 0 or (self.ray_address and not self.servers):
            raise EvalSetupError("--servers must be positive, and --ray-address needs --servers")
        return env

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        for key in ("resume", "overwrite", "progress", "env_url", "env_urls", "servers", "ray_address"):
            data.pop(key)
        return data
