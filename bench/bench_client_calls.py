"""A client's calls on one session, before and after a change, in one run: a step alone, a step
then `state()` (what an episode's session did after every step), and the pair in one round trip
(`step_and_state`, where the code has it). One server on loopback (`envharness serve`, this
tree), each column a fresh client process with `src/` of its revision; rounds alternate.

    PYTHONPATH=src python bench/bench_client_calls.py --before 19c70c5 [--env textarena] [--rounds 4]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from _before import before_env

ACTIONS = {"echo": {"message": "hello"}, "textarena": {"message": "[crane]"}}
RESET = {"echo": {}, "textarena": {"task": "Wordle-v0", "seed": 0}}


def worker(url: str, env: str, calls: int) -> dict[str, float]:
    """Median milliseconds of each kind of call, `calls` of each, on one session."""
    from envharness.core.client import EnvClient

    timings: dict[str, float] = {}
    with EnvClient(url) as client:
        kinds = {
            "step": lambda: client.step(ACTIONS[env]),
            "step, then state": lambda: (client.step(ACTIONS[env]), client.state()),
        }
        if hasattr(client, "step_and_state"):
            kinds["step_and_state"] = lambda: client.step_and_state(ACTIONS[env])
        for name, call in kinds.items():
            seconds = []
            for i in range(calls):
                if env != "echo" or i % 4 == 0:  # a game may end at any move: a fresh one each time
                    client.reset(**RESET[env])
                started = time.perf_counter()
                call()
                seconds.append(time.perf_counter() - started)
            timings[name] = statistics.median(seconds) * 1000
    return timings


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--env", default="echo", choices=sorted(ACTIONS))
    parser.add_argument("--before", default="19c70c5")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--worker", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.env, args.calls)))
        return 0
    from envharness.core.launchers import ServerProcess

    columns: dict[str, tuple[dict[str, str], list[dict[str, float]]]] = {"after (this tree)": ({}, [])}
    old = before_env(args.before)
    if old is not None:
        columns = {f"before ({args.before})": (old, []), **columns}
    server = ServerProcess(args.env)
    try:
        for round_ in range(args.rounds):
            for _name, (env, runs) in list(columns.items())[:: 1 if round_ % 2 == 0 else -1]:
                command = [
                    sys.executable,
                    __file__,
                    "--env",
                    args.env,
                    "--calls",
                    str(args.calls),
                    "--worker",
                    server.base_url,
                ]
                process_env = {
                    **os.environ,
                    **env,
                    "PYTHONPATH": os.pathsep.join(
                        p for p in (env.get("PYTHONPATH"), os.environ.get("PYTHONPATH")) if p
                    ),
                }
                out = subprocess.run(
                    command, env=process_env, capture_output=True, text=True, timeout=600, check=True
                )
                runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    finally:
        server.stop()
    kinds = ["step", "step, then state", "step_and_state"]
    print(f"\n| {args.env}: code | " + " | ".join(f"{k} (ms, p50)" for k in kinds) + " |")
    print("|---|" + "---|" * len(kinds))
    for name, (_, runs) in columns.items():
        cells = [
            f"{statistics.median(r[k] for r in runs):.3f}" if all(k in r for r in runs) else "-"
            for k in kinds
        ]
        print(f"| {name} | " + " | ".join(cells) + " |")
    print(
        f"\nmedians of {args.rounds} rounds x {args.calls} calls; {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
