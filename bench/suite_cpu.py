"""Where a command's CPU goes, by kind of process: Chromium, Playwright's driver, the pytest
workers, environment servers, training processes. It samples every process's CPU time from /proc
twice a second while the command runs, so it also counts the processes nobody reaps (forkserver
ranks, Ray's daemons, prewarmed forks), which `tests/_cpu_log.py`'s per-test log cannot; the
machine's busy and idle time (/proc/stat) over the run is the whole. Linux only.

    .venv/bin/python bench/suite_cpu.py                     # make test
    .venv/bin/python bench/suite_cpu.py -- make test PYTEST_ARGS=tests/test_sft.py
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")


def machine_cpu() -> tuple[float, float]:
    """(busy, idle) CPU seconds of the whole machine since boot (/proc/stat)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    user, nice, system, idle, iowait, irq, softirq, steal = fields[:8]
    return (user + nice + system + irq + softirq + steal) / TICK, (idle + iowait) / TICK


def kind(command: str, name: str) -> str:
    """The row a process counts in, from its command line and its name."""
    if "crashpad" in name:
        return "chromium crashpad"
    if "chrom" in name.lower():
        found = re.search(r"--type=(\S+)", command)
        return f"chromium {found.group(1) if found else 'browser'}"
    if name == "node":
        return "playwright driver (node)"
    if "exec(eval" in command:
        return "pytest workers (in-process tests)"
    if "multiprocessing.forkserver" in command:
        return "train --processes ranks (forkserver)"
    if "import torch, transformers, trl" in command:
        return "prewarmed commands (tests/_prewarmed.py)"
    if "ray" in command and ("raylet" in command or "gcs_server" in command or "/ray/" in command):
        return "ray"
    if found := re.search(r"envharness\.cli import main; sys\.exit\(main\(\)\) (\S+)", command):
        return f"envharness {found.group(1)} (child process)"
    if found := re.search(r"-m (envharness\S*|torch\.distributed\.run|accelerate\S*|pytest)", command):
        return f"python -m {found.group(1)}"
    if found := re.search(r"python\S* (?:-\S+ )*(\S+\.py)", command):
        return f"python {Path(found.group(1)).name}"
    return name


def sample_once(seen: dict[tuple[int, int], list], baseline: bool = False) -> None:
    """Every process's latest CPU seconds, by (pid, start time); with `baseline`, the CPU the
    processes running before the command already had, which does not count."""
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
            fields = stat[stat.rfind(")") + 2 :].split()
            key, cpu = (int(entry.name), int(fields[19])), (int(fields[11]) + int(fields[12])) / TICK
            if key not in seen:
                command = Path(entry.path, "cmdline").read_bytes().replace(b"\0", b" ")
                name = stat[stat.find("(") + 1 : stat.rfind(")")]
                seen[key] = [kind(command.decode(errors="replace"), name), cpu if baseline else 0.0, cpu]
            seen[key][2] = cpu
        except (OSError, IndexError, ValueError):
            continue  # ended meanwhile


def sample(seen: dict[tuple[int, int], list], stop: threading.Event) -> None:
    while not stop.wait(0.5):
        sample_once(seen)


def main() -> int:
    command = sys.argv[sys.argv.index("--") + 1 :] if "--" in sys.argv else ["make", "test"]
    seen: dict[tuple[int, int], list] = {}
    sample_once(seen, baseline=True)
    stop = threading.Event()
    sampler = threading.Thread(target=sample, args=(seen, stop), daemon=True)
    (busy, idle), started = machine_cpu(), time.monotonic()
    sampler.start()
    code = subprocess.call(command)
    stop.set()
    sampler.join()
    busy, idle = (after - before for after, before in zip(machine_cpu(), (busy, idle)))
    cpu, count = Counter(), Counter()
    for row, before, after in seen.values():
        if after - before >= 0.05:
            cpu[row] += after - before
            count[row] += 1
    print(f"\n{' '.join(command)}: exit {code}, {time.monotonic() - started:.0f} s wall; the machine "
          f"was busy {busy:.0f} CPU-s and idle {idle:.0f}; the sampler saw {sum(cpu.values()):.0f}\n")  # fmt: skip
    print("| processes | count | CPU-s |\n|---|---:|---:|")
    for row, seconds in cpu.most_common(25):
        print(f"| {row} | {count[row]} | {seconds:.0f} |")
    return code


if __name__ == "__main__":
    sys.exit(main())
