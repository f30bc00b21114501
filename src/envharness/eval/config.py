"""What an eval run is asked to do (`EvalConfig`), checked before anything starts."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from envharness.envs.browsergym.action_text import ACTION_TOOLS, DEFAULT_TOOL_NAMES

#: A small MiniWoB++ set: clicking, typing, forms; all solved by the scripted policy.
DEFAULT_TASKS = (
    "click-test",
    "click-button",
    "click-checkboxes",
    "click-dialog",
    "focus-text",
    "enter-text",
    "enter-password",
    "login-user",
)


class EvalSetupError(ValueError):
    """The run cannot start as asked (bad option, a run folder in the way, no model)."""


@dataclass
class EvalConfig:
    out: str
    tasks: list[str] = field(default_factory=lambda: list(DEFAULT_TASKS))
    episodes: int = 5
    #: A `load_backend` spec: embedded, scripted, a model dir, openai:MODEL@URL, trl-vllm:URL.
    model: str = "embedded"
    #: A prompt style of `envharness.prompts` ('default', 'compact', 'harness', ...: the same
    #: names as `envharness train --prompt`) or 'module.path:function' (a per-step builder).
    prompt: str = "default"
    temperature: float = 0.0
    max_steps: int = 5
    max_new_tokens: int = 32
    axtree_tokens: int = 1024
    history_steps: int = 4
    actions: list[str] = field(default_factory=lambda: list(DEFAULT_TOOL_NAMES))
    concurrency: int = 8
    seed: int = 0
    #: A running `envharness serve browsergym`; None starts one on loopback for the run.
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
    #: A fleet instead of one server (issue 13): running servers' urls, or N servers on Ray
    #: (`ray_address`: the cluster; None starts Ray here). Not part of the run's identity.
    env_urls: list[str] = field(default_factory=list)
    servers: int = 0
    ray_address: str | None = None

    def check(self) -> None:
        """Raise `EvalSetupError` naming the first bad setting; task names are normalized."""
        from envharness.envs.browsergym import miniwob

        positive = ("episodes", "max_steps", "max_new_tokens", "axtree_tokens", "concurrency")
        for name in positive:
            if getattr(self, name) < 1:
                raise EvalSetupError(f"--{name.replace('_', '-')} must be at least 1")
        if self.history_steps < 0 or self.temperature < 0 or (self.batch_wait_s or 0) < 0:
            raise EvalSetupError("--history-steps, --temperature and --batch-wait must not be negative")
        if not self.tasks:
            raise EvalSetupError("no tasks given")
        try:
            self.tasks = [miniwob.check_task(task) for task in self.tasks]  # `miniwob.x` -> `x`
        except ValueError as exc:
            raise EvalSetupError(str(exc)) from None
        if len(set(self.tasks)) != len(self.tasks):
            raise EvalSetupError("a task is listed twice")
        unknown = [a for a in self.actions if a not in ACTION_TOOLS]
        if unknown:
            raise EvalSetupError(f"unknown action(s) {', '.join(unknown)}; known: {', '.join(ACTION_TOOLS)}")
        from envharness.prompts import get_prompt_style

        try:
            style = get_prompt_style(self.prompt)
        except ValueError as exc:
            raise EvalSetupError(str(exc)) from None
        if self.vision and not self.screenshots:
            raise EvalSetupError("--vision shows the model the page's screenshot: drop --no-screenshots")
        if self.screenshot_max_side is not None and self.screenshot_max_side < 28:
            raise EvalSetupError("--screenshot-max-side must be at least 28 pixels (0: as taken)")
        if self.record_tokens and not style.conversation:
            raise EvalSetupError(f"--record-tokens needs a conversation prompt style (compact, harness), not {self.prompt!r}: "
                                 "a per-step prompt is a fresh token sequence every step")
        if self.resume and self.overwrite:
            raise EvalSetupError("--resume and --overwrite contradict each other")
        if sum(map(bool, (self.env_url, self.env_urls, self.servers))) > 1:
            raise EvalSetupError("give one of --env-url, --env-urls and --servers")
        if self.servers < 0 or (self.ray_address and not self.servers):
            raise EvalSetupError("--servers must be positive, and --ray-address needs --servers")

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        for key in ("resume", "overwrite", "progress", "env_url", "env_urls", "servers", "ray_address"):
            data.pop(key)
        return data
