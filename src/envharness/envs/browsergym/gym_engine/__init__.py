"""The BrowserGym engine: each session runs BrowserGym's own gym environment in a worker process.

`envharness serve browsergym --option engine=browsergym` runs MiniWoB on BrowserGym's code (a
parity check against our fast engine); ``--option benchmark=openended|webarena|...`` (or
OpenEnv's ``BROWSERGYM_BENCHMARK``) serves the other BrowserGym benchmarks, which only this
engine runs.

    benchmarks.py   what each benchmark needs (package, variables), checked before a browser starts
    worker.py       the worker process: one gym environment, actions checked by our grammar
    kept_browsers.py  BrowserGym's resets on browsers that stay up (it launches two per reset)
    process.py      the server's handle on a worker: deadlines, its process tree stopped on loss
    observation.py  BrowserGym's observation dict -> our observation's fields
    environment.py  `GymBrowserEnvironment`: one session = one worker
"""

from __future__ import annotations

import dataclasses
from typing import Any

from envharness.envs.browsergym.environment import OBSERVATION_OPTIONS
from envharness.envs.browsergym.gym_engine.benchmarks import BENCHMARKS, BenchmarkUnavailable, check_benchmark
from envharness.envs.browsergym.gym_engine.environment import GymBrowserEnvironment, GymEngineConfig


class GymEnvironmentFactory:
    """One `GymBrowserEnvironment` (one worker) per session; nothing shared to close."""

    def __init__(self, config: GymEngineConfig) -> None:
        self.config = config

    def __call__(self) -> GymBrowserEnvironment:
        return GymBrowserEnvironment(dataclasses.replace(self.config))

    def task_list(self) -> Any:
        """The benchmark's tasks (the server's Task API)."""
        from envharness.envs.browsergym.harness import served_task_list

        return served_task_list({"benchmark": self.config.benchmark})

    async def aclose(self) -> None:
        """Each session stops its own worker when it closes."""


def make_gym_factory(*, headless: bool = True, **options: Any) -> GymEnvironmentFactory:
    """`options`: `GymEngineConfig` fields, observation parts as flat options, and the fast
    engine's ``page_timeout_ms`` (BrowserGym's ``timeout``). The benchmark is checked here, so a
    missing package or variable stops the server before any browser starts."""
    parts = {k: options.pop(k) for k in OBSERVATION_OPTIONS if k in options}
    fields = {f.name for f in dataclasses.fields(GymEngineConfig)}
    options.pop("page_timeout_ms", None)  # BrowserGym's tasks set their own timeouts
    unknown = set(options) - fields
    if unknown:
        raise ValueError(
            f"unknown option(s) for engine=browsergym: {', '.join(sorted(unknown))}; "
            f"valid: engine, headless, {', '.join(sorted(fields | set(OBSERVATION_OPTIONS)))}"
        )
    config = GymEngineConfig(headless=headless, **options)
    config.observation = dataclasses.replace(config.observation, **parts)
    check_benchmark(config.benchmark)
    return GymEnvironmentFactory(config)


__all__ = [
    "BENCHMARKS",
    "BenchmarkUnavailable",
    "GymBrowserEnvironment",
    "GymEngineConfig",
    "GymEnvironmentFactory",
    "check_benchmark",
    "make_gym_factory",
]
