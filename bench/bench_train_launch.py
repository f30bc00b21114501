"""What `envharness train --processes N` costs the machine, before and after a change, in one run.

Each row is one tiny run (`--model tiny`, TextArena's Wordle, one step of 2 x 2 episodes,
`--threads 1`) as a user starts it: `python -m envharness.cli train ... --processes N` in a fresh
process. The CPU is the whole machine's (busy time from /proc/stat over the run), because the
ranks are not children the launcher reaps (they fork from a forkserver); so run it on an idle
machine. The "before" rows run `src/` of `--before REV` (`_before.py`); runs alternate before,
after, before, ... and the table gives medians.

    PYTHONPATH=src python bench/bench_train_launch.py --before 03a0a2f [--processes 2] [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _before import before_env
from suite_cpu import machine_cpu


def one_run(processes: int, env: dict[str, str]) -> tuple[float, float]:
    """(wall s, machine CPU s) of one tiny `train --processes N` run to its end."""
    with tempfile.TemporaryDirectory() as out:
        command = [sys.executable, "-m", "envharness.cli", "train", "--env", "textarena", "--tasks", "Wordle-v0",
                   "--model", "tiny", "--processes", str(processes), "--threads", "1", "--steps", "1",
                   "--groups-per-step", "2", "--num-generations", "2", "--out", str(Path(out) / "run")]  # fmt: skip
        cpu, started = machine_cpu()[0], time.monotonic()
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
        wall, cpu = time.monotonic() - started, machine_cpu()[0] - cpu
    if done.returncode != 0:
        raise SystemExit(f"the run failed:\n{done.stderr[-3000:]}")
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default=None, help="git revision (or folder with src/) to compare with")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    base = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK")}
    columns = {"now": base}
    if args.before:
        before = before_env(args.before)
        if before is None:
            raise SystemExit(f"git cannot give {args.before}'s src/ here")
        columns = {f"before ({args.before})": {**base, **before}, **columns}
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in columns}
    for _ in range(args.runs):
        for name, env in columns.items():
            results[name].append(one_run(args.processes, env))
    print(f"`train --processes {args.processes}`, tiny model, one step; medians of {args.runs} runs\n")
    print("| code | wall s | machine CPU s |")
    print("|---|---:|---:|")
    for name, runs in results.items():
        wall, cpu = statistics.median(w for w, _ in runs), statistics.median(c for _, c in runs)
        print(f"| {name} | {wall:.1f} | {cpu:.1f} |")


if __name__ == "__main__":
    main()
