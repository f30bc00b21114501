"""How each way a job can end leaves the machine: processes left, time to clean, exit code.

    PLAYWRIGHT_BROWSERS_PATH=.venv/ms-playwright .venv/bin/python bench/bench_exit_paths.py
    .venv/bin/python bench/bench_exit_paths.py --src /tmp/old/src --src src   # two versions side by side

Each case starts a job in a subprocess with `PYTHONPATH=SRC`, tags its environment with a
unique marker (inherited by its server, the Playwright driver and Chromium), ends it one
way, then polls /proc for processes carrying the marker. Reported: the job's exit code,
seconds from the end signal to the job's exit, seconds until none of its processes is
left (or how many are still there after `--grace` seconds; those are then killed), and
whether the output has a traceback / a resume line.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

CLI = "import sys; from envharness.cli import main; sys.exit(main())"
SCRIPT = """
import os, sys, time
from envharness.envs.browsergym import BrowserGymEnv
env = BrowserGymEnv.from_local()
env.reset(task="click-test", seed=1)
print("ready", flush=True)
if sys.argv[1] == "os_exit":
    os._exit(1)
time.sleep(600)
"""
TRAIN = [
    "train",
    "--model",
    "tiny",
    "--lora",
    "--steps",
    "6",
    "--save-steps",
    "5",
    "--num-generations",
    "2",
    "--groups-per-step",
    "1",
    "--max-completion-length",
    "8",
    "--threads",
    "1",
]
EVAL = [
    "eval",
    "--model",
    "scripted",
    "--tasks",
    "click-test,click-button",
    "--episodes",
    "5",
    "--concurrency",
    "1",
    "--no-progress",
    "--no-screenshots",
]


def tagged(tag: str) -> list[int]:
    needle = f"ENVHARNESS_TEST_TAG={tag}".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if needle in (entry / "environ").read_bytes().split(b"\0") and (
                    entry / "stat"
                ).read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X"):
                    pids.append(int(entry.name))
            except (OSError, IndexError):
                pass
    return pids


def run_case(src: str, name: str, grace_s: float, work: Path) -> dict:
    tag = uuid.uuid4().hex
    env = dict(os.environ, PYTHONPATH=src, ENVHARNESS_TEST_TAG=tag, PYTHONUNBUFFERED="1")
    out = work / f"{tag}.log"
    run_dir = work / tag
    kind, _, how = name.partition(":")
    if kind == "script":
        argv = [sys.executable, "-c", SCRIPT, how]
        ready = lambda: "ready" in out.read_text()  # noqa: E731
    elif how == "bad-model":
        argv = [sys.executable, "-c", CLI, *EVAL, "--model", "/nonexistent/model", "--out", str(run_dir)]
        ready = lambda: True  # noqa: E731
    elif kind == "train":  # ended during step 3 (2 finished, no periodic checkpoint yet)
        argv = [sys.executable, "-c", CLI, *TRAIN, "--output-dir", str(run_dir)]
        ready = lambda: "[train] step 2/6" in out.read_text()  # noqa: E731
    else:
        argv = [sys.executable, "-c", CLI, *EVAL, "--out", str(run_dir)]
        episodes = run_dir / "episodes.jsonl"
        ready = lambda: episodes.exists() and episodes.stat().st_size > 0  # noqa: E731
    with out.open("w") as log:
        proc = subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
    deadline = time.monotonic() + 300
    while not ready() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    sig = {"SIGKILL": signal.SIGKILL, "SIGTERM": signal.SIGTERM, "ctrl-c": signal.SIGINT}.get(how)
    ended = time.monotonic()
    if sig == signal.SIGINT:
        os.killpg(proc.pid, sig)
    elif sig is not None:
        proc.send_signal(sig)
    try:
        code = proc.wait(120)
    except subprocess.TimeoutExpired:
        code = None
    exited_s = time.monotonic() - ended
    while (left := tagged(tag)) and time.monotonic() - ended < grace_s:
        time.sleep(0.1)
    clean_s = time.monotonic() - ended
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    text = out.read_text(errors="replace")
    checkpoints = sorted(p.name for p in run_dir.glob("checkpoint-*")) if kind == "train" else []
    return {
        "code": code,
        "exit_s": exited_s,
        "left": len(left),
        "clean_s": clean_s,
        "checkpoints": checkpoints,
        "kind": kind,
        "traceback": "Traceback" in text,
        "resume_line": "Resume with:" in text,
    }


def fmt(r: dict) -> str:
    gone = f"{r['left']} left after {r['clean_s']:.0f}s" if r["left"] else f"none left at {r['clean_s']:.1f}s"
    notes = ", traceback" if r["traceback"] else ""
    notes += ", resume line" if r["resume_line"] else ""
    notes += (
        f", kept {','.join(r['checkpoints']) or 'no checkpoint'}"
        if "checkpoints" in r and r.get("kind") == "train"
        else ""
    )
    return f"rc {r['code']}, exit {r['exit_s']:.1f}s, {gone}{notes}"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--src", action="append", help="source folder(s) to compare (default: ./src)")
    parser.add_argument("--grace", type=float, default=20.0, help="seconds to wait for processes to go")
    parser.add_argument(
        "--cases",
        default="script:os_exit,script:SIGKILL,script:SIGTERM,eval:bad-model,"
        "eval:ctrl-c,eval:SIGTERM,eval:SIGKILL,train:SIGTERM",
    )
    args = parser.parse_args()
    sources = [str(Path(s).resolve()) for s in (args.src or ["src"])]
    with tempfile.TemporaryDirectory(prefix="envharness-exit-") as work:
        rows = []
        for case in args.cases.split(","):
            rows.append((case, [run_case(src, case, args.grace, Path(work)) for src in sources]))
            print(f"{case:16s} " + " | ".join(fmt(r) for r in rows[-1][1]), flush=True)
    print()
    print("| how the job ended | " + " | ".join(sources) + " |")
    print("|---|" + "---|" * len(sources))
    for case, results in rows:
        print(f"| {case} | " + " | ".join(fmt(r) for r in results) + " |")


if __name__ == "__main__":
    main()
