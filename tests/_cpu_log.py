"""Where the suite's CPU goes: with `ENVHARNESS_TEST_CPU_LOG=FILE`, each test appends a JSON line
to FILE with its wall time and its CPU seconds, its own (the test process's) and its children's
(processes it started and reaped: servers, Chromium, torchrun's ranks; a module's shared server
counts at the test whose teardown reaps it). `make test` on 2 cores is CPU-bound, so this, not
`--durations`, says what to fold or share. Not counted: processes nobody here reaps, such as the
ranks of `train --processes` (children of a forkserver that outlives its launcher) and commands
forked from the prewarmed interpreter until it ends; the machine's own busy time (/proc/stat)
over the run is the whole, and `bench/suite_cpu.py` splits it by kind of process.

    ENVHARNESS_TEST_CPU_LOG=/tmp/cpu.jsonl make test
    .venv/bin/python tests/_cpu_log.py /tmp/cpu.jsonl       # CPU and wall time by file, costliest first
"""

from __future__ import annotations

import json
import os
import resource
import time
from collections.abc import Iterator
from typing import Any

import pytest


def _cpu() -> tuple[float, float]:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: Any) -> Iterator[None]:
    path = os.environ.get("ENVHARNESS_TEST_CPU_LOG")
    if not path:
        yield
        return
    (own, children), started = _cpu(), time.monotonic()
    yield
    own_after, children_after = _cpu()
    line = {"test": item.nodeid, "wall_s": round(time.monotonic() - started, 2),
            "cpu_s": round(own_after - own, 2), "children_cpu_s": round(children_after - children, 2),
            "worker": os.environ.get("PYTEST_XDIST_WORKER", "")}  # fmt: skip
    with open(path, "a", encoding="utf-8") as log:
        log.write(json.dumps(line) + "\n")


def by_file(path: str) -> list[tuple[str, float, float, int]]:
    """(file, CPU seconds, wall seconds, tests) for each test file in the log, costliest first."""
    files: dict[str, list[float]] = {}
    with open(path, encoding="utf-8") as log:
        for line in log:
            test = json.loads(line)
            row = files.setdefault(test["test"].split("::")[0], [0.0, 0.0, 0])
            row[0] += test["cpu_s"] + test["children_cpu_s"]
            row[1] += test["wall_s"]
            row[2] += 1
    return sorted(((f, cpu, wall, int(n)) for f, (cpu, wall, n) in files.items()), key=lambda r: -r[1])


if __name__ == "__main__":
    import sys

    rows = by_file(sys.argv[1])
    print(f"{'CPU s':>8} {'wall s':>8} {'tests':>6}  file   (total CPU {sum(r[1] for r in rows):.0f} s)")
    for name, cpu, wall, count in rows:
        print(f"{cpu:8.0f} {wall:8.0f} {count:6d}  {name}")
