"""Where one browser step's time goes: parse, checks, input, settle, reward, observation, wire.

Two in-process `browsergym` servers (`LocalServer`, uvicorn in a thread), one with the
one-round-trip actionability checks (``fast_actions=True``, the default) and one with
Playwright's locator actions (``fast_actions=False``, the old path), driven alternately over
the WebSocket by one client each, so both columns come from the same minutes of the machine.
The server-side parts are timed by wrapping the functions `BrowserGymEnvironment.step_async`
calls; "wire" is the client's time minus the server's `step_async` (WebSocket, JSON, the
server's dispatch, and the thread switches of running client and server in one process).

Usage: PLAYWRIGHT_BROWSERS_PATH=.venv/ms-playwright python bench/bench_step_breakdown.py [--steps N]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import time
from collections import defaultdict
from typing import Any, Callable

from envharness.core.launchers import LocalServer
import envharness.envs.browsergym.actionability as actionability
import envharness.envs.browsergym.environment as environment
from envharness.envs.browsergym import AsyncBrowserGymEnv, BrowserGymAction

PARTS = ("parse", "checks", "input", "settle", "reward", "observation", "titles", "other (server)", "wire")
TEXT_ONLY = {"axtree": True, "pruned_html": False, "extra_properties": False}

_current: dict[str, float] = defaultdict(float)


def _timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return await fn(*args, **kwargs)
        finally:
            _current[name] += time.perf_counter() - start
    return wrapper


def _timed_sync(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            _current[name] += time.perf_counter() - start
    return wrapper


def instrument() -> None:
    """Wrap what a step calls; the parts land in `_current` (one step runs at a time)."""
    from playwright.async_api import Page

    environment.parse_actions = _timed_sync("parse", environment.parse_actions)
    environment.execute = _timed("action", environment.execute)
    actionability.check_element = _timed("checks", actionability.check_element)
    Page.wait_for_load_state = _timed("settle", Page.wait_for_load_state)
    Page.title = _timed("titles", Page.title)
    env_cls = environment.BrowserGymEnvironment
    env_cls._validate = _timed("reward", env_cls._validate)
    environment.extract_page_observation = _timed("observation", environment.extract_page_observation)
    env_cls.step_async = _timed("server", env_cls.step_async)


def split(parts: dict[str, float], client_s: float) -> dict[str, float]:
    out = {k: parts.get(k, 0.0) for k in ("parse", "checks", "settle", "reward", "observation", "titles")}
    out["input"] = parts.get("action", 0.0) - parts.get("checks", 0.0)
    out["other (server)"] = parts.get("server", 0.0) - sum(out.values())
    out["wire"] = client_s - parts.get("server", 0.0)
    out["total"] = client_s
    return out


async def run(steps: int) -> dict[str, dict[str, list[float]]]:
    instrument()
    servers = {"fast": LocalServer("browsergym", **TEXT_ONLY),
               "playwright": LocalServer("browsergym", fast_actions=False, **TEXT_ONLY)}
    results: dict[str, dict[str, list[float]]] = {name: defaultdict(list) for name in servers}
    try:
        envs, bids = {}, {}
        for name, server in servers.items():
            envs[name] = AsyncBrowserGymEnv(server.base_url)
            obs = (await envs[name].reset(task="click-checkboxes", seed=0)).observation
            bids[name] = re.search(r"\[(\w+)\] checkbox", obs.axtree_txt).group(1)
        for i in range(steps + 3):
            for name, env in envs.items():
                _current.clear()
                start = time.perf_counter()
                result = await env.step(BrowserGymAction(action_str=f"click('{bids[name]}')"))
                elapsed = time.perf_counter() - start
                assert not result.observation.last_action_error, result.observation.last_action_error
                if i >= 3:  # warm-up
                    for part, seconds in split(dict(_current), elapsed).items():
                        results[name][part].append(seconds)
        for env in envs.values():
            await env.close()
    finally:
        for server in servers.values():
            server.close()
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=60)
    args = parser.parse_args()
    results = asyncio.run(run(args.steps))
    print("| part of a click step (p50, ms) | one-round-trip checks + page.mouse | Playwright locator.click (old) |")
    print("|---|---|---|")
    for part in (*PARTS, "total"):
        cells = [f"{statistics.median(results[name][part]) * 1000:.1f}" for name in ("fast", "playwright")]
        print(f"| {'**total (client)**' if part == 'total' else part} | {cells[0]} | {cells[1]} |")
    print(f"\n{args.steps} alternating clicks on a click-checkboxes checkbox, AXTree text observation; "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}. The parts' medians need not add up "
          "to the total's.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
