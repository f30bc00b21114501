"""`GymBrowserEnvironment`: a session that runs BrowserGym's own environment in a worker process.

The same wire, fields and options as our MiniWoB engine (`BrowserGymAction`,
`BrowserGymObservation`, `BrowserGymState`), so the harness, MCP tools, `/web`, eval, train and
the fleet take it unchanged. The worker starts at the session's first reset and is stopped
when the session closes; a worker that hung or died is replaced at the next reset.
"""

from __future__ import annotations

import dataclasses
import secrets
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from envharness.core.environment import Environment, InvalidOptions
from envharness.envs.browsergym.environment import BrowserSessionLost, checked_seed, episode_options
from envharness.envs.browsergym.gym_engine import benchmarks
from envharness.envs.browsergym.gym_engine.process import WorkerError, WorkerLost, WorkerProcess
from envharness.envs.browsergym.models import BrowserGymAction, BrowserGymObservation, BrowserGymState
from envharness.envs.browsergym.observation import ObservationParts


@dataclass
class GymEngineConfig:
    """Server-wide options of ``--option engine=browsergym``."""

    benchmark: str = "miniwob"
    task: str | None = None  # None: the benchmark's default task
    observation: ObservationParts = field(default_factory=ObservationParts)
    max_steps: int | None = None
    time_limit_s: float | None = None
    #: BrowserGym's own settings; the defaults match our engine's (BrowserGym's MiniWoB defaults
    #: are slow_mo=100 ms and a 500 ms pre-observation delay: timing only, rewards are the same).
    slow_mo_ms: int = 0
    pre_observation_delay_ms: float = 0.0
    viewport: dict[str, int] | None = None
    headless: bool = True
    #: Deadlines for the worker: a reset builds a gym env and its two browsers.
    reset_timeout_s: float = 120.0
    step_timeout_s: float = 60.0
    #: openended's start URL and goal when a reset names none.
    start_url: str | None = None
    goal: str | None = None

    def make_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "slow_mo": self.slow_mo_ms,
            "pre_observation_delay": self.pre_observation_delay_ms / 1000,
            "headless": self.headless,
        }
        if self.viewport:
            kwargs["viewport"] = dict(self.viewport)
        return kwargs


class GymBrowserEnvironment(Environment[BrowserGymAction, BrowserGymObservation]):
    """BrowserGym benchmarks (and MiniWoB on BrowserGym's own code) behind our wire."""

    action_type = BrowserGymAction
    observation_type = BrowserGymObservation
    state_type = BrowserGymState
    supports_concurrent_sessions = True

    def __init__(self, config: GymEngineConfig) -> None:
        self.config = config
        self.benchmark = benchmarks.check_benchmark(config.benchmark)
        self._worker: WorkerProcess | None = None
        self._state = BrowserGymState(benchmark=self.benchmark.name)
        self._task: str | None = None
        self._max_steps: int | None = None
        self._time_limit_s: float | None = None
        self._started = 0.0
        self._done = False

    async def reset_async(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        task: str | None = None,
        task_name: str | None = None,
        start_url: str | None = None,
        goal: str | None = None,
        **options: Any,
    ) -> BrowserGymObservation:
        chosen = task or task_name or self._task or self.config.task or self.benchmark.default_task
        if not chosen:
            raise InvalidOptions(f"name a {self.benchmark.name} task: reset(task=...)")
        checked_seed(seed)
        parts, max_steps, time_limit_s = episode_options(
            options,
            observation=self.config.observation,
            max_steps=self.config.max_steps,
            time_limit_s=self.config.time_limit_s,
            also=("start_url", "goal"),
        )
        task_kwargs: dict[str, Any] = {}
        if self.benchmark.name == "openended":
            url = start_url or self.config.start_url
            if not url:
                raise ValueError("openended needs a start page: reset(start_url='http://...', goal='...')")
            task_kwargs = {"start_url": url, "goal": goal if goal is not None else (self.config.goal or "")}
        elif start_url or goal:
            raise ValueError(f"start_url and goal are openended's reset options, not {self.benchmark.name}'s")
        seed = secrets.randbits(31) if seed is None else seed
        answer = await self._ask(
            {
                "cmd": "reset",
                "gym_id": benchmarks.gym_id(self.benchmark, chosen),
                "make_kwargs": self.config.make_kwargs(),
                "seed": seed,
                "task_kwargs": task_kwargs,
                "parts": dataclasses.asdict(parts),
            },
            self.config.reset_timeout_s,
            fresh=True,
        )
        self._task, self._max_steps, self._time_limit_s = chosen, max_steps, time_limit_s
        self._done, self._started = False, time.monotonic()
        obs = answer["obs"]
        self._state = BrowserGymState(
            episode_id=episode_id or str(uuid.uuid4()),
            step_count=0,
            benchmark=self.benchmark.name,
            task_name=benchmarks.task_name(self.benchmark, chosen),
            seed=seed,
            goal=obs.get("goal", ""),
            current_url=obs.get("url", ""),
            max_steps=max_steps,
        )
        return self._observation(obs, reward=0.0, done=False, truncated=False, info=answer.get("info") or {})

    async def step_async(self, action: BrowserGymAction) -> BrowserGymObservation:
        if self._worker is None or self._task is None:
            raise RuntimeError("call reset() before step()")
        if self._done:
            raise ValueError("the episode is over; call reset() to start a new one")
        answer = await self._ask({"cmd": "step", "action": action.action_str}, self.config.step_timeout_s)
        self._state.step_count += 1
        truncated = answer["truncated"] or (
            not answer["terminated"]
            and (
                (self._max_steps is not None and self._state.step_count >= self._max_steps)
                or (self._time_limit_s is not None and time.monotonic() - self._started >= self._time_limit_s)
            )
        )
        done = answer["terminated"] or truncated
        self._done = done
        self._state.cum_reward += answer["reward"]
        return self._observation(
            answer["obs"],
            reward=answer["reward"],
            done=done,
            truncated=truncated,
            info=answer.get("info") or {},
        )

    async def _ask(self, command: dict[str, Any], timeout_s: float, *, fresh: bool = False) -> dict[str, Any]:
        if self._worker is None or not self._worker.alive:
            if not fresh:
                raise BrowserSessionLost(
                    "this session's BrowserGym worker is gone; call reset() to start again"
                )
            self._worker = await WorkerProcess.start()
        try:
            return await self._worker.request(command, timeout_s)
        except WorkerLost as exc:
            self._task = None if not fresh else self._task
            raise BrowserSessionLost(str(exc)) from None
        except WorkerError as exc:
            raise ValueError(str(exc)) from None

    def _observation(
        self, obs: dict[str, Any], *, reward: float, done: bool, truncated: bool, info: dict[str, Any]
    ) -> BrowserGymObservation:
        extras = obs.pop("browsergym_obs")
        self._state.current_url = obs.get("url", "")
        self._state.elapsed = time.monotonic() - self._started
        self._state.done = done
        task_info = info.get("task_info", info)
        return BrowserGymObservation(
            **obs,
            error=obs.get("last_action_error", ""),
            done=done,
            reward=reward,
            truncated=truncated,
            metadata={
                "browsergym_obs": extras,
                "browsergym_info": {"task_info": task_info, "truncated": truncated},
            },
        )

    @property
    def state(self) -> BrowserGymState:
        return self._state

    async def close_async(self) -> None:
        worker, self._worker = self._worker, None
        if worker is not None:
            await worker.close()

    def close(self) -> None:
        """Workers are stopped by `close_async` (the server calls it)."""
