"""How fast is a step of the user's web tasks, next to a MiniWoB step? (issue 21: within 1.5x)

One run, one machine: two servers on loopback (`serve browsergym` with MiniWoB, and with
``tasks=webtasks.formtasks``), one client each, played alternately so that both see the same
machine load. Each step is timed at the client: the action over the WebSocket, the action in
the page, the reward read (a web task's Python reward or JS check; MiniWoB's globals) and
the observation. MiniWoB: ``click`` on click-test's button (reset before each). Web tasks: the
scripted solutions of the three example tasks (fill, click), seeds 0..N-1.

Usage: PLAYWRIGHT_BROWSERS_PATH=.venv/ms-playwright python bench/bench_webtasks.py [--episodes 20] [--all-parts]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))

from envharness.core.launchers import LocalServer  # noqa: E402
from envharness.envs.browsergym import BrowserGymAction, BrowserGymEnv  # noqa: E402
from envharness.envs.browsergym.solutions import solve as solve_miniwob  # noqa: E402
from envharness.envs.browsergym.tasks import load_task_set  # noqa: E402

WEB_TASKS = "webtasks.formtasks"
TEXT_ONLY = {"pruned_html": False, "extra_properties": False}


def timed_step(env: BrowserGymEnv, action: str) -> tuple[float, object]:
    started = time.perf_counter()
    result = env.step(BrowserGymAction(action_str=action))
    return time.perf_counter() - started, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=20, help="episodes per task (default %(default)s)")
    parser.add_argument(
        "--all-parts",
        action="store_true",
        help="pruned HTML and element properties too (default: AXTree text)",
    )
    args = parser.parse_args()
    parts = {} if args.all_parts else TEXT_ONLY
    solve_web = load_task_set(WEB_TASKS).solve
    miniwob_steps: list[float] = []
    web_steps: dict[str, list[float]] = {}
    with (
        LocalServer("browsergym", **parts) as mw_server,
        LocalServer("browsergym", tasks=WEB_TASKS, **parts) as web_server,
        BrowserGymEnv(base_url=mw_server.base_url) as mw,
        BrowserGymEnv(base_url=web_server.base_url) as web,
    ):
        for warm_up in (True, False):
            for seed in range(2 if warm_up else args.episodes):
                obs = mw.reset(task="click-test", seed=seed).observation
                seconds, result = timed_step(mw, solve_miniwob(obs.goal, obs.axtree_txt))
                assert result.reward == 1.0, result
                if not warm_up:
                    miniwob_steps.append(seconds)
                for task in load_task_set(WEB_TASKS).all_tasks():
                    result = web.reset(task=task, seed=seed)
                    for _ in range(6):
                        seconds, result = timed_step(
                            web, solve_web(result.observation.goal, result.observation.axtree_txt)
                        )
                        if not warm_up:
                            web_steps.setdefault(task, []).append(seconds)
                        if result.done:
                            break
                    assert result.reward == 1.0, (task, seed, result.observation.last_action_error)
    p50 = lambda xs: statistics.median(xs) * 1000  # noqa: E731
    every_web = [s for steps in web_steps.values() for s in steps]
    print(
        f"step p50 over the WebSocket ({'all text parts' if args.all_parts else 'AXTree text'}), {args.episodes} episodes per task"
    )
    print(f"  {'MiniWoB click-test':24s} {p50(miniwob_steps):6.1f} ms  (n={len(miniwob_steps)})")
    for task, steps in web_steps.items():
        print(f"  {'web: ' + task:24s} {p50(steps):6.1f} ms  (n={len(steps)})")
    ratio = p50(every_web) / p50(miniwob_steps)
    print(
        f"  {'web: all steps':24s} {p50(every_web):6.1f} ms  (n={len(every_web)})  = {ratio:.2f}x MiniWoB (goal: <= 1.5x)"
    )


if __name__ == "__main__":
    main()
