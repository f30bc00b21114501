"""Server overhead with the echo environment: envharness's server vs OpenEnv's, driven by
the same envharness client over loopback WebSockets. Prints a markdown table.

    .venv/bin/python bench/bench_server.py [--steps 500] [--sessions 8] [--open-close 100]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from envharness.core.launchers import LocalServer
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


async def measure(url: str, args: argparse.Namespace) -> list[str]:
    await sequential(url, 20)  # warm-up
    lat = sorted(await sequential(url, args.steps))
    rate = await concurrent(url, args.sessions, args.steps // 2)
    sessions = await open_close(url, args.open_close)
    return [
        f"{statistics.median(lat) * 1e3:.2f}",
        f"{lat[int(0.99 * len(lat)) - 1] * 1e3:.2f}",
        f"{1 / statistics.mean(lat):.0f}",
        f"{rate:.0f}",
        f"{sessions:.0f}",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--sessions", type=int, default=8)
    parser.add_argument("--open-close", type=int, default=100)
    args = parser.parse_args()
    rows = []
    for name, app in [("envharness", "echo"), ("openenv 0.10", openenv_app())]:
        with LocalServer(app) as server:
            rows.append([name, *asyncio.run(measure(server.base_url, args))])
    columns = [
        "server",
        "step p50 ms",
        "step p99 ms",
        "steps/s (1 session)",
        f"steps/s ({args.sessions} sessions)",
        "sessions opened+closed /s",
    ]
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
