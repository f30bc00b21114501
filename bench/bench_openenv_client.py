"""What a client of OpenEnv sees: `envharness serve browsergym` (default options) driven by OpenEnv's
own `GenericEnvClient`, old revision and this one alternating in one sitting.

Each round plays the same episodes on each server (scripted solutions, ``solutions.next_action``,
on the observation the server sends by default: AXTree text, pruned HTML and element properties):
every task once with seed ``r`` and once with seed ``100 + r``, one task after another in one
session, so most resets change the task (in place on this revision). Servers take turns round by
round (the order flips each round), so a busy machine weighs on both alike.

Prints step p50 and reset p50 per round and server, and over all rounds with the ratio.

Usage: PLAYWRIGHT_BROWSERS_PATH=.venv/ms-playwright python bench/bench_openenv_client.py
       [--before c1fa78e] [--rounds 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

from _before import before_env
from openenv.core.generic_client import GenericEnvClient

from envharness.core.launchers import launch_local
from envharness.envs.browsergym.solutions import next_action

#: The revision before task changes in place (the issue's "old" server).
BEFORE_IN_PLACE = "c1fa78e"
#: 13 tasks the scripted solutions solve.
TASKS = (
    "click-test",
    "click-button",
    "click-dialog-2",
    "click-checkboxes",
    "click-option",
    "focus-text-2",
    "enter-text-2",
    "enter-password",
    "login-user",
    "choose-list",
    "click-tab",
    "click-collapsible",
    "click-button-sequence",
)
MAX_STEPS = 8


def play_round(base_url: str, round_no: int) -> tuple[list[float], list[float], int]:
    """Step and reset times of one round (every task, two seeds), and the episodes solved."""
    steps, resets, solved = [], [], 0
    with GenericEnvClient(base_url=base_url, message_timeout_s=120).sync() as env:
        for seed in (round_no, 100 + round_no):
            for task in TASKS:
                t = time.perf_counter()
                result = env.reset(task=task, seed=seed)
                resets.append(time.perf_counter() - t)
                for _ in range(MAX_STEPS):
                    obs = result.observation
                    action = next_action(obs["goal"], obs["axtree_txt"], task=task)
                    t = time.perf_counter()
                    result = env.step({"action_str": action})
                    steps.append(time.perf_counter() - t)
                    if result.done:
                        solved += result.reward > 0
                        break
    return steps, resets, solved


def p50(seconds: list[float]) -> float:
    return statistics.median(seconds) * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--before",
        default=BEFORE_IN_PLACE,
        help="old revisions, comma-separated (the first is the reference)",
    )
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    revs = [rev for rev in args.before.split(",") if rev]
    before_vars = {rev: before_env(rev) for rev in revs}
    if None in before_vars.values():
        print(f"git cannot give the revisions {args.before}", file=sys.stderr)
        return 1
    load = os.getloadavg()[0]
    servers = {rev: launch_local("browsergym", env_vars=env) for rev, env in before_vars.items()}
    servers["now"] = launch_local("browsergym")
    results: dict[str, list[tuple[list[float], list[float], int]]] = {name: [] for name in servers}
    try:
        for server in servers.values():  # warm-up: Chromium started, scripts compiled
            play_round(server.base_url, 50)
        for r in range(args.rounds):
            order = list(servers) if r % 2 == 0 else list(reversed(servers))
            for name in order:
                results[name].append(play_round(servers[name].base_url, r))
                print(f"[{time.strftime('%H:%M:%S')}] round {r + 1}: {name} done", file=sys.stderr)
    finally:
        for server in servers.values():
            server.stop()
    header = ["server", *(f"step p50, round {r + 1}" for r in range(args.rounds))]
    header += ["step p50, all", "reset p50, all", "solved"]
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("---" if i == 0 else "---:" for i in range(len(header))) + "|")
    for name, rounds in results.items():
        all_steps = [x for s, _, _ in rounds for x in s]
        all_resets = [x for _, rs, _ in rounds for x in rs]
        solved = sum(n for _, _, n in rounds)
        cells = [f"{p50(s):.0f} ms" for s, _, _ in rounds]
        cells += [f"{p50(all_steps):.1f} ms", f"{p50(all_resets):.0f} ms", f"{solved}/{len(rounds) * 26}"]
        print(f"| {name} | " + " | ".join(cells) + " |")
    old, new = ([x for s, _, _ in results[n] for x in s] for n in (revs[0], "now"))
    print(f"\nstep p50 now / {revs[0]}: {p50(new) / p50(old):.2f}")
    print(
        f"{os.cpu_count()} CPUs (shared); load average {load:.1f} at the start, "
        f"{os.getloadavg()[0]:.1f} at the end; {len(TASKS)} tasks x 2 seeds per round."
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
