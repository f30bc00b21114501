"""Where one browser step's time goes: parse, checks, input, settle, reward, observation, wire.

Two in-process `browsergym` servers (`LocalServer`, uvicorn in a thread), one with the
one-round-trip actionability checks (``fast_actions=True``, the default) and one with
Playwright's locator actions (``fast_actions=False``, the old path), driven in turn over the
WebSocket by one client each (a checkbox click on each, a hidden bid's click and ``noop()`` on
the first), so all columns come from the same minutes of the machine.
The server-side parts are timed by wrapping the functions `BrowserGymEnvironment.step_async`
calls; "read" is the rest of the server's step: the reward, the observation and the page
titles, requested together (each is also shown alone: they overlap); "wire" is the client's
time minus the server's `step_async` (WebSocket, JSON, the server's dispatch, and the thread
switches of running client and server in one process).

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
from collections.abc import Callable
from typing import Any

import envharness.envs.browsergym.actionability as actionability
import envharness.envs.browsergym.environment as environment
from envharness.core.launchers import LocalServer
from envharness.envs.browsergym import AsyncBrowserGymEnv, BrowserGymAction

PARTS = ("parse", "checks", "input", "settle", "read", "reward", "observation", "titles", "wire")
LABELS = {
    "read": "read: reward, observation and titles, together",
    "reward": "- reward alone",
    "observation": "- observation (mark, AXTree, unmark) alone",
    "titles": "- page titles alone",
    "total": "**total (client)**",
}
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
    out["read"] = (
        parts.get("server", 0.0)
        - parts.get("parse", 0.0)
        - parts.get("action", 0.0)
        - parts.get("settle", 0.0)
    )
    out["wire"] = client_s - parts.get("server", 0.0)
    out["total"] = client_s
    return out


#: (column, server, action): the server's path and the action; {box} is a checkbox's bid.
COLUMNS = (
    ("click, new path", "fast", "click('{box}')"),
    ("click, Playwright path (old)", "playwright", "click('{box}')"),
    ("click on a hidden bid, new path", "fast", "click('2')"),
    ("noop()", "fast", "noop()"),
)


async def run(steps: int) -> dict[str, dict[str, list[float]]]:
    instrument()
    servers = {
        "fast": LocalServer("browsergym", **TEXT_ONLY),
        "playwright": LocalServer("browsergym", fast_actions=False, **TEXT_ONLY),
    }
    results: dict[str, dict[str, list[float]]] = {column: defaultdict(list) for column, _, _ in COLUMNS}
    try:
        envs, bids = {}, {}
        for name, server in servers.items():
            envs[name] = AsyncBrowserGymEnv(server.base_url)
            obs = (await envs[name].reset(task="click-checkboxes", seed=0)).observation
            bids[name] = re.search(r"\[(\w+)\] checkbox", obs.axtree_txt).group(1)
        for i in range(steps + 3):
            for column, name, action in COLUMNS:
                _current.clear()
                start = time.perf_counter()
                result = await envs[name].step(BrowserGymAction(action_str=action.format(box=bids[name])))
                elapsed = time.perf_counter() - start
                assert (action == "click('2')") == bool(result.observation.last_action_error), (
                    result.observation.last_action_error
                )
                if i >= 3:  # warm-up
                    for part, seconds in split(dict(_current), elapsed).items():
                        results[column][part].append(seconds)
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
    load = os.getloadavg()[0]
    results = asyncio.run(run(args.steps))
    print("| part of a step (p50, ms) | " + " | ".join(column for column, _, _ in COLUMNS) + " |")
    print("|---" * (len(COLUMNS) + 1) + "|")
    for part in (*PARTS, "total"):
        cells = [f"{statistics.median(results[column][part]) * 1000:.1f}" for column, _, _ in COLUMNS]
        print(f"| {LABELS.get(part, part)} | " + " | ".join(cells) + " |")
    print(
        f"\n{args.steps} rounds of the four steps in turn (click-checkboxes, AXTree text observation); "
        f"{os.cpu_count()} CPUs, load average {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end. "
        "The parts' medians need not add up to the total's."
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
