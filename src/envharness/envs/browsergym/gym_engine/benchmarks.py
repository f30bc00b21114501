"""The BrowserGym benchmarks the gym engine runs: what each needs, checked before a browser starts.

Each benchmark is a PyPI package that registers ``browsergym/<benchmark>.<task>`` gym ids when
imported, and reads its sites' addresses from environment variables. A server asked for one
whose package or variables are missing refuses at start-up in one line naming exactly what is
missing (`check_benchmark`), not after a browser has started and a site has timed out.

``openended`` (in browsergym-core) is any start URL and goal, chosen per reset.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Mapping
from dataclasses import dataclass


class BenchmarkUnavailable(ValueError):
    """The benchmark cannot run here; the message says what is missing, in one line."""


@dataclass(frozen=True)
class Benchmark:
    name: str
    #: The module whose import registers the gym ids.
    module: str
    #: `pip install envharness[<extra>]` installs it.
    extra: str | None
    #: Environment variables that must be set (the sites' URLs, an instance's credentials).
    variables: tuple[str, ...] = ()
    #: Any one of these groups suffices instead (WorkArena: an instance, or a hub token for its pool).
    alternatives: tuple[tuple[str, ...], ...] = ()
    #: A task every server of this benchmark can start with.
    default_task: str | None = None
    #: What the benchmark reaches (shown in listings).
    needs: str = ""


BENCHMARKS: dict[str, Benchmark] = {
    b.name: b
    for b in (
        Benchmark(
            "miniwob",
            "browsergym.miniwob",
            "browsergym",
            default_task="click-test",
            needs="nothing: the pages ship in PyPI's miniwob and are served on loopback",
        ),
        Benchmark(
            "openended",
            "browsergym.core",
            "browsergym",
            default_task="openended",
            needs="a start URL per reset (reset(start_url=..., goal=...))",
        ),
        Benchmark(
            "webarena",
            "browsergym.webarena",
            "webarena",
            (
                "WA_SHOPPING",
                "WA_SHOPPING_ADMIN",
                "WA_REDDIT",
                "WA_GITLAB",
                "WA_WIKIPEDIA",
                "WA_MAP",
                "WA_HOMEPAGE",
            ),
            default_task="webarena.0",
            needs="the seven WebArena sites (self-hosted)",
        ),
        Benchmark(
            "visualwebarena",
            "browsergym.visualwebarena",
            "visualwebarena",
            (
                "VWA_CLASSIFIEDS",
                "VWA_CLASSIFIEDS_RESET_TOKEN",
                "VWA_SHOPPING",
                "VWA_REDDIT",
                "VWA_WIKIPEDIA",
                "VWA_HOMEPAGE",
            ),
            default_task="visualwebarena.0",
            needs="the VisualWebArena sites (self-hosted)",
        ),
        Benchmark(
            "workarena",
            "browsergym.workarena",
            "workarena",
            alternatives=(
                ("SNOW_INSTANCE_URL", "SNOW_INSTANCE_UNAME", "SNOW_INSTANCE_PWD"),
                ("HUGGING_FACE_HUB_TOKEN",),
            ),
            needs="a ServiceNow instance (SNOW_INSTANCE_*) or a token for WorkArena's instance pool",
        ),
        Benchmark(
            "assistantbench",
            "browsergym.assistantbench",
            "assistantbench",
            default_task="assistantbench.validation.0",
            needs="the open web",
        ),
    )
}


def check_benchmark(name: str, environ: Mapping[str, str] | None = None) -> Benchmark:
    """The benchmark, or `BenchmarkUnavailable` naming what is missing (package or variables)."""
    environ = os.environ if environ is None else environ
    benchmark = BENCHMARKS.get(name)
    if benchmark is None:
        raise BenchmarkUnavailable(f"unknown BrowserGym benchmark {name!r}; known: {', '.join(BENCHMARKS)}")
    if importlib.util.find_spec(benchmark.module.split(".")[0]) is None or _missing_module(benchmark.module):
        package = benchmark.module.replace(".", "-")
        hint = f"pip install 'envharness[{benchmark.extra}]'" if benchmark.extra else f"pip install {package}"
        raise BenchmarkUnavailable(f"BrowserGym benchmark {name!r} needs the {package} package: {hint}")
    missing = [v for v in benchmark.variables if not environ.get(v)]
    if missing:
        raise BenchmarkUnavailable(
            f"BrowserGym benchmark {name!r} needs {', '.join(missing)} set ({benchmark.needs})"
        )
    if benchmark.alternatives and not any(
        all(environ.get(v) for v in group) for group in benchmark.alternatives
    ):
        choices = " or ".join("+".join(group) for group in benchmark.alternatives)
        raise BenchmarkUnavailable(f"BrowserGym benchmark {name!r} needs {choices} set ({benchmark.needs})")
    return benchmark


def _missing_module(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is None
    except ModuleNotFoundError:
        return True


def gym_id(benchmark: Benchmark, task: str) -> str:
    """``browsergym/<id>`` for a task named with or without its benchmark prefix."""
    if benchmark.name == "openended":
        return "browsergym/openended"
    bare = task.removeprefix("browsergym/")
    return f"browsergym/{bare if bare.startswith(benchmark.name + '.') else f'{benchmark.name}.{bare}'}"


def task_name(benchmark: Benchmark, task: str) -> str:
    """The task as our MiniWoB engine names it (no prefix) for miniwob; the gym id's tail otherwise."""
    bare = gym_id(benchmark, task).removeprefix("browsergym/")
    return bare.removeprefix("miniwob.") if benchmark.name == "miniwob" else bare


def benchmark_tasks(benchmark: Benchmark) -> tuple[str, ...]:
    """Every task the benchmark's package registers (names as `reset(task=...)` takes them)."""
    if benchmark.name == "openended":
        return ("openended",)
    import importlib

    import gymnasium

    importlib.import_module(benchmark.module)
    prefix = f"browsergym/{benchmark.name}."
    return tuple(sorted(task_name(benchmark, i) for i in gymnasium.registry if i.startswith(prefix)))


def check_task(benchmark: Benchmark, name: str) -> str:
    """`name` if the benchmark serves it, else ValueError naming a few of its tasks."""
    tasks = benchmark_tasks(benchmark)
    chosen = name.removeprefix("browsergym/") if benchmark.name == "openended" else task_name(benchmark, name)
    if chosen not in tasks:
        raise ValueError(
            f"unknown {benchmark.name} task {name!r}; e.g. {', '.join(tasks[:5])} ({len(tasks)} in all)"
        )
    return chosen
