"""Local vs remote browsers: the same browsergym server, on its own Chromium or on a browser
node reached over CDP (`--option browser=cdp://...`; here the node is another process on this
machine, loopback CDP). One table, both measured in one run, rounds interleaved, medians:

- reset p50 (the same task, restarted in place; a task change, a page load), step p50 (click +
  observation over the WebSocket), steps/s with 8 concurrent sessions;
- memory per extra session on the server's side (its process tree: with a local browser that
  includes Chromium, with a remote one it does not) and on the browser node.

Usage: PLAYWRIGHT_BROWSERS_PATH=.venv/ms-playwright python bench/bench_remote_browsers.py [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_browser import bench_envharness, ms, print_table, tree_memory_mb  # noqa: E402

from envharness.envs.browsergym.browser_node import start_browser_node  # noqa: E402

TEXT_ONLY = {"pruned_html": False, "extra_properties": False}
LEVELS = [1, 8]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer samples (a smoke run)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds per mode (default 3)")
    args = parser.parse_args()
    n, steps, rounds = (10, 10, 1) if args.quick else (30, 30, args.rounds)
    node = start_browser_node(0)
    runs: dict[str, list[dict]] = {"local": [], "remote": []}
    node_memory = []
    try:
        for r in range(rounds):
            for mode in ("local", "remote"):
                print(f"[bench] round {r + 1}/{rounds}: {mode}", file=sys.stderr, flush=True)
                options = TEXT_ONLY if mode == "local" else {**TEXT_ONLY, "browser": node.address}
                before = tree_memory_mb(node.process.pid)
                runs[mode].append(asyncio.run(bench_envharness(options, n, LEVELS, steps)))
                if mode == "remote":
                    node_memory.append(tree_memory_mb(node.process.pid) - before)
    finally:
        node.stop()

    def median_of(mode: str, key: str) -> float:
        return statistics.median(
            v for run in runs[mode] for v in (run[key] if isinstance(run[key], list) else [run[key]])
        )

    def per_session(mode: str) -> float:
        return statistics.median((run["rss_8"] - run["rss_1"]) / 7 for run in runs[mode])

    rows = []
    for label, key, fmt in (
        ("reset p50, same task (in place)", "reset_same", ms),
        ("reset p50, task change (page load)", "reset_change", ms),
        ("step p50 (click + AXTree)", "step", ms),
    ):
        local, remote = median_of("local", key), median_of("remote", key)
        rows.append((label, fmt([local]), fmt([remote]), f"{remote / local:.2f}x"))
    local, remote = median_of("local", "rate_8"), median_of("remote", "rate_8")
    rows.append(("steps/s, 8 sessions", f"{local:.1f}", f"{remote:.1f}", f"{local / remote:.2f}x"))
    rows.append(
        (
            "server-side memory per extra session",
            f"{per_session('local'):.0f} MB",
            f"{per_session('remote'):.0f} MB",
            "",
        )
    )
    print(
        f"\nlocal vs remote browsers, {rounds} interleaved round(s), medians; remote = a browser node on loopback CDP\n"
    )
    print_table(("measure", "local Chromium", "remote (CDP)", "remote / local (time)"), rows)
    print(
        f"\nbrowser node: its memory grew {statistics.median(node_memory):.0f} MB over a round (sessions closed since: what stays)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
