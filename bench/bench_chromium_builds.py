"""Debian's full Chromium (``--headless``) vs its headless shell (package chromium-headless-shell):
what a browser launch and what MiniWoB episodes cost in CPU and time, same engine, same flags.

Each trial runs in a fresh Python process, so its CPU is the engine's process tree alone (its own
CPU and that of its reaped children: Playwright's driver, Chromium and its renderers), imports
left out. Trials of the two builds alternate; the table gives medians.

- launch: start the engine, open one session on click-test, close it, close the browser and the
  driver (what a server, a `check` or a test pays to get a browser at all);
- episodes: one browser, 4 sessions, each reset 10 times across 5 tasks (a task change each
  time, in place) with 3 steps after each reset, text observations (AXTree): per episode.

Usage: PLAYWRIGHT_BROWSERS_PATH=.venv/ms-playwright python bench/bench_chromium_builds.py [--trials 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import statistics
import subprocess
import sys
import time

from envharness.envs.browsergym.engine import CHROMIUM, HEADLESS_SHELL

TASKS = ("click-test", "click-button", "focus-text", "enter-text", "click-checkboxes")
SESSIONS, RESETS, STEPS = 4, 10, 3


def cpu_s() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


async def launch(path: str) -> None:
    from envharness.envs.browsergym.factory import make_environment_factory

    factory = make_environment_factory(chromium_path=path)
    env = factory()
    await env.reset_async(task="click-test", seed=1)
    await env.close_async()
    await factory.aclose()


async def episodes(path: str) -> None:
    from envharness.envs.browsergym.factory import make_environment_factory
    from envharness.envs.browsergym.models import BrowserGymAction

    factory = make_environment_factory(chromium_path=path)
    envs = [factory() for _ in range(SESSIONS)]

    async def play(i: int) -> None:
        for r in range(RESETS):
            await envs[i].reset_async(task=TASKS[(i + r) % len(TASKS)], seed=r)
            for _ in range(STEPS):
                await envs[i].step_async(BrowserGymAction(action_str="noop(0)"))

    await asyncio.gather(*(play(i) for i in range(SESSIONS)))
    for env in envs:
        await env.close_async()
    await factory.aclose()


def trial(kind: str, path: str) -> None:
    """One measurement, printed as JSON (run in a child process)."""
    import envharness.envs.browsergym.factory  # noqa: F401  (imports are not measured)

    cpu0, t0 = cpu_s(), time.perf_counter()
    asyncio.run(launch(path) if kind == "launch" else episodes(path))
    print(json.dumps({"cpu_s": cpu_s() - cpu0, "wall_s": time.perf_counter() - t0}))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--trial", nargs=2, metavar=("KIND", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.trial:
        return trial(*args.trial)
    builds = {"chromium --headless": CHROMIUM, "chromium-headless-shell": HEADLESS_SHELL}
    results: dict[tuple[str, str], list[dict]] = {}
    for _ in range(args.trials):
        for kind in ("launch", "episodes"):
            for name, path in builds.items():
                out = subprocess.run(
                    [sys.executable, __file__, "--trial", kind, path],
                    capture_output=True,
                    text=True,
                    check=True,
                )
                results.setdefault((kind, name), []).append(json.loads(out.stdout.strip().splitlines()[-1]))
    per = {"launch": 1, "episodes": SESSIONS * RESETS}
    print(
        f"\n{args.trials} trials each, medians; episodes: {SESSIONS} sessions x {RESETS} resets x {STEPS} steps\n"
    )
    print(
        f"| {'':<28} | {'chromium --headless':>20} | {'chromium-headless-shell':>24} | {'shell / full':>12} |"
    )
    print(f"|{'-' * 30}|{'-' * 21}:|{'-' * 25}:|{'-' * 13}:|")
    for kind, unit in (("launch", "a launch"), ("episodes", "an episode")):
        for field, label in (("cpu_s", "CPU-s"), ("wall_s", "wall s")):
            full, shell = (
                statistics.median(r[field] for r in results[(kind, name)]) / per[kind] for name in builds
            )
            row = f"{label}, {unit}"
            print(f"| {row:<28} | {full:>20.3f} | {shell:>24.3f} | {shell / full:>12.2f} |")


if __name__ == "__main__":
    main()
