"""Shared test helpers: an in-process echo server on loopback, polling, the prewarmed interpreter
that command-line tests fork from; and how `make test` spreads the suite over its workers."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from _prewarmed import Prewarmed, prewarmed_env

from envharness.core.launchers import LocalServer

ROOT = Path(__file__).resolve().parents[1]

# Under `make test` each test process (xdist worker) has its share of the cores: torch's (and
# OpenBLAS's) thread pools get that many threads, here and in every process the tests start,
# rather than each process spinning a pool as wide as the machine against the others'. On this
# 2-core machine with 2 workers: one thread each, ~10 % less CPU for the same torch-heavy files.
# Hugging Face tokenizers' own pool (Rust threads that spin between batches) is off: another
# 6-8 % less on those files. (Read when torch and tokenizers load: conftest is imported before
# any test module.)
pytest_plugins = ["_cpu_log"]  # ENVHARNESS_TEST_CPU_LOG=FILE: each test's CPU seconds (tests/_cpu_log.py)

_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _WORKERS > 1:
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // _WORKERS)))
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


#: Test files in order of cost, heaviest first (as measured in `make test` on a 2-core machine);
#: a "file::test" entry places one test of a spread file (below) on its own. The workers take
#: them in this order, then the rest in collection order: the longest jobs first and the many
#: short ones last, so that the workers end together (longest-processing-time-first). The
#: single tests of minutes come first: the check over every MiniWoB task, the Ray fleet, the
#: switch differential, the GPU check's CPU steps. A guess that is off costs only time.
HEAVIEST_FIRST = [
    "test_check.py::test_browsergym_passes_every_check_on_every_miniwob_task",
    "test_fleet_ray.py",
    "test_browser_switch_differential.py",
    "test_device.py::test_the_gpu_check_checks_itself_on_the_cpu_with_a_tiny_model",
    "test_eval_protocol.py",
    "test_browser_fidelity.py",
    "test_many_processes.py::test_train_processes_2_writes_each_file_once_and_resumes",
    "test_many_processes.py::test_two_processes_take_the_step_of_one_full_lora_and_without_signal_on_a_rank",
    "test_browser_gym_engine.py",
    "test_browser_all_tasks.py",
    "test_check.py",  # `check` over every TextArena game, the floor on MiniWoB
    "test_many_processes.py",  # two-process training runs, each its own
    "test_async_processes.py",
    "test_job_interrupts.py",
    "test_sft.py",
    "test_replay.py",
    "test_device.py",
    "test_models_embedded.py",
    "test_lifecycle.py",
    "test_policy_training.py",
    "test_trl_environment_example.py",
    "test_readme_commands.py",
    "test_browser_warm_pool.py",
    "test_browser_isolation.py",
    "test_browser_engine.py",
    "test_fleet_router.py",
]


#: Files whose tests spread over the workers one by one: the README commands (each bash block is
#: a test of its own, in its own scratch folder) and the heavy files whose tests share no module
#: fixture (each starts its own processes); every other file runs whole in one worker.
SPREAD_FILES = {
    "test_readme_commands.py",
    "test_check.py",
    "test_many_processes.py",
    "test_async_processes.py",
    "test_device.py",
    "test_job_interrupts.py",
}


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`--dist loadfile` with SPREAD_FILES spread: a file's tests stay in one worker, so its module
    fixtures (a browser server, a loaded model, a training run) are built once.

    (Not `--dist loadgroup` with marks: pytest-xdist 3.8 marks a group by rewriting
    `item._nodeid`, which pytest 9 no longer reads, so every test became its own group and files
    were split over the workers, each building the module's fixtures again.)"""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class FileScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return nodeid if Path(path).name in SPREAD_FILES else path

    return FileScheduling(config, log)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The heaviest tests and files go first."""
    rank = {name: i for i, name in enumerate(HEAVIEST_FIRST)}

    def place(item: pytest.Item) -> int:
        test = f"{item.path.name}::{getattr(item, 'originalname', item.name)}"
        return rank.get(test, rank.get(item.path.name, len(rank)))

    items.sort(key=place)


def wait_until(predicate: Callable[[], Any], timeout_s: float = 60.0, interval_s: float = 0.02) -> Any:
    """Poll `predicate` until it is truthy; fail the test with its last value otherwise. The
    limit is a hang guard, far above what a slow or busy machine needs."""
    deadline = time.monotonic() + timeout_s
    value = predicate()
    while not value and time.monotonic() < deadline:
        time.sleep(interval_s)
        value = predicate()
    assert value, f"condition not met within {timeout_s}s"
    return value


async def wait_until_async(
    predicate: Callable[[], Any], timeout_s: float = 60.0, interval_s: float = 0.02
) -> Any:
    """`wait_until` inside an event loop: the loop runs (timers fire) while it polls."""
    deadline = time.monotonic() + timeout_s
    value = predicate()
    while not value and time.monotonic() < deadline:
        await asyncio.sleep(interval_s)
        value = predicate()
    assert value, f"condition not met within {timeout_s}s"
    return value


class FourMethods:
    """An echo client with OpenEnv's four names only (`reset`, `step`, `state`, `close`), not
    envharness's `EnvClient`: what a user's or OpenEnv's own client offers."""

    def __init__(self, url: str):
        from envharness.envs.echo import EchoEnv

        self._inner = EchoEnv(base_url=url)
        self.reset, self.step, self.state, self.close = (
            self._inner.reset, self._inner.step, self._inner.state, self._inner.close,
        )  # fmt: skip


def health(server: LocalServer, **headers: str) -> dict[str, Any]:
    reply = httpx.get(f"{server.base_url}/health", headers=headers)
    assert reply.status_code == 200, reply.text
    return reply.json()


def server_tasks(server: LocalServer) -> set[asyncio.Task]:
    """The asyncio tasks alive on the server's event loop (not counting this probe)."""

    async def probe() -> set[asyncio.Task]:
        return {t for t in asyncio.all_tasks() if t is not asyncio.current_task()}

    assert server.loop is not None
    return asyncio.run_coroutine_threadsafe(probe(), server.loop).result(timeout=60)


@pytest.fixture(scope="session")
def prewarmed():
    """One interpreter per test process with torch, transformers and TRL imported, which the
    README commands and the `_jobs.Job`s given it fork from (`_prewarmed.py`; started on first
    use). `ENVHARNESS_TEST_COLD=1`: every command starts cold instead, as typed."""
    server = Prewarmed(prewarmed_env(ROOT), enabled=not os.environ.get("ENVHARNESS_TEST_COLD"))
    yield server
    server.close()


@pytest.fixture(scope="module")
def echo_server():
    with LocalServer("echo") as server:
        yield server


# -- browser servers shared by the files of one test process ---------------------------------
# A browser server costs ~1.8 CPU-s to its first reset (Playwright's driver and a Chromium).
# Files whose tests only open sessions on a server (each session is isolated: its own browser
# context) share one per test process (xdist worker) rather than start one per file. A file
# that counts a server's sessions, kills its browser or changes its options starts its own.
@pytest.fixture(scope="session")
def browser_server():
    """A browser server with the default options, shared by this test process's files."""
    with LocalServer("browsergym") as server:
        yield server


@pytest.fixture(scope="session")
def training_browser_server():
    """A browser server with `train`'s options (`train_server_options("browsergym")`: no pruned HTML, no
    element properties, what the compact training prompt reads), shared like `browser_server`."""
    from envharness.integrations.trl.servers import train_server_options

    with LocalServer("browsergym", **train_server_options("browsergym")) as server:
        yield server


@pytest.fixture(scope="session")
def compact_browser_url(training_browser_server):
    """The GRPO exactness tests' environment: `training_browser_server`'s URL."""
    return training_browser_server.base_url
