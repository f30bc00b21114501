"""`run_eval(config)`: N episodes per task, many at once, into a run folder.

The browser server (started on loopback unless `env_url` names one) and the model load at
the same time. Episodes run through the harness (`run_episodes`) with one `EvalModelStep`
each; their model calls are batched across episodes. Each finished episode is appended to
`episodes.jsonl` at once (so a killed run loses only the episodes in flight and `--resume`
picks up from there), and the progress bar moves. At the end the folder gets the summary,
the HTML report and the plot.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from envharness.eval.config import CheckedEval, EvalConfig, EvalSetupError
from envharness.eval.conversation import ConversationModelStep
from envharness.eval.episode import EpisodeTape, EvalModelStep, PromptSettings, RecordingClient
from envharness.eval.opponent import opponent_generate
from envharness.eval.runfolder import (
    EpisodeKey,
    RunFolder,
    cut_partial_line,
    episode_key,
    finished_keys,
    identity_mismatch,
    read_episodes,
)
from envharness.eval.stats import TaskStats, is_success, summarize
from envharness.harness.model_step import BatchingModelStep
from envharness.harness.records import record_from_result
from envharness.harness.rollout import run_episodes
from envharness.harness.seat_player import ModelSeats
from envharness.harness.types import HarnessRolloutResult, HarnessRunLimits
from envharness.prompts import get_prompt_style, opening_builder
from envharness.prompts.text import tokenizer_counter


@dataclass
class Job:
    task: str
    seed: int
    index: int

    @property
    def episode_id(self) -> str:
        return f"{self.task}-s{self.seed}"


@dataclass
class EvalResult:
    #: The configuration as the run resolved it (tasks expanded, the prompt style chosen).
    config: EvalConfig
    folder: RunFolder
    stats: list[TaskStats]
    records: list[dict[str, Any]]
    ran: int
    skipped: int
    seconds: float
    paths: dict[str, Path] = field(default_factory=dict)
    #: Where the model ran (`{"device": "cuda:0", "dtype": "bfloat16", ...}`); None for remote models.
    placement: dict[str, str] | None = None


def plan_jobs(config: EvalConfig) -> list[Job]:
    """Every episode asked for, interleaved across tasks so that batches and early progress mix them."""
    return [Job(task, config.seed + k, k) for k in range(config.episodes) for task in config.tasks]


def prepare_folder(config: EvalConfig) -> tuple[RunFolder, list[dict[str, Any]]]:
    """The run folder, ready to append to, and the episodes it already holds (resume)."""
    folder = RunFolder(Path(config.out))
    existing = read_episodes(folder.episodes)
    if config.overwrite:
        for path in (folder.episodes, folder.summary, folder.report, folder.plot, folder.config):
            path.unlink(missing_ok=True)
        shutil.rmtree(folder.path / "screenshots", ignore_errors=True)
        existing = []
    elif existing and not config.resume:
        raise EvalSetupError(
            f"{folder.path} already holds {len(existing)} episode(s): pass --resume to continue that run, "
            "--overwrite to replace it, or another --out"
        )
    if config.resume:
        old = folder.read_config()
        problems = identity_mismatch(old, config.to_json()) if old else []
        if problems:
            raise EvalSetupError(
                f"--resume: {folder.path} was run with other settings ({'; '.join(problems)})"
            )
        cut_partial_line(folder.episodes)
    folder.write_json(folder.config, config.to_json())
    return folder, existing


def token_counter(backend: Any) -> Callable[[str], int]:
    """The backend's own tokenizer when it has one (prompt budgets in real tokens)."""
    return tokenizer_counter(getattr(backend, "tokenizer", None))


async def _start_server(config: EvalConfig) -> Any:
    if config.env_url or config.env_urls or config.servers:
        return None
    from envharness.core.launchers import launch_local_async

    return await launch_local_async(
        config.env,
        options=config.env_options,
        server_args=["--max-sessions", str(max(64, 2 * config.concurrency))],
    )


async def _load_backend(config: EvalConfig, env: Any) -> Any:
    from envharness.core.lifecycle import in_daemon_thread
    from envharness.models import load_backend

    try:  # a daemon thread: an interrupted run does not wait for the model to finish loading
        # the environment's scripted policy (on a server with these options: e.g. web tasks' solutions)
        options = {"env": env} if config.model == "scripted" else {}
        options.update(device=config.device, dtype=config.dtype)
        return await in_daemon_thread(functools.partial(load_backend, config.model, **options))
    except (ValueError, RuntimeError, OSError, ImportError) as exc:
        raise EvalSetupError(f"cannot load model {config.model!r}: {exc}") from exc


class _Progress:
    """tqdm bar with the success count so far (silent when disabled)."""

    def __init__(self, total: int, enabled: bool):
        from tqdm import tqdm

        self.bar = tqdm(
            total=total, desc="episodes", unit="ep", disable=not enabled, file=sys.stderr, dynamic_ncols=True
        )
        self.done = self.wins = 0

    def update(self, record: dict[str, Any]) -> None:
        self.done += 1
        self.wins += is_success(record)
        self.bar.set_postfix_str(f"success {self.wins}/{self.done}", refresh=False)
        self.bar.update(1)

    def close(self) -> None:
        self.bar.close()


def episode_line(
    result: HarnessRolloutResult,
    tape: EpisodeTape | None,
    job: Job,
    model_name: str,
    include_tokens: bool = False,
) -> dict[str, Any]:
    """The JSONL line of one episode: the shared record plus the eval's step-by-step tape."""
    record = record_from_result(result, include_tokens=include_tokens).to_dict()
    if tape is not None:
        tape.note_refusal(result.messages)  # a last action the harness refused
    record.update(
        index=job.index,
        model=model_name,
        goal=tape.page.goal if tape else "",
        steps=tape.steps_as_dicts() if tape else [],
        final_screenshot=tape.final_screenshot if tape else None,
    )
    if tape is not None and tape.opponent_moves is not None:
        record["opponent_moves"] = tape.opponent_moves
    if tape is not None and tape.env_opponent_moves:  # played by the server: replay plays them again
        record["env_opponent_moves"] = tape.env_opponent_moves
    return record


async def run_jobs(
    checked: CheckedEval,
    folder: RunFolder,
    jobs: list[Job],
    backend: Any,
    base_url: str,
    fleet: Any = None,
) -> None:
    """Run `jobs` as `config.check()` resolved the run (its plan of play: the environment, and
    who the client seats in the other seats), appending each finished episode to the run's JSONL
    (`fleet`: a `FleetRouter` whose servers share the episodes, instead of `base_url`)."""
    config, env = checked.config, checked.env
    harness = env.require_harness()
    client_class = env.client_class
    style = get_prompt_style(config.prompt, env)
    count_tokens = token_counter(backend)
    vision = vision_for(style, config, backend)
    if vision and not config.screenshots:
        raise EvalSetupError(
            f"{config.model} is a vision model: it needs screenshots (drop --no-screenshots, or pass --no-vision)"
        )
    tapes: dict[str, EpisodeTape] = {}
    (row,) = checked.plan.rows
    opponent_spec, opponent = row.seats.client_opponent, {}  # a model the client seats (`check()`)

    def make_client() -> RecordingClient:
        client, seats = fleet.async_client() if fleet else _client(client_class, base_url), None
        if opponent_spec:  # a model in the other seats: the client plays them
            seats = ModelSeats(name=opponent_spec, generate=opponent["generate"])
            client = harness.seat_client(client, seats, config.seat)
        recording = RecordingClient(
            client, folder.path, tapes, keep_screenshots=style.vision, describe=harness.describe_observation
        )
        recording.tape.opponent_moves = seats.moves if seats else None
        return recording

    # The transcript opens with the style's step-1 prompt: what train's rollout gives the model.
    session_options: dict[str, Any] = dict(
        client_factory=make_client,
        tools=config.actions,
        # a vision model sees exact pixels (PNG, as the seeds send); the report alone makes do with JPEG
        reset_kwargs=reset_options(harness, config, vision),
    )
    if (
        style.vision
    ):  # the conversation `train --model <VLM>` plays: every tool result carries the new screenshot
        factory = style.session_factory(vision_max_side=config.screenshot_max_side, **session_options)
    else:
        factory = harness.session_factory(
            prompt_builder=opening_builder(
                style,
                count_tokens=count_tokens,
                text_token_budget=config.observation_tokens,
                history_steps=config.history_steps,
                describe=harness.describe_observation,
            ),
            observation_text=style.observation_text,
            **session_options,
        )
    wait = config.batch_wait_s
    if wait is None:
        wait = 2.0 if getattr(backend, "tokenizer", None) is not None else 0.05
    batcher = BatchingModelStep(
        backend, max_wait_s=wait, send_tools=False, tool_call_parser=harness.tool_call_parser
    )
    if style.conversation:  # the conversation train's rollout plays, turn for turn

        def model_step(session: Any) -> Any:
            return ConversationModelStep(batcher, session.client.tape)
    else:  # a fresh prompt every step
        prompts = PromptSettings(
            builder=style.step,
            count_tokens=count_tokens,
            text_token_budget=config.observation_tokens,
            history_steps=config.history_steps,
            tool_names=tuple(config.actions),
            vision=vision,
            screenshot_max_side=config.screenshot_max_side,
            tool_call_parser=harness.tool_call_parser,
        )

        def model_step(session: Any) -> Any:
            return EvalModelStep(batcher, session.client.tape, prompts)

    limits = HarnessRunLimits(
        max_turns=config.max_steps,
        sampling={"temperature": config.temperature, "max_tokens": config.max_new_tokens},
    )
    model_name = str(getattr(backend, "name", config.model))
    progress = _Progress(len(jobs), config.progress)
    async with contextlib.AsyncExitStack() as stack:
        if opponent_spec:
            opponent["generate"] = await stack.enter_async_context(
                opponent_generate(config, opponent_spec, batcher)
            )
        await _run_and_write(config, folder, jobs, tapes, factory, model_step, limits, model_name, progress)


async def _run_and_write(
    config: EvalConfig,
    folder: RunFolder,
    jobs: list[Job],
    tapes: dict[str, EpisodeTape],
    factory: Any,
    model_step: Callable[[Any], Any],
    limits: HarnessRunLimits,
    model_name: str,
    progress: _Progress,
) -> None:
    """Run the episodes, appending each one's line to the run's JSONL as it ends."""
    with folder.episodes.open("a", encoding="utf-8") as out:

        def on_result(i: int, result: HarnessRolloutResult) -> None:
            line = episode_line(
                result, tapes.pop(jobs[i].episode_id, None), jobs[i], model_name, config.record_tokens
            )
            out.write(json.dumps(line) + "\n")
            out.flush()
            progress.update(line)

        try:
            await run_episodes(
                factory,
                [j.task for j in jobs],
                model_step_builder=model_step,
                limits=limits,
                max_concurrency=config.concurrency,
                seeds=[j.seed for j in jobs],
                episode_ids=[j.episode_id for j in jobs],
                on_result=on_result,
                episode_timeout_s=config.episode_timeout_s,
            )
        finally:
            progress.close()


def _client(client_class: Any, base_url: str) -> Any:
    """The environment's async client; the browser's keeps screenshots encoded (the tape saves them)."""
    try:
        return client_class(base_url, screenshot_array=False)
    except TypeError:
        return client_class(base_url)


def reset_options(harness: Any, config: EvalConfig, vision: bool) -> dict[str, Any]:
    """What every reset asks of the environment: its harness's options, and screenshots when
    the environment takes them (a vision model sees exact pixels, PNG as the seeds send; the
    report alone makes do with JPEG)."""
    options = dict(harness.reset_kwargs)
    if harness.screenshots:
        options.update(screenshot=config.screenshots, screenshot_format="png" if vision else "jpeg")
    return options


def vision_for(style: Any, config: EvalConfig, backend: Any) -> bool:
    """Whether the model is shown screenshots. A conversation style decides for itself ("vision"
    shows them, as `train --model <VLM>` did; the text ones do not, whatever the model); a
    per-step style adds the screenshot to each prompt when `uses_vision` says so."""
    if not style.conversation:
        return uses_vision(config, backend)
    if config.vision is not None and config.vision != style.vision:
        raise EvalSetupError(
            f"--prompt {style.name} {'shows' if style.vision else 'does not show'} screenshots: "
            f"drop --{'no-' if style.vision else ''}vision, or choose --prompt "
            f"{'compact' if style.vision else 'vision'} (or default, a per-step prompt)"
        )
    return style.vision


def uses_vision(config: EvalConfig, backend: Any) -> bool:
    """Whether prompts carry the screenshot: as configured, else when the backend says it sees
    (`backend.vision`) or holds a vision processor (a local vision-language model)."""
    if config.vision is not None:
        return config.vision
    if getattr(backend, "vision", None) is not None:
        return bool(backend.vision)
    processor = (
        vars(backend).get("processor") if hasattr(backend, "__dict__") else None
    )  # not a lazy property
    return processor is not None and hasattr(processor, "image_processor")


async def run_eval_async(config: EvalConfig, *, backend: Any = None) -> EvalResult:
    """Run (or resume) an eval and write its folder. `backend`: an already loaded
    `ModelBackend` to use instead of loading `config.model` (which still names it)."""
    started = time.perf_counter()
    checked = config.check()
    config, env = checked.config, checked.env
    folder, existing = prepare_folder(config)
    wanted: set[EpisodeKey] = {(j.task, j.seed) for j in plan_jobs(config)}
    done = finished_keys(existing) & wanted
    jobs = [j for j in plan_jobs(config) if (j.task, j.seed) not in done]
    server = owned_backend = placement = None
    fleet = contextlib.ExitStack()
    try:
        if jobs:
            # the server (or the fleet) starts while the model loads; if loading fails or the run
            # is interrupted, a start still under way is cancelled (which stops what it started)
            starting = asyncio.ensure_future(_start_server(config))
            opening = asyncio.ensure_future(_open_fleet(config, fleet))
            try:
                owned_backend = loaded = None if backend is not None else await _load_backend(config, env)
                await asyncio.gather(starting, opening)
            finally:
                for task in (starting, opening):
                    task.cancel()  # nothing happens to a finished one
                await asyncio.gather(starting, opening, return_exceptions=True)
                server, router = _result(starting), _result(opening)
            base_url = config.env_url or (server.base_url if server else "")
            placement = _placement(backend or loaded)
            await run_jobs(checked, folder, jobs, backend or loaded, base_url, fleet=router)
    finally:
        await asyncio.to_thread(fleet.close)
        if owned_backend is not None:
            await owned_backend.aclose()
        if server is not None:
            await asyncio.to_thread(server.stop)
    records = [r for r in read_episodes(folder.episodes) if episode_key(r) in wanted]
    stats = summarize(records, config.tasks)
    screenshots = bool(getattr(env.harness, "screenshots", False))
    paths = write_outputs(folder, config, records, stats, placement, screenshots=screenshots)
    return EvalResult(
        config,
        folder,
        stats,
        records,
        ran=len(jobs),
        skipped=len(done),
        seconds=time.perf_counter() - started,
        paths=paths,
        placement=placement,
    )


def _placement(backend: Any) -> dict[str, str] | None:
    """Where a local backend's model runs; None for backends without weights here."""
    where = getattr(backend, "placement", None)
    return where.describe() if where is not None else None


def _result(task: asyncio.Future[Any]) -> Any:
    """A finished task's result; None when it failed or was cancelled."""
    if task.cancelled() or task.exception() is not None:
        return None
    return task.result()


async def _open_fleet(config: EvalConfig, stack: contextlib.ExitStack) -> Any:
    """The fleet router for `--env-urls` / `--servers` (None for one server), closed with `stack`."""
    if not (config.env_urls or config.servers):
        return None
    from envharness.fleet.start import open_fleet

    fleet = open_fleet(
        config.env,
        env_urls=config.env_urls,
        servers=config.servers,
        ray_address=config.ray_address,
        max_sessions=max(64, 2 * config.concurrency),
        env_options=config.env_options or None,
    )
    try:
        return await asyncio.to_thread(stack.enter_context, fleet)
    except (ValueError, RuntimeError, TimeoutError) as exc:
        raise EvalSetupError(f"cannot start the environment fleet: {exc}") from exc


def run_eval(config: EvalConfig, *, backend: Any = None) -> EvalResult:
    """Synchronous `run_eval_async` (for scripts and the CLI)."""
    return asyncio.run(run_eval_async(config, backend=backend))


def count_finished(config: EvalConfig) -> int:
    """Episodes of this run's plan that its folder holds (what an interrupted run kept)."""
    try:
        wanted = {(j.task, j.seed) for j in plan_jobs(config.check().config)}
        return len(finished_keys(read_episodes(RunFolder(Path(config.out)).episodes)) & wanted)
    except (OSError, ValueError):  # EvalSetupError too
        return 0


def write_outputs(
    folder: RunFolder,
    config: EvalConfig,
    records: list[dict[str, Any]],
    stats: list[TaskStats],
    placement: dict[str, str] | None = None,
    *,
    screenshots: bool = True,
) -> dict[str, Path]:
    """summary.json, the plot and the HTML report, from the run's episodes (`screenshots`: the
    environment takes them, `EnvHarness.screenshots`)."""
    from envharness.eval.games import game_stats
    from envharness.eval.plot import plot_success_rates
    from envharness.eval.report import write_report

    where = {"placement": placement} if placement else {}
    games = {"games": [g.to_json() for g in game_stats(records)]} if config.opponent else {}
    folder.write_json(
        folder.summary,
        {
            "model": config.model,
            **where,
            "tasks": [asdict(s) | {"success_rate": s.success_rate} for s in stats],
            **games,
        },
    )
    plot_success_rates(stats, folder.plot, title=f"{config.model}: success rate per task")
    write_report(folder, config, records, stats, screenshots=screenshots)
    return {
        "episodes": folder.episodes,
        "report": folder.report,
        "plot": folder.plot,
        "summary": folder.summary,
    }
