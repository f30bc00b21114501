"""Server overhead with the echo environment: envharness's server vs OpenEnv's, driven by
the same envharness client over loopback WebSockets (and stateless HTTP /step, a fresh session
per request). Prints a markdown table. `--before REV` adds envharness at git revision REV beside
this tree (or `--after REV`), both as `envharness serve echo` processes, measured in one run in
alternate order (`_before.py`).

    .venv/bin/python bench/bench_server.py [--steps 500] [--sessions 8] [--open-close 100] [--before REV [--after REV]]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import time
from pathlib import Path

import httpx
from _before import before_env

from envharness.core.launchers import LocalServer, ServerProcess
from envharness.envs.echo import AsyncEchoEnv, EchoAction


def openenv_app():
    """OpenEnv 0.10's server around the same echo logic (its own Action/Observation)."""
    import uuid

    from openenv.core.env_server import types as oe
    from openenv.core.env_server.http_server import create_app
    from openenv.core.env_server.interfaces import Environment
    from pydantic import Field

    class Act(oe.Action):
        message: str = Field(...)

    class Obs(oe.Observation):
        echoed_message: str = ""
        message_length: int = 0

    class Echo(Environment):
        SUPPORTS_CONCURRENT_SESSIONS = True

        def __init__(self):
            self._state = oe.State(episode_id=str(uuid.uuid4()))

        def reset(self, seed=None, episode_id=None, **kw):
            self._state = oe.State(episode_id=episode_id or str(uuid.uuid4()))
            return Obs(echoed_message="ready", reward=0.0)

        def step(self, action, **kw):
            self._state.step_count += 1
            return Obs(
                echoed_message=action.message,
                message_length=len(action.message),
                reward=min(len(action.message) * 0.1, 1.0),
            )

        @property
        def state(self):
            return self._state

    return create_app(Echo, Act, Obs, env_name="echo", max_concurrent_envs=64)


async def sequential(url: str, steps: int) -> list[float]:
    async with AsyncEchoEnv(url) as env:
        await env.reset()
        latencies = []
        for i in range(steps):
            start = time.perf_counter()
            await env.step(EchoAction(message=f"message {i}"))
            latencies.append(time.perf_counter() - start)
        return latencies


async def concurrent(url: str, sessions: int, steps: int) -> float:
    async def one() -> None:
        async with AsyncEchoEnv(url) as env:
            await env.reset()
            for i in range(steps):
                await env.step(EchoAction(message=f"m{i}"))

    start = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(sessions)))
    return sessions * steps / (time.perf_counter() - start)


async def open_close(url: str, count: int) -> float:
    start = time.perf_counter()
    for _ in range(count):
        async with AsyncEchoEnv(url) as env:
            await env.reset()
    return count / (time.perf_counter() - start)


async def http_steps(url: str, count: int, parallel: int) -> float:
    """Stateless HTTP /step (reset and step on a fresh environment each), `parallel` at a time."""
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        gate = asyncio.Semaphore(parallel)

        async def one(i: int) -> None:
            async with gate:
                answer = await http.post("/step", json={"action": {"message": f"m{i}"}})
                answer.raise_for_status()

        start = time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(count)))
        return count / (time.perf_counter() - start)


async def measure(url: str, args: argparse.Namespace) -> list[str]:
    await sequential(url, 20)  # warm-up
    lat = sorted(await sequential(url, args.steps))
    rate = await concurrent(url, args.sessions, args.steps // 2)
    sessions = await open_close(url, args.open_close)
    http = await http_steps(url, args.open_close, args.sessions)
    return [
        f"{statistics.median(lat) * 1e3:.2f}",
        f"{lat[int(0.99 * len(lat)) - 1] * 1e3:.2f}",
        f"{1 / statistics.mean(lat):.0f}",
        f"{rate:.0f}",
        f"{sessions:.0f}",
        f"{http:.0f}",
    ]


def threads_of(server: ServerProcess) -> str:
    """The server process's thread count after the run (Linux), or '-'."""
    status = Path(f"/proc/{server.process.pid}/status")
    with contextlib.suppress(OSError):
        for line in status.read_text().splitlines():
            if line.startswith("Threads:"):
                return line.split()[1]
    return "-"


async def server_cpu(url: str, pid: int, args: argparse.Namespace) -> list[str]:
    """The server process's CPU time (user + system) per WebSocket step, per session opened,
    reset and closed, and per HTTP /step: unlike wall time, it holds on a loaded machine."""
    import psutil

    process = psutil.Process(pid)

    def cpu() -> float:
        times = process.cpu_times()
        return times.user + times.system

    phases = [
        (lambda: sequential(url, args.steps), args.steps),
        (lambda: open_close(url, args.open_close), args.open_close),
        (lambda: http_steps(url, args.open_close, args.sessions), args.open_close),
    ]
    cells = []
    for phase, count in phases:
        before = cpu()
        await phase()
        cells.append(f"{(cpu() - before) / count * 1e6:.0f}")
    return cells


def before_and_after(args: argparse.Namespace) -> list[list[str]]:
    """`envharness serve echo` at `args.before` and at this tree (or `args.after`), both running
    at once and measured in alternate order for `args.rounds` rounds (the machine's load falls on
    both): the server's CPU time per call, each cell the median of its rounds."""
    old = before_env(args.before)
    new = before_env(args.after) if args.after else {}
    named = ([(f"envharness {args.before}", old)] if old is not None else []) + [
        (f"envharness {args.after or '(this tree)'}", new)
    ]
    servers = [(name, ServerProcess("echo", env_vars=env_vars)) for name, env_vars in named]
    runs: dict[str, list[list[str]]] = {name: [] for name, _ in named}
    try:
        for _, server in servers:
            asyncio.run(sequential(server.base_url, 50))  # warm-up
        for round_ in range(args.rounds):
            for name, server in servers[:: 1 if round_ % 2 == 0 else -1]:
                runs[name].append(asyncio.run(server_cpu(server.base_url, server.process.pid, args)))
        threads = {name: threads_of(server) for name, server in servers}
    finally:
        for _, server in servers:
            server.stop()
    median = lambda cells: f"{statistics.median(float(c) for c in cells):g}"  # noqa: E731
    return [[name, *map(median, zip(*cells)), threads[name]] for name, cells in runs.items()]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--sessions", type=int, default=8)
    parser.add_argument("--open-close", type=int, default=100)
    parser.add_argument("--before", default="", help="also run envharness at this git revision (processes)")
    parser.add_argument("--after", default="", help="with --before: this git revision instead of the tree")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the before/after comparison")
    args = parser.parse_args()
    rows = []
    for name, app in [("envharness", "echo"), ("openenv 0.10", openenv_app())]:
        with LocalServer(app) as server:
            rows.append([name, *asyncio.run(measure(server.base_url, args))])
    compared = before_and_after(args) if args.before else []
    columns = [
        "server",
        "step p50 ms",
        "step p99 ms",
        "steps/s (1 session)",
        f"steps/s ({args.sessions} sessions)",
        "sessions opened+closed /s",
        f"HTTP /step /s ({args.sessions} at once)",
    ]
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    for row in rows:
        print("| " + " | ".join(row) + " |")
    if compared:
        head = ["server process", "CPU us / WS step", "CPU us / session (open, reset, close)"]
        head += [f"CPU us / HTTP /step ({args.sessions} at once)", "threads after"]
        print(f"\n| {' | '.join(head)} |\n|" + "---|" * len(head))
        for row in compared:
            print("| " + " | ".join(row) + " |")
        print(f"\nmedians of {args.rounds} alternating rounds; load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
