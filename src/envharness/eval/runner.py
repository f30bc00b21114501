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
import json
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from envharness.eval.config import EvalConfig, EvalSetupError
from envharness.eval.episode import EpisodeTape, EvalModelStep, PromptSettings, RecordingClient
from envharness.prompts.text import approximate_tokens, load_prompt_builder
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
from envharness.harness.types import HarnessRolloutResult, HarnessRunLimits


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
    folder: RunFolder
    stats: list[TaskStats]
    records: list[dict[str, Any]]
    ran: int
    skipped: int
    seconds: float
    paths: dict[str, Path] = field(default_factory=dict)


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
            raise EvalSetupError(f"--resume: {folder.path} was run with other settings ({'; '.join(problems)})")
        cut_partial_line(folder.episodes)
    folder.write_json(folder.config, config.to_json())
    return folder, existing


def token_counter(backend: Any) -> Callable[[str], int]:
    """The backend's own tokenizer when it has one (prompt budgets in real tokens)."""
    tokenizer = getattr(backend, "tokenizer", None)
    if tokenizer is None or not callable(tokenizer):
        return approximate_tokens
    return lambda text: len(tokenizer(text, add_special_tokens=False)["input_ids"])


async def _start_server(config: EvalConfig) -> Any:
    if config.env_url:
        return None
    from envharness.core.launchers import launch_local_async

    return await launch_local_async("browsergym", server_args=["--max-sessions", str(max(64, 2 * config.concurrency))])


async def _load_backend(config: EvalConfig) -> Any:
    from envharness.core.lifecycle import in_daemon_thread
    from envharness.models import load_backend

    try:  # a daemon thread: an interrupted run does not wait for the model to finish loading
        return await in_daemon_thread(load_backend, config.model)
    except (ValueError, RuntimeError, OSError, ImportError) as exc:
        raise EvalSetupError(f"cannot load model {config.model!r}: {exc}") from exc


class _Progress:
    """tqdm bar with the success count so far (silent when disabled)."""

    def __init__(self, total: int, enabled: bool):
        from tqdm import tqdm

        self.bar = tqdm(total=total, desc="episodes", unit="ep", disable=not enabled, file=sys.stderr, dynamic_ncols=True)
        self.done = self.wins = 0

    def update(self, record: dict[str, Any]) -> None:
        self.done += 1
        self.wins += is_success(record)
        self.bar.set_postfix_str(f"success {self.wins}/{self.done}", refresh=False)
        self.bar.update(1)

    def close(self) -> None:
        self.bar.close()


def episode_line(result: HarnessRolloutResult, tape: EpisodeTape | None, job: Job, model_name: str) -> dict[str, Any]:
    """The JSONL line of one episode: the shared record plus the eval's step-by-step tape."""
    record = record_from_result(result).to_dict()
    if tape is not None:
        tape.note_refusal(result.messages)  # a last action the harness refused
    record.update(
        index=job.index,
        model=model_name,
        goal=tape.page.goal if tape else "",
        steps=tape.steps_as_dicts() if tape else [],
        final_screenshot=tape.final_screenshot if tape else None,
    )
    return record


async def run_jobs(config: EvalConfig, folder: RunFolder, jobs: list[Job], backend: Any, base_url: str) -> None:
    """Run `jobs` through the harness, appending each finished episode to the run's JSONL."""
    from envharness.envs.browsergym.client import AsyncBrowserGymEnv
    from envharness.envs.browsergym.harness import BrowserGymSessionFactory

    prompts = PromptSettings(
        builder=load_prompt_builder(config.prompt),
        count_tokens=token_counter(backend),
        axtree_token_budget=config.axtree_tokens,
        history_steps=config.history_steps,
        tool_names=tuple(config.actions),
    )
    tapes: dict[str, EpisodeTape] = {}

    def first_prompt(obs: Any, task: Any, tool_names: list[str]) -> list[dict[str, Any]]:
        # The harness transcript opens with the prompt the model gets at step 1.
        return prompts.builder(prompts.make(obs.goal, obs.url, obs.axtree_txt or obs.text, obs.last_action_error, task=task))

    factory = BrowserGymSessionFactory(
        client_factory=lambda: RecordingClient(AsyncBrowserGymEnv(base_url), folder.path, tapes),
        tools=config.actions,
        reset_kwargs={"screenshot": config.screenshots, "screenshot_format": "jpeg", "pruned_html": False, "extra_properties": False},
        prompt_builder=first_prompt,
    )
    wait = config.batch_wait_s
    if wait is None:
        wait = 2.0 if getattr(backend, "tokenizer", None) is not None else 0.05
    batcher = BatchingModelStep(backend, max_wait_s=wait, send_tools=False)
    limits = HarnessRunLimits(max_turns=config.max_steps, sampling={"temperature": config.temperature, "max_tokens": config.max_new_tokens})
    model_name = str(getattr(backend, "name", config.model))
    progress = _Progress(len(jobs), config.progress)
    with folder.episodes.open("a", encoding="utf-8") as out:

        def on_result(i: int, result: HarnessRolloutResult) -> None:
            line = episode_line(result, tapes.pop(jobs[i].episode_id, None), jobs[i], model_name)
            out.write(json.dumps(line) + "\n")
            out.flush()
            progress.update(line)

        try:
            await run_episodes(
                factory,
                [j.task for j in jobs],
                model_step_builder=lambda session: EvalModelStep(batcher, session.client.tape, prompts),
                limits=limits,
                max_concurrency=config.concurrency,
                seeds=[j.seed for j in jobs],
                episode_ids=[j.episode_id for j in jobs],
                on_result=on_result,
                episode_timeout_s=config.episode_timeout_s,
            )
        finally:
            progress.close()


async def run_eval_async(config: EvalConfig, *, backend: Any = None) -> EvalResult:
    """Run (or resume) an eval and write its folder. `backend`: an already loaded
    `ModelBackend` to use instead of loading `config.model` (which still names it)."""
    started = time.perf_counter()
    config.check()
    folder, existing = prepare_folder(config)
    wanted: set[EpisodeKey] = {(j.task, j.seed) for j in plan_jobs(config)}
    done = finished_keys(existing) & wanted
    jobs = [j for j in plan_jobs(config) if (j.task, j.seed) not in done]
    server = owned_backend = None
    try:
        if jobs:
            starting = asyncio.ensure_future(_start_server(config))  # the server starts while the model loads
            try:
                owned_backend = loaded = None if backend is not None else await _load_backend(config)
                server = await starting
            finally:
                if not starting.done():  # loading failed or was interrupted: stop the server too
                    starting.cancel()
                    await asyncio.gather(starting, return_exceptions=True)
            base_url = config.env_url or server.base_url
            await run_jobs(config, folder, jobs, backend or loaded, base_url)
    finally:
        if owned_backend is not None:
            await owned_backend.aclose()
        if server is not None:
            await asyncio.to_thread(server.stop)
    records = [r for r in read_episodes(folder.episodes) if episode_key(r) in wanted]
    stats = summarize(records, config.tasks)
    paths = write_outputs(folder, config, records, stats)
    return EvalResult(folder, stats, records, ran=len(jobs), skipped=len(done), seconds=time.perf_counter() - started, paths=paths)


def run_eval(config: EvalConfig, *, backend: Any = None) -> EvalResult:
    """Synchronous `run_eval_async` (for scripts and the CLI)."""
    return asyncio.run(run_eval_async(config, backend=backend))


def count_finished(config: EvalConfig) -> int:
    """Episodes of this run's plan that its folder holds (what an interrupted run kept)."""
    wanted = {(j.task, j.seed) for j in plan_jobs(config)}
    try:
        return len(finished_keys(read_episodes(RunFolder(Path(config.out)).episodes)) & wanted)
    except (OSError, ValueError):
        return 0


def write_outputs(folder: RunFolder, config: EvalConfig, records: list[dict[str, Any]], stats: list[TaskStats]) -> dict[str, Path]:
    """summary.json, the plot and the HTML report, from the run's episodes."""
    from envharness.eval.plot import plot_success_rates
    from envharness.eval.report import write_report

    folder.write_json(folder.summary, {"model": config.model, "tasks": [asdict(s) | {"success_rate": s.success_rate} for s in stats]})
    plot_success_rates(stats, folder.plot, title=f"{config.model}: success rate per task")
    write_report(folder, config, records, stats)
    return {"episodes": folder.episodes, "report": folder.report, "plot": folder.plot, "summary": folder.summary}
