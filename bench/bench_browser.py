"""How fast is the browser environment? envharness over WebSocket vs BrowserGym in-process.

Prints one table, measured in one run on this machine:

- reset p50: the same task again (restarted in place) and a task change (now rewritten in place;
  before, a page load);
- step p50: ``click`` on a checkbox of click-checkboxes (it toggles, the episode goes on) plus
  the observation, over the WebSocket on loopback for envharness, in-process for BrowserGym;
- aggregate steps/s with 1, 4, 8 and 16 concurrent sessions (envharness: one server, one
  client per session; BrowserGym: one process per session, since its sync API runs one
  environment per thread of control);
- memory per extra session: PSS of the server (or BrowserGym processes) and its Chromium
  processes, (memory with N sessions - memory with 1) / (N - 1);
- a fresh session: open + reset (what a user who does not keep sessions pays per episode), with
  0.3 s between sessions (a model thinking) and back to back (an Eval Protocol sweep), and fresh
  sessions per second back to back (open + reset + step + close, one after another);
- the floor: the same operations in raw async Playwright on the same Chromium with the same
  flags, no server (click: `page.mouse.click` + the observation's CDP requests; reset in place:
  MiniWoB's own restart + observation; task change: `page.goto` + restart + observation, and in
  place: the document rewrite + restart + observation); the observation is what each mode needs
  (`raw_observation`): the AXTree for the text; BrowserGym's marking, AXTree, visibilities, DOM
  snapshot and unmarking for the serve default (AXTree + pruned HTML + element properties); plus
  the PNG screenshot. A second table puts each mode against its own floor;
- scale (``--scale``, in the full run): 8, 64 and 256 concurrent sessions on one server: step
  p50, steps/s, errors and memory per session.

Columns: envharness before task changes in place (``--before REV``: that revision's ``src/`` in
the server process, see `_before.py`), envharness now (text observations, and all default text parts), the
floor, BrowserGym.

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
import sys
import threading
import time
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING

from _before import BEFORE_TASK_SWITCH, before_env

from envharness.envs.browsergym import miniwob
from envharness.envs.browsergym.miniwob_pages import serve_miniwob_request, switch_document

if TYPE_CHECKING:  # the BrowserGym worker processes import this module too: keep them light
    from envharness.envs.browsergym import AsyncBrowserGymEnv

TASK = "click-checkboxes"
OTHER_TASK = "click-test"
TEXT_PARTS = {"axtree": True, "pruned_html": False, "extra_properties": False}
DEFAULT_PARTS = {"axtree": True, "pruned_html": True, "extra_properties": True}
SCREENSHOT_PARTS = {**DEFAULT_PARTS, "screenshot": True}
#: The observation modes measured against their own floor (the second table).
MODES = {
    "AXTree text": TEXT_PARTS,
    "serve default (AXTree + pruned HTML + element properties)": DEFAULT_PARTS,
    "serve default + screenshot (PNG)": SCREENSHOT_PARTS,
}


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


async def _fresh_sessions(base_url: str, n: int, pause_s: float) -> tuple[list[float], float]:
    """Open + reset times of `n` fresh sessions, and cycles/s of open + reset + step + close;
    `pause_s` between sessions (the model thinking: the pool refills meanwhile), or none."""
    from envharness.envs.browsergym import AsyncBrowserGymEnv, BrowserGymAction

    opened, start = [], time.perf_counter()
    for seed in range(n):
        t = time.perf_counter()
        env = AsyncBrowserGymEnv(base_url)
        result = await env.reset(task=TASK, seed=seed)
        opened.append(time.perf_counter() - t)
        await env.step(BrowserGymAction(action_str=f"click('{checkbox_bid(result.observation.axtree_txt)}')"))
        await env.close()
        await asyncio.sleep(pause_s)
    return opened, n / (time.perf_counter() - start)


async def bench_envharness(
    parts: dict, n: int, levels: list[int], steps_per_session: int, env_vars: dict | None = None
) -> dict:
    from envharness.core.launchers import launch_local

    server = launch_local(
        "browsergym",
        options=parts,
        server_args=["--max-sessions", str(max(levels, default=1) + 2)],
        env_vars=env_vars,
    )
    out: dict = {}
    try:
        env, bid = await _session(server.base_url, 0)
        await _timed_steps(env, bid, 3)  # warm-up
        if levels:
            out["fresh"], _ = await _fresh_sessions(server.base_url, n, 0.3)
            await asyncio.sleep(1.0)  # the pool refills
            out["fresh_back_to_back"], out["fresh_rate"] = await _fresh_sessions(server.base_url, 2 * n, 0.0)
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
        out["reset_same"], out["reset_change"] = same, change
        if levels and not env_vars:  # the task change named in advance (``next_task``): the pool prepares it
            hinted = []
            for seed in range(max(2, n // 3)):
                for task, next_task in ((OTHER_TASK, TASK), (TASK, OTHER_TASK)):
                    await asyncio.sleep(0.3)  # the model thinking: the next page is prepared meanwhile
                    t = time.perf_counter()
                    await env.reset(task=task, seed=seed, next_task=next_task)
                    hinted.append(time.perf_counter() - t)
            out["reset_hinted"] = hinted
        result = await env.reset(task=TASK, seed=0)
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


# -- the floor: raw async Playwright on the same Chromium, no server ---------------------------------
_START_JS = "([seed]) => { Math.seedrandom(seed); core.startEpisodeReal(); return core.getUtterance(); }"


async def raw_observation(cdp, parts: dict) -> None:
    """The CDP requests an observation of `parts` needs, sent as envharness sends them (one
    session, pipelined), with nothing parsed or flattened. AXTree text: the AXTree alone. With
    pruned HTML or element properties: BrowserGym's marking script, the AXTree and the element
    visibilities (the marking's IntersectionObserver reports on the next frame), then the DOM
    snapshot and the unmarking. Screenshot: the viewport at MiniWoB's scale, as PNG."""
    from envharness.envs.browsergym.observation import _call
    from envharness.envs.browsergym.observation_text import BID_ATTR

    def evaluate(expression: str, await_promise: bool = False):
        params = {"expression": expression, "returnByValue": True, "awaitPromise": await_promise}
        return cdp.send("Runtime.evaluate", params)

    if not (parts["pruned_html"] or parts["extra_properties"]):
        await cdp.send("Accessibility.getFullAXTree")
    else:
        first = [
            evaluate(_call("frame_mark_elements", "", BID_ATTR, "standard_html", False)),
            cdp.send("Accessibility.getFullAXTree"),
        ]
        if parts["extra_properties"]:
            first.append(evaluate("window.browsergym_visibility_ready", True))
        await asyncio.gather(*first)
        snapshot = {"computedStyles": [], "includeDOMRects": True, "includePaintOrder": True}
        await asyncio.gather(
            cdp.send("DOMSnapshot.captureSnapshot", snapshot),
            evaluate(_call("frame_unmark_elements", BID_ATTR)),
        )
    if parts.get("screenshot"):
        clip = {**miniwob.MINIWOB_VIEWPORT, "x": 0, "y": 0, "scale": miniwob.MINIWOB_SCALE_FACTOR}
        await cdp.send("Page.captureScreenshot", {"format": "png", "clip": clip})


async def bench_floor(n: int, parts: dict = TEXT_PARTS, fresh: bool = True) -> dict:
    """What the operations cost in raw Playwright and CDP: no server, no parsing, no checks; the
    observation is what `parts` needs (`raw_observation`); `fresh`: fresh contexts too."""
    from playwright.async_api import async_playwright

    from envharness.envs.browsergym.engine import BrowserEngine

    engine = BrowserEngine()  # for its Chromium path and flags only
    out: dict = {"step": [], "reset_same": [], "reset_change": [], "fresh": []}  # + reset_switch
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(
            executable_path=engine.executable_path,
            args=engine.args,
            ignore_default_args=["--hide-scrollbars"],
        )

        async def serve(route):
            await serve_miniwob_request(route)

        async def open_page():
            context = await browser.new_context(viewport=miniwob.MINIWOB_VIEWPORT)
            await context.route(f"{miniwob.MINIWOB_ORIGIN}/**", serve)
            page = await context.new_page()
            return context, page, await context.new_cdp_session(page)

        async def load(page, cdp, task, seed):
            await page.goto(miniwob.task_url(task))
            await page.evaluate(_START_JS, [seed])
            await raw_observation(cdp, parts)

        context, page, cdp = await open_page()
        await load(page, cdp, TASK, 0)
        for seed in range(n):
            t = time.perf_counter()
            await page.evaluate(_START_JS, [seed])
            await raw_observation(cdp, parts)
            out["reset_same"].append(time.perf_counter() - t)
        for seed in range(max(2, n // 3)):
            for task in (OTHER_TASK, TASK):
                t = time.perf_counter()
                await load(page, cdp, task, seed)
                out["reset_change"].append(time.perf_counter() - t)
        out["reset_switch"] = []
        for seed in range(max(2, n // 3)):
            for task in (OTHER_TASK, TASK):
                t = time.perf_counter()
                await switch_document(page, task, miniwob.task_url(task))
                await page.evaluate(_START_JS, [seed])
                await raw_observation(cdp, parts)
                out["reset_switch"].append(time.perf_counter() - t)
        box = await page.locator("input[type=checkbox]").first.bounding_box()
        for _ in range(n):
            t = time.perf_counter()
            await page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
            await raw_observation(cdp, parts)
            out["step"].append(time.perf_counter() - t)
        await context.close()
        for seed in range(n if fresh else 0):
            t = time.perf_counter()
            context, page, cdp = await open_page()
            await load(page, cdp, TASK, seed)
            out["fresh"].append(time.perf_counter() - t)
            await context.close()
        await browser.close()
    return out


# -- scale: many sessions on one server ------------------------------------------------------------------
async def bench_scale(levels: list[int], steps: int) -> dict:
    """Step p50, steps/s, errors and memory per session with `levels` concurrent sessions."""
    from envharness.core.launchers import launch_local
    from envharness.envs.browsergym import BrowserGymAction

    server = launch_local(
        "browsergym", options=TEXT_PARTS, server_args=["--max-sessions", str(max(levels) + 8)]
    )
    out: dict = {}
    try:
        base = tree_memory_mb(server.process.pid)
        for level in levels:
            progress(f"scale: opening {level} sessions")
            sessions, errors = [], 0
            for first in range(0, level, 32):  # open in waves, as a trainer's workers start
                opened = await asyncio.gather(
                    *(_session(server.base_url, s) for s in range(first, min(level, first + 32))),
                    return_exceptions=True,
                )
                errors += sum(isinstance(o, BaseException) for o in opened)
                sessions += [o for o in opened if not isinstance(o, BaseException)]
            memory = tree_memory_mb(server.process.pid)

            async def play(env, bid):
                nonlocal errors
                times = []
                for _ in range(steps):
                    t = time.perf_counter()
                    try:
                        result = await env.step(BrowserGymAction(action_str=f"click('{bid}')"))
                        errors += bool(result.observation.last_action_error)
                    except Exception:
                        errors += 1
                        continue
                    times.append(time.perf_counter() - t)
                return times

            progress(f"scale: {level} sessions stepping")
            t = time.perf_counter()
            played = await asyncio.gather(*(play(e, b) for e, b in sessions))
            wall = time.perf_counter() - t
            times = [x for p in played for x in p]
            out[level] = {
                "step": times,
                "rate": len(times) / wall,
                "errors": errors,
                "mb_per_session": (memory - base) / max(1, len(sessions)),
            }
            await asyncio.gather(*(e.close() for e, _ in sessions), return_exceptions=True)
            await asyncio.sleep(2)  # the closed contexts go before the next level is measured
    finally:
        server.stop()
    return out


def progress(what: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {what}", file=sys.stderr, flush=True)


# -- BrowserGym, one process per session ------------------------------------------------------------
class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


def _browsergym_worker(miniwob_url: str, resets: int, steps: int, barrier, queue) -> None:
    os.environ["MINIWOB_URL"] = miniwob_url
    import browsergym.miniwob  # noqa: F401
    import gymnasium as gym

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
    queue.put(
        {"reset": reset_times, "step": step_times, "t0": t0, "t1": t1, "rss": tree_memory_mb(os.getpid())}
    )
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
            procs = [
                ctx.Process(
                    target=_browsergym_worker,
                    args=(url, max(2, n // 4) if level == 1 else 1, steps, barrier, queue),
                )
                for _ in range(level)
            ]
            for p in procs:
                p.start()
            results = [queue.get(timeout=600) for _ in procs]
            for p in procs:
                p.join(timeout=120)
            if level == 1:
                out["reset_change"], out["step"] = results[0]["reset"], results[0]["step"]
                out["fresh"] = results[0]["reset"]  # every BrowserGym reset launches its browsers
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


def bench_own_floors(n: int, rounds: int) -> tuple[dict, dict]:
    """Each mode of `MODES`, envharness and its floor by turns (`rounds` times, the order flipped
    each round, `n` of each operation per turn): a busy machine weighs on both alike."""
    ours: dict = {mode: {} for mode in MODES}
    floors: dict = {mode: {} for mode in MODES}
    for r in range(rounds):
        for mode, parts in MODES.items():
            turns = [
                (ours, lambda parts=parts: bench_envharness(parts, n, [], 0)),
                (floors, lambda parts=parts: bench_floor(n, parts, False)),
            ]
            for into, run in turns if r % 2 == 0 else reversed(turns):
                for key, values in asyncio.run(run()).items():
                    into[mode].setdefault(key, []).extend(values)
            progress(f"own floors: round {r + 1}, {mode} done")
    return ours, floors


def own_floor_rows(results: dict, floors: dict) -> list[tuple]:
    """Per observation mode: step, same-task reset and task change against that mode's floor."""
    rows = []
    operations = (
        ("step (click + observation)", "step", "step"),
        ("reset, same task (in place)", "reset_same", "reset_same"),
        ("reset, task change (in place)", "reset_change", "reset_switch"),
    )
    for mode, result in results.items():
        for label, key, floor_key in operations:
            ours, raw = statistics.median(result[key]), statistics.median(floors[mode][floor_key])
            rows.append(
                (mode, label, ms(result[key]), ms(floors[mode][floor_key]), f"{ours / raw:.2f}x", "<= 1.3x")
            )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="fewer repetitions, fewer BrowserGym sessions, no scale table"
    )
    parser.add_argument("--no-browsergym", action="store_true", help="measure envharness only")
    parser.add_argument(
        "--before",
        default=BEFORE_TASK_SWITCH,
        help=f"git revision for the 'before' column (default {BEFORE_TASK_SWITCH}; '' leaves it out)",
    )
    parser.add_argument(
        "--scale",
        default=None,
        help="session counts for the scale table (default 8,64,256; --quick: none); 'none' leaves it out",
    )
    parser.add_argument(
        "--rounds", type=int, default=None, help="turns of each mode and its floor (default 3, --quick 2)"
    )
    args = parser.parse_args()
    n = 15 if args.quick else 40
    args.rounds = args.rounds or (2 if args.quick else 3)
    levels = [1, 4, 8, 16]
    bg_levels = [1, 4] if args.quick else [1, 4, 8]
    steps_per_session = 10 if args.quick else 25
    scale_spec = args.scale or ("none" if args.quick else "8,64,256")
    scale_levels = [] if scale_spec == "none" else [int(x) for x in scale_spec.split(",")]
    load = os.getloadavg()[0]

    before_vars = before_env(args.before) if args.before else None
    before = (
        asyncio.run(bench_envharness(TEXT_PARTS, n, levels, steps_per_session, env_vars=before_vars))
        if before_vars
        else {}
    )
    text = asyncio.run(bench_envharness(TEXT_PARTS, n, levels, steps_per_session))
    floor = asyncio.run(bench_floor(n))
    own, floors = bench_own_floors(n, args.rounds)
    full = own["serve default (AXTree + pruned HTML + element properties)"]
    bg = {} if args.no_browsergym else bench_browsergym(max(6, n // 3), bg_levels, steps_per_session)
    scale = asyncio.run(bench_scale(scale_levels, 3)) if scale_levels else {}

    def cell(r: dict, key: str) -> str:
        return ms(r.get(key, []))

    def ratio(key: str, floor_key: str | None = None) -> str:
        floor_key = floor_key or key
        if not text.get(key) or not floor.get(floor_key):
            return ""
        return f"{statistics.median(text[key]) / statistics.median(floor[floor_key]):.1f}x"

    rows = [
        (
            "reset p50, same task",
            cell(before, "reset_same"),
            ms(text["reset_same"]),
            ms(full["reset_same"]),
            cell(floor, "reset_same"),
            ratio("reset_same"),
            cell(bg, "reset_change"),
            "",
        ),
        (
            "reset p50, task change (before: page load; now: in place)",
            cell(before, "reset_change"),
            ms(text["reset_change"]),
            ms(full["reset_change"]),
            f"{cell(floor, 'reset_switch')} in place, {cell(floor, 'reset_change')} loading",
            ratio("reset_change", "reset_switch"),
            cell(bg, "reset_change"),
            "<= 40 ms",
        ),
        (
            "reset p50, task change named in advance (next_task)",
            "-",
            cell(text, "reset_hinted"),
            "",
            "",
            "",
            "-",
            "<= 40 ms",
        ),
        (
            "step p50 (click + observation)",
            cell(before, "step"),
            ms(text["step"]),
            ms(full["step"]),
            cell(floor, "step"),
            ratio("step"),
            cell(bg, "step"),
            "<= 1.3x floor",
        ),
        (
            "fresh session: open + reset p50, 0.3 s between sessions",
            cell(before, "fresh"),
            cell(text, "fresh"),
            "",
            cell(floor, "fresh"),
            ratio("fresh"),
            cell(bg, "fresh"),
            "<= 50 ms",
        ),
        (
            "fresh sessions back to back: open + reset p50",
            cell(before, "fresh_back_to_back"),
            cell(text, "fresh_back_to_back"),
            "",
            cell(floor, "fresh"),
            ratio("fresh_back_to_back", "fresh"),
            "-",
            "<= 60 ms",
        ),
        (
            "fresh sessions/s back to back (open + reset + step + close)",
            f"{before['fresh_rate']:.1f}" if "fresh_rate" in before else "-",
            f"{text['fresh_rate']:.1f}",
            "",
            "",
            "",
            "-",
            "",
        ),
        *[
            (
                f"steps/s, {lv} session{'s' if lv > 1 else ''}",
                f"{before[f'rate_{lv}']:.1f}" if f"rate_{lv}" in before else "-",
                f"{text[f'rate_{lv}']:.1f}",
                "",
                "",
                "",
                f"{bg[f'rate_{lv}']:.1f}" if f"rate_{lv}" in bg else "-",
                "",
            )
            for lv in levels
        ],
        (
            "memory per extra session",
            per_extra_session(before, levels),
            per_extra_session(text, levels),
            "",
            "",
            "",
            per_extra_session(bg, bg_levels),
            "<= 20 MB",
        ),
    ]
    print_table(
        (
            "",
            "envharness before",
            "envharness, AXTree text",
            "envharness, AXTree+HTML+props",
            "floor: raw Playwright + CDP",
            "envharness / floor",
            "BrowserGym 0.14.3 in-process",
            "goal",
        ),
        rows,
    )
    print(
        f"\nEach observation against its own floor (raw Playwright + CDP, the requests it needs; p50 of "
        f"{args.rounds} turns each, taken by turns):\n"
    )
    print_table(
        ("observation", "operation", "envharness", "floor", "envharness / floor", "goal"),
        own_floor_rows(own, floors),
    )
    if scale:
        print(
            "\nMany sessions on one server (envharness now, AXTree text; 3 clicks per session, all at once):\n"
        )
        print_table(
            ("sessions", "step p50", "steps/s", "errors", "memory per session"),
            [
                (
                    str(lv),
                    ms(r["step"]),
                    f"{r['rate']:.1f}",
                    str(r["errors"]),
                    f"{r['mb_per_session']:.0f} MB",
                )
                for lv, r in scale.items()
            ],
        )
    if before_vars:
        print(f"\n'envharness before': revision {args.before}, run in the same session.")
    print(
        f"\n{os.cpu_count()} CPUs; load average {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end; "
        f"{n} resets/steps per median; {steps_per_session} steps per session for steps/s."
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
