"""What an eval run is asked to do (`EvalConfig`), checked before anything starts."""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import asdict, dataclass, replace
from typing import Any

from envharness._deprecated import FILE_KEYS, OBSERVATION_TOKENS_FLAG
from envharness.core.declared import check_options, option
from envharness.core.registry import ResolvedEnv
from envharness.harness import run_options as shared
from envharness.harness.groups import EnvironmentArgs, FleetArgs, ModelArgs
from envharness.harness.plan import EVALUATION, PlayPlan, resolve_plan
from envharness.prompts import get_prompt_style


class EvalSetupError(ValueError):
    """The run cannot start as asked (bad option, a run folder in the way, no model)."""


@dataclass(frozen=True)
class CheckedEval:
    """An eval run ready to start: the resolved configuration and its plan of play (one row:
    the environment, its tasks, seats, prompt style and server options; `harness/plan.py`)."""

    config: EvalConfig
    plan: PlayPlan

    @property
    def env(self) -> ResolvedEnv:
        return self.plan.env


@dataclass(frozen=True, kw_only=True)
class EvalConfig(EnvironmentArgs, FleetArgs, ModelArgs):
    """What `envharness eval` is asked to do: the environment, servers and model groups
    (`harness/groups.py`; `model` a `load_backend` spec: embedded, scripted, a model dir,
    openai:MODEL@URL, trl-vllm:URL) and eval's own options, each field its option
    (`core/declared.py`). Frozen: `check()` returns the resolved copy the run uses."""

    out: str = shared.out(
        dataclasses.MISSING,
        "episodes.jsonl, report.html, success_rate.png, summary.json",
        "runs/eval-<time>",
        "runs/eval-%Y%m%d-%H%M%S",
    )
    episodes: int = option(5, "episodes per task, seeds SEED..SEED+N-1 (default %(default)s)", minimum=1)
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

    def rules(self) -> None:
        """Eval's own rules about two of its options (`core.declared.check_options`)."""
        if self.vision and not self.screenshots:
            raise ValueError("--vision shows the model the page's screenshot: drop --no-screenshots")
        shared.resume_or_overwrite(self.resume, self.overwrite)

    def check(self) -> CheckedEval:
        """The run resolved, or `EvalSetupError` naming the first bad setting: its plan of play
        (`harness.plan.resolve_plan`: tasks expanded and normalized, the opponent seated, the
        prompt style named), then eval's own: the tools and what the prompt style can record.
        This configuration is not changed; the resolved copy is `CheckedEval.config`."""
        try:
            check_options(self)
            if len(set(self.tasks)) != len(self.tasks):
                raise ValueError("a task is listed twice")
            plan = resolve_plan(self, EVALUATION, running=bool(self.env_url or self.env_urls))
        except ValueError as exc:
            raise EvalSetupError(str(exc)) from None
        (row,) = plan.rows
        harness = row.env.require_harness()
        if row.seats.client_opponent is not None and harness.seat_client is None:
            raise EvalSetupError(
                f"--opponent {self.opponent}: {harness.env} cannot seat a model in the other seats; "
                f"its server plays {' or '.join(harness.server_opponents)}"
            )
        actions = list(self.actions or harness.default_tools or [])
        try:  # the session factory knows its tools: an unknown one is refused here, before anything starts
            harness.session_factory(lambda: None, tools=actions)
        except (ValueError, KeyError) as exc:
            raise EvalSetupError(f"--actions: {exc}") from None
        try:
            style = get_prompt_style(row.prompt, row.env)
        except ValueError as exc:
            raise EvalSetupError(str(exc)) from None
        if self.record_tokens and not style.conversation:
            raise EvalSetupError(
                f"--record-tokens needs a conversation prompt style (compact, harness), not {style.name!r}: "
                "a per-step prompt is a fresh token sequence every step"
            )
        config = replace(
            self, tasks=list(row.tasks), env_options=row.server_options, actions=actions, prompt=style.name
        )
        return CheckedEval(config, plan)

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
