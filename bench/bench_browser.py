"""How fast is the browser environment? envharness over WebSocket vs BrowserGym in-process.

Prints one table, measured in one run on this machine:

- reset p50: the same task again (restarted in place) and a task change (page load);
- step p50: ``click`` on a checkbox of click-checkboxes (it toggles, the episode goes on) plus
  the observation, over the WebSocket on loopback for envharness, in-process for BrowserGym;
- aggregate steps/s with 1, 4, 8 and 16 concurrent sessions (envharness: one server, one
  client per session; BrowserGym: one process per session, since its sync API runs one
  environment per thread of control);
- memory per extra session: PSS of the server (or BrowserGym processes) and its Chromium
  processes, (memory with N sessions - memory with 1) / (N - 1).

envharness runs with text observations (AXTree text only: no DOM snapshot) and, for reset and
step, also with all default text parts (AXTree + pruned HTML + element properties). BrowserGym
runs with its fast settings (``slow_mo=0``, ``pre_observation_delay=0``); it always computes
everything, screenshot included. Medians: the machine is shared and noisy.

Usage: PLAYWRIGHT_BROWSERS_PATH=.venv/ms-playwright python bench/bench_browser.py [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import multiprocessing as mp
import os
import re
import statistics
import threading
import time
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING

from envharness.envs.browsergym import miniwob

if TYPE_CHECKING:  # the BrowserGym worker processes import this module too: keep them light
    from envharness.envs.browsergym import AsyncBrowserGymEnv

TASK = "click-checkboxes"
OTHER_TASK = "click-test"
TEXT_PARTS = {"axtree": True, "pruned_html": False, "extra_properties": False}
DEFAULT_PARTS = {"axtree": True, "pruned_html": True, "extra_properties": True}


def ms(seconds: list[float]) -> str:
    return f"{statistics.median(seconds) * 1000:.0f} ms" if seconds else "-"


def tree_memory_mb(pid: int) -> float:
    """Memory of `pid` and all its descendants in MB: the sum of their PSS (shared pages counted
    once, split between the processes sharing them; summing RSS would count Chromium's shared
    libraries once per renderer)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        todo.extend(children.get(p, []))
        try:
            for line in Path(f"/proc/{p}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


def checkbox_bid(axtree_txt: str) -> str:
    return re.search(r"\[(\w+)\] checkbox", axtree_txt).group(1)


# -- envharness -----------------------------------------------------------------------------------
async def _session(base_url: str, seed: int) -> tuple[AsyncBrowserGymEnv, str]:
    from envharness.envs.browsergym import AsyncBrowserGymEnv

    env = AsyncBrowserGymEnv(base_url)
    result = await env.reset(task=TASK, seed=seed)
    return env, checkbox_bid(result.observation.axtree_txt)


async def _timed_steps(env: AsyncBrowserGymEnv, bid: str, n: int) -> list[float]:
    from envharness.envs.browsergym import BrowserGymAction

    times = []
    for _ in range(n):
        t = time.perf_counter()
        result = await env.step(BrowserGymAction(action_str=f"click('{bid}')"))
        times.append(time.perf_counter() - t)
        assert not result.observation.last_action_error, result.observation.last_action_error
    return times


async def bench_envharness(parts: dict, n: int, levels: list[int], steps_per_session: int) -> dict:
    from envharness.core.launchers import launch_local

    server = launch_local("browsergym", options=parts, server_args=["--max-sessions", str(max(levels, default=1) + 2)])
    out: dict = {}
    try:
        env, bid = await _session(server.base_url, 0)
        await _timed_steps(env, bid, 3)  # warm-up
        same, change = [], []
        for seed in range(n):
            t = time.perf_counter()
            await env.reset(task=TASK, seed=seed)
            same.append(time.perf_counter() - t)
        for seed in range(max(2, n // 3)):
            for task in (OTHER_TASK, TASK):
                t = time.perf_counter()
                await env.reset(task=task, seed=seed)
                change.append(time.perf_counter() - t)
        result = await env.reset(task=TASK, seed=0)
        out["reset_same"], out["reset_change"] = same, change
        out["step"] = await _timed_steps(env, checkbox_bid(result.observation.axtree_txt), n)
        await env.close()
        for level in levels:
            sessions = await asyncio.gather(*(_session(server.base_url, s) for s in range(level)))
            t = time.perf_counter()
            await asyncio.gather(*(_timed_steps(e, b, steps_per_session) for e, b in sessions))
            out[f"rate_{level}"] = level * steps_per_session / (time.perf_counter() - t)
            out[f"rss_{level}"] = tree_memory_mb(server.process.pid)
            await asyncio.gather(*(e.close() for e, _ in sessions))
    finally:
        server.stop()
    return out


# -- BrowserGym, one process per session ------------------------------------------------------------
class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


def _browsergym_worker(miniwob_url: str, resets: int, steps: int, barrier, queue) -> None:
    os.environ["MINIWOB_URL"] = miniwob_url
    import gymnasium as gym

    import browsergym.miniwob  # noqa: F401

    env = gym.make(f"browsergym/miniwob.{TASK}", slow_mo=0, pre_observation_delay=0.0)
    from browsergym.utils.obs import flatten_axtree_to_str

    reset_times = []
    for seed in range(resets):
        t = time.perf_counter()
        obs, _ = env.reset(seed=seed)
        reset_times.append(time.perf_counter() - t)
    bid = checkbox_bid(flatten_axtree_to_str(obs["axtree_object"]))
    env.step(f"click('{bid}')")  # warm-up
    barrier.wait()
    t0 = time.perf_counter()
    step_times = []
    for _ in range(steps):
        t = time.perf_counter()
        obs, *_ = env.step(f"click('{bid}')")
        step_times.append(time.perf_counter() - t)
    t1 = time.perf_counter()
    queue.put({"reset": reset_times, "step": step_times, "t0": t0, "t1": t1, "rss": tree_memory_mb(os.getpid())})
    barrier.wait()  # hold the browsers open until every worker has measured its memory
    env.close()


def bench_browsergym(n: int, levels: list[int], steps_per_session: int) -> dict:
    handler = functools.partial(_QuietHandler, directory=str(miniwob.html_root()))
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_port}/miniwob/"
    ctx = mp.get_context("spawn")
    out: dict = {}
    try:
        for level in levels:
            barrier, queue = ctx.Barrier(level), ctx.Queue()
            steps = n if level == 1 else steps_per_session
            procs = [ctx.Process(target=_browsergym_worker, args=(url, max(2, n // 4) if level == 1 else 1, steps, barrier, queue))
                     for _ in range(level)]
            for p in procs:
                p.start()
            results = [queue.get(timeout=600) for _ in procs]
            for p in procs:
                p.join(timeout=120)
            if level == 1:
                out["reset_change"], out["step"] = results[0]["reset"], results[0]["step"]
            start, end = min(r["t0"] for r in results), max(r["t1"] for r in results)
            out[f"rate_{level}"] = level * steps / (end - start)
            out[f"rss_{level}"] = sum(r["rss"] for r in results)
    finally:
        httpd.shutdown()
    return out


# -- the table --------------------------------------------------------------------------------------
def per_extra_session(result: dict, levels: list[int]) -> str:
    top = max(levels)
    if top < 2 or f"rss_{top}" not in result or "rss_1" not in result:
        return "-"
    return f"{(result[f'rss_{top}'] - result['rss_1']) / (top - 1):.0f} MB"


def print_table(header: tuple, rows: list[tuple]) -> None:
    """A markdown table, columns padded to their widest cell."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    for i, row in enumerate([header, *rows]):
        print("| " + " | ".join(str(c).ljust(w) for c, w in zip(row, widths)) + " |")
        if i == 0:
            print("|" + "|".join("-" * (w + 2) for w in widths) + "|")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions, fewer BrowserGym sessions")
    parser.add_argument("--no-browsergym", action="store_true", help="measure envharness only")
    args = parser.parse_args()
    n = 15 if args.quick else 40
    levels = [1, 4, 8, 16]
    bg_levels = [1, 4] if args.quick else [1, 4, 8]
    steps_per_session = 10 if args.quick else 25

    text = asyncio.run(bench_envharness(TEXT_PARTS, n, levels, steps_per_session))
    full = asyncio.run(bench_envharness(DEFAULT_PARTS, n, [], steps_per_session))
    bg = {} if args.no_browsergym else bench_browsergym(max(6, n // 3), bg_levels, steps_per_session)

    rows = [
        ("reset p50, same task", ms(text["reset_same"]), ms(full["reset_same"]), ms(bg.get("reset_change", [])), "<= 150 ms"),
        ("reset p50, task change", ms(text["reset_change"]), ms(full["reset_change"]), ms(bg.get("reset_change", [])), "<= 150 ms"),
        ("step p50 (click + observation)", ms(text["step"]), ms(full["step"]), ms(bg.get("step", [])), "<= 40 ms"),
        *[(f"steps/s, {lv} session{'s' if lv > 1 else ''}", f"{text[f'rate_{lv}']:.1f}", "",
           f"{bg[f'rate_{lv}']:.1f}" if f"rate_{lv}" in bg else "-", ">= 20 at 8" if lv == 8 else "") for lv in levels],
        ("memory per extra session", per_extra_session(text, levels), "", per_extra_session(bg, bg_levels), "<= 60 MB"),
    ]
    print_table(("", "envharness, AXTree text", "envharness, AXTree+HTML+props", "BrowserGym 0.14.3 in-process", "target"), rows)
    print(f"\n{os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.1f}; "
          f"{n} resets/steps per median; {steps_per_session} steps per session for steps/s.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
