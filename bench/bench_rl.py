"""An RL-shaped benchmark: a policy that acts like an untrained model, envharness vs BrowserGym.

An untrained policy mostly takes wrong actions, and that is where a browser environment spends
an RL run's time. `MixPolicy` draws each action from a fixed mix (seeded): the scripted
solution's next action, a click on some other element of the page, bids of hidden elements
(MiniWoB's ``<head>`` children), bids of disabled or covered elements (sign-agreement's
disabled fields, click-dialog's text under the dialog), bids not on the page, malformed
strings, and ``noop()``. One run measures, side by side:

- **wrong actions** (the issue's table): ``noop()``, ``click('999')``, ``click('1')``,
  ``click('2')``, ``fill('2', 'x')`` on click-test, repeated: p50 and the error text;
- **per-kind step p50** with one session, and **steps/s** with 1/8/16 sessions, each session
  playing episodes (reset included) of `TASKS` in turn, at most `MAX_STEPS` steps each;
- **a GRPO-like group**: 16 episodes of one prompt (click-checkboxes, one seed), one policy
  seed each, all at once: wall time from the resets to the last episode's end.

Columns: envharness as it was before issue 25 (``--before REV``: that revision's ``src/`` in the
server process, see `_before.py`); envharness now (``envharness serve browsergym`` in a
subprocess, `AsyncBrowserGymEnv` clients over the WebSocket, AXTree text observations); the same
with each reset naming the session's next task (``next_task``: the warm pool prepares its page,
as a trainer can while the model thinks); BrowserGym 0.14.3
in-process with its fast settings (``slow_mo=0``, no pre-observation delay), one process per
session (its sync API runs one environment per thread of control; a task change is a new
``gym.make``, each reset launches its browsers, as BrowserGym users run task mixes).

Usage: PLAYWRIGHT_BROWSERS_PATH=.venv/ms-playwright python bench/bench_rl.py [--quick] [--no-browsergym] [--before REV]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import multiprocessing as mp
import os
import random
import re
import statistics
import sys
import threading
import time
from collections import defaultdict
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

from _before import BEFORE_TASK_SWITCH, before_env

from envharness.envs.browsergym import miniwob
from envharness.envs.browsergym.solutions import solve

TASKS = [
    "click-test",
    "click-button",
    "click-checkboxes",
    "click-dialog",
    "enter-text",
    "focus-text",
    "sign-agreement",
    "click-collapsible",
]
MAX_STEPS = 10
GROUP_TASK, GROUP_SEED, GROUP_SIZE = "click-checkboxes", 3, 16
TEXT_ONLY = {"axtree": True, "pruned_html": False, "extra_properties": False}
KINDS = (
    "good action",
    "other element",
    "hidden bid",
    "disabled/covered bid",
    "missing bid",
    "malformed",
    "noop",
)
MIX = (0.30, 0.10, 0.15, 0.10, 0.10, 0.15, 0.10)
HIDDEN_BIDS = [str(i) for i in range(1, 10)]  # <head> and its children on every MiniWoB page
BLOCKED_BIDS = {"click-dialog": ["14", "16"], "sign-agreement": ["16", "18"]}  # covered / disabled
MALFORMED = [
    "click(13",
    "Click the button.",
    "click(bid=13)",
    "press_button('13')",
    "fill('13')",
    "I will click the submit button",
    "click('13') then submit",
    "",
    "click(\"13\", 'middle', 5)",
]
PROBES = ["noop()", "click('999')", "click('1')", "click('2')", "fill('2', 'x')"]
COLUMNS = ("envharness before", "envharness", "envharness, next_task hints", "BrowserGym 0.14.3")


class MixPolicy:
    """The untrained model: each step draws a kind from `MIX`, then an action of that kind."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def act(self, task: str, goal: str, axtree: str) -> tuple[str, str]:
        kind = self.rng.choices(KINDS, MIX)[0]
        bids = re.findall(r"\[(\d+)\]", axtree) or ["0"]
        if kind == "good action":
            action = solve(goal, axtree, task)
            return kind, action or f"click('{self.rng.choice(bids)}')"
        if kind == "other element":
            return kind, f"click('{self.rng.choice(bids)}')"
        if kind == "disabled/covered bid" and task in BLOCKED_BIDS:
            verb = self.rng.choice(["click('{}')", "fill('{}', 'abc')"])
            return kind, verb.format(self.rng.choice(BLOCKED_BIDS[task]))
        if kind in ("hidden bid", "disabled/covered bid"):
            return "hidden bid", self.rng.choice(["click('{}')", "fill('{}', 'abc')"]).format(
                self.rng.choice(HIDDEN_BIDS)
            )
        if kind == "missing bid":
            return kind, f"click('{self.rng.randint(500, 9999)}')"
        if kind == "malformed":
            return kind, self.rng.choice(MALFORMED)
        return kind, "noop()"


def progress(what: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {what}", file=sys.stderr, flush=True)


def p50_ms(values: list[float]) -> str:
    return f"{statistics.median(values) * 1000:.0f} ms" if values else "-"


# -- envharness ----------------------------------------------------------------------------------
async def _episodes(
    base_url: str,
    session: int,
    steps: int,
    log: dict,
    task: str | None = None,
    seed: int | None = None,
    episodes: int | None = None,
    hints: bool = False,
) -> int:
    """Play episodes until `steps` steps (or `episodes` episodes) are done; returns steps taken.
    `hints`: each reset names the next episode's task (``next_task``)."""
    from envharness.envs.browsergym import AsyncBrowserGymEnv, BrowserGymAction

    env = AsyncBrowserGymEnv(base_url)
    policy, taken, episode = MixPolicy(1000 + session), 0, 0
    try:
        while taken < steps and (episodes is None or episode < episodes):
            name = task or TASKS[(session + episode) % len(TASKS)]
            hint = {"next_task": task or TASKS[(session + episode + 1) % len(TASKS)]} if hints else {}
            obs = (await env.reset(task=name, seed=episode if seed is None else seed, **hint)).observation
            for _ in range(MAX_STEPS):
                kind, action = policy.act(name, obs.goal, obs.axtree_txt)
                start = time.perf_counter()
                result = await env.step(BrowserGymAction(action_str=action))
                log[kind].append(time.perf_counter() - start)
                obs, taken = result.observation, taken + 1
                if result.done or taken >= steps:
                    break
            episode += 1
    finally:
        await env.close()
    return taken


async def _probes(base_url: str, repeats: int) -> dict:
    from envharness.envs.browsergym import AsyncBrowserGymEnv, BrowserGymAction

    env = AsyncBrowserGymEnv(base_url)
    out: dict = {}
    try:
        await env.reset(task="click-test", seed=0)
        for action in PROBES:
            times = []
            for _ in range(repeats):
                start = time.perf_counter()
                result = await env.step(BrowserGymAction(action_str=action))
                times.append(time.perf_counter() - start)
            out[action] = (times, result.observation.last_action_error)
    finally:
        await env.close()
    return out


async def bench_envharness(
    options: dict,
    levels: list[int],
    steps: int,
    probes: int,
    env_vars: dict | None = None,
    hints: bool = False,
) -> dict:
    from envharness.core.launchers import launch_local

    server = launch_local(
        "browsergym", options=options, server_args=["--max-sessions", str(max(levels) + 2)], env_vars=env_vars
    )
    name = f"envharness{' before' if env_vars else ''}{' with hints' if hints else ''}"
    out: dict = {}
    try:
        await _episodes(server.base_url, 0, 5, defaultdict(list), hints=hints)  # warm-up
        out["probes"] = await _probes(server.base_url, probes)
        for level in levels:
            progress(f"{name}: {level} session(s)")
            log: dict = defaultdict(list)
            start = time.perf_counter()
            taken = await asyncio.gather(
                *(_episodes(server.base_url, s, steps, log, hints=hints) for s in range(level))
            )
            out[f"rate_{level}"] = sum(taken) / (time.perf_counter() - start)
            if level == 1:
                out["kinds"] = log
        log = defaultdict(list)
        progress(f"{name}: group")
        start = time.perf_counter()
        await asyncio.gather(
            *(
                _episodes(server.base_url, s, MAX_STEPS, log, task=GROUP_TASK, seed=GROUP_SEED, episodes=1)
                for s in range(GROUP_SIZE)
            )
        )
        out["group"] = time.perf_counter() - start
    finally:
        server.stop()
    return out


# -- BrowserGym, one process per session -----------------------------------------------------------
class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


def _browsergym_worker(
    miniwob_url: str, session: int, steps: int, probes: int, group: bool, barrier, queue
) -> None:
    os.environ["MINIWOB_URL"] = miniwob_url
    import browsergym.miniwob  # noqa: F401
    import gymnasium as gym
    from browsergym.utils.obs import flatten_axtree_to_str

    def make(task: str):
        return gym.make(f"browsergym/miniwob.{task}", slow_mo=0, pre_observation_delay=0.0)

    log: dict = defaultdict(list)
    out: dict = {}
    if probes:
        env = make("click-test")
        env.reset(seed=0)
        for action in PROBES:
            times = []
            for _ in range(probes):
                start = time.perf_counter()
                obs, *_ = env.step(action)
                times.append(time.perf_counter() - start)
            out.setdefault("probes", {})[action] = (times, obs["last_action_error"])
        env.close()
    policy, taken, episode, failed = MixPolicy(1000 + session), 0, 0, 0
    env = make(GROUP_TASK) if group else None
    barrier.wait()
    t0 = time.perf_counter()
    while taken < steps and not (group and episode == 1) and failed < 5:
        task = GROUP_TASK if group else TASKS[(session + episode) % len(TASKS)]
        if not group:
            env = make(task)
        try:
            obs, _ = env.reset(seed=GROUP_SEED if group else episode)
            for _ in range(MAX_STEPS):
                kind, action = policy.act(task, obs["goal"], flatten_axtree_to_str(obs["axtree_object"]))
                start = time.perf_counter()
                obs, _, terminated, truncated, _ = env.step(action)
                log[kind].append(time.perf_counter() - start)
                taken += 1
                if terminated or truncated or taken >= steps:
                    break
        except Exception:  # BrowserGym's 5 s page time-out, on a machine this busy: count it, go on
            failed += 1
            if not group:
                env.close()
            else:  # a fresh environment: gymnasium's checker refuses a step after a failed reset
                env.close()
                env = make(GROUP_TASK)
            continue
        episode += 1
        if not group:
            env.close()
    out.update(t0=t0, t1=time.perf_counter(), taken=taken, kinds=dict(log), failed=failed)
    if group:
        env.close()
    queue.put(out)


def bench_browsergym(levels: list[int], steps: int, probes: int) -> dict:
    handler = functools.partial(_QuietHandler, directory=str(miniwob.html_root()))
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_port}/miniwob/"
    ctx = mp.get_context("spawn")
    out: dict = {}

    def run(level: int, group: bool) -> list[dict]:
        barrier, queue = ctx.Barrier(level), ctx.Queue()
        procs = [
            ctx.Process(
                target=_browsergym_worker,
                args=(
                    url,
                    s,
                    MAX_STEPS if group else steps,
                    probes if (level == 1 and not group) else 0,
                    group,
                    barrier,
                    queue,
                ),
            )
            for s in range(level)
        ]
        for p in procs:
            p.start()
        results = []
        for _ in procs:
            try:
                results.append(queue.get(timeout=900))
            except Exception:  # a worker died: report the others
                progress("a BrowserGym worker gave no result")
                break
        for p in procs:
            p.join(timeout=120)
            if p.is_alive():
                p.kill()
        return results

    try:
        for level in levels:
            progress(f"BrowserGym: {level} session(s)")
            results = run(level, group=False)
            out[f"rate_{level}"] = sum(r["taken"] for r in results) / (
                max(r["t1"] for r in results) - min(r["t0"] for r in results)
            )
            out["failed_resets"] = out.get("failed_resets", 0) + sum(r["failed"] for r in results)
            if level == 1:
                out["probes"], out["kinds"] = results[0]["probes"], results[0]["kinds"]
        progress("BrowserGym: group")
        results = run(GROUP_SIZE, group=True)
        out["group"] = max(r["t1"] for r in results) - min(r["t0"] for r in results)
        out["failed_resets"] = out.get("failed_resets", 0) + sum(r["failed"] for r in results)
    finally:
        httpd.shutdown()
    return out


# -- the tables ----------------------------------------------------------------------------------
def table(header: tuple, rows: list[tuple]) -> None:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    for i, row in enumerate([header, *rows]):
        print("| " + " | ".join(str(c).ljust(w) for c, w in zip(row, widths)) + " |")
        if i == 0:
            print("|" + "|".join("-" * (w + 2) for w in widths) + "|")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="fewer steps; BrowserGym at 1 and 8 sessions only"
    )
    parser.add_argument("--no-browsergym", action="store_true", help="measure envharness only")
    parser.add_argument(
        "--browsergym-16",
        action="store_true",
        help="BrowserGym at 16 sessions too (32 Chromiums: on 2 cores its resets time out)",
    )
    parser.add_argument("--steps", type=int, help="steps per session for steps/s (default 60, --quick 30)")
    parser.add_argument(
        "--before",
        default=BEFORE_TASK_SWITCH,
        help=f"git revision for the 'before' column (default {BEFORE_TASK_SWITCH}; '' leaves it out)",
    )
    args = parser.parse_args()
    levels = [1, 8, 16]
    steps, probes = (30, 5) if args.quick else (60, 10)
    steps = args.steps or steps
    started = time.time()
    load = os.getloadavg()[0]
    before_vars = before_env(args.before) if args.before else None
    before = (
        asyncio.run(bench_envharness(TEXT_ONLY, levels, steps, probes, env_vars=before_vars))
        if before_vars
        else {}
    )
    new = asyncio.run(bench_envharness(TEXT_ONLY, levels, steps, probes))
    hinted = asyncio.run(bench_envharness(TEXT_ONLY, levels, steps, probes, hints=True))
    for name, r in (("before", before), ("envharness", new), ("hints", hinted)):
        progress(f"{name}: " + ", ".join(f"{k} {v:.2f}" for k, v in r.items() if isinstance(v, float)))
    bg = (
        {}
        if args.no_browsergym
        else bench_browsergym([1, 8] if args.quick or not args.browsergym_16 else levels, steps, probes)
    )
    results = (before, new, hinted, bg)

    print("Wrong actions on click-test (p50, one session; the error text of the last try):\n")
    rows = []
    for action in PROBES:
        cells = []
        for r in results:
            times, error = r.get("probes", {}).get(action, ([], ""))
            error = error.strip().splitlines()[0][:70] if error and error.strip() else ""
            cells.append(f"{p50_ms(times)}{': ' + error if error else ''}" if times else "-")
        rows.append((f"`{action}`", *cells))
    table(("action", *COLUMNS), rows)

    print("\nThe policy mix, one session (step p50 by kind; share of the mix in brackets):\n")
    rows = [
        (f"{kind} ({share:.0%})", *(p50_ms(r.get("kinds", {}).get(kind, [])) for r in results))
        for kind, share in zip(KINDS, MIX)
    ]
    rows += [
        (
            f"steps/s, {lv} session{'s' if lv > 1 else ''} (resets included)",
            *(f"{r[f'rate_{lv}']:.1f}" if f"rate_{lv}" in r else "-" for r in results),
        )
        for lv in levels
    ]
    rows.append(
        (
            f"GRPO-like group: {GROUP_SIZE} episodes of {GROUP_TASK}, wall time",
            *(f"{r['group']:.1f} s" if "group" in r else "-" for r in results),
        )
    )
    table(("", *COLUMNS), rows)
    if bg.get("failed_resets"):
        print(f"\nBrowserGym resets that failed (its 5 s page time-out), skipped: {bg['failed_resets']}")
    if before_vars:
        print(f"\n'envharness before': revision {args.before}, run in the same session.")
    print(
        f"\n{os.cpu_count()} CPUs; load average {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end; "
        f"{steps} steps per session for steps/s; at most {MAX_STEPS} steps per episode; "
        f"{time.time() - started:.0f} s in all."
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
