"""What does BrowserGym's own code cost behind our server? Three browsers on MiniWoB, one run.

- envharness's fast engine (`envharness serve browsergym`);
- the BrowserGym engine (`--option engine=browsergym`: one worker process per session running
  BrowserGym's gym environment, over the same WebSocket);
- BrowserGym 0.14.3 in-process (one process per session), the reference.

Same measures as `bench_browser.py` (it provides the code): reset p50 (the same task again),
step p50 (a checkbox click + observation on click-checkboxes), steps/s at 1 and 8 sessions,
memory per extra session. Text observations for both servers (AXTree text); BrowserGym
in-process computes everything. All with BrowserGym's fast settings (no slow_mo, no
pre-observation delay). Goal: the BrowserGym engine within 1.2x of BrowserGym in-process.

Usage: PLAYWRIGHT_BROWSERS_PATH=.venv/ms-playwright python bench/bench_gym_engine.py [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_browser import TEXT_PARTS, bench_browsergym, bench_envharness, ms, per_extra_session, print_table  # noqa: E402


def ratio(
    a: list[float] | float | None, b: list[float] | float | None, higher_is_better: bool = False
) -> str:
    if not a or not b:
        return "-"
    x = statistics.median(a) if isinstance(a, list) else a
    y = statistics.median(b) if isinstance(b, list) else b
    return f"{(y / x if higher_is_better else x / y):.2f}x"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    args = parser.parse_args()
    n = 10 if args.quick else 25
    levels = [1, 8]
    steps = 8 if args.quick else 20

    fast = asyncio.run(bench_envharness(TEXT_PARTS, n, levels, steps))
    gym = asyncio.run(bench_envharness({**TEXT_PARTS, "engine": "browsergym"}, n, levels, steps))
    ref = bench_browsergym(n, levels, steps)
    gym_memory = per_extra_session(gym, levels)
    ref_memory = per_extra_session(ref, levels)
    mb = lambda text: float(text.split()[0]) if text != "-" else None  # noqa: E731
    rows = [
        (
            "reset p50 (same task)",
            ms(fast["reset_same"]),
            ms(gym["reset_same"]),
            ms(ref["reset_change"]),
            ratio(gym["reset_same"], ref["reset_change"]),
        ),
        (
            "step p50 (click + observation)",
            ms(fast["step"]),
            ms(gym["step"]),
            ms(ref["step"]),
            ratio(gym["step"], ref["step"]),
        ),
        *[
            (
                f"steps/s, {lv} session{'s' if lv > 1 else ''}",
                f"{fast[f'rate_{lv}']:.1f}",
                f"{gym[f'rate_{lv}']:.1f}",
                f"{ref[f'rate_{lv}']:.1f}",
                ratio(gym[f"rate_{lv}"], ref[f"rate_{lv}"], higher_is_better=True),
            )
            for lv in levels
        ],
        (
            "memory per extra session",
            per_extra_session(fast, levels),
            gym_memory,
            ref_memory,
            ratio(mb(gym_memory), mb(ref_memory)),
        ),
    ]
    header = (
        "MiniWoB (click-checkboxes)",
        "envharness engine",
        "BrowserGym engine (server)",
        "BrowserGym in-process",
        "BrowserGym engine cost vs in-process (goal <= 1.2x)",
    )
    print_table(header, rows)
    print(
        f"\n{os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.1f}; {n} resets/steps per median; "
        f"{steps} steps per session for steps/s."
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
