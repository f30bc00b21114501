"""The policy endpoint's surfaces under a careless client, before and after the guards, one run.

Each side is `envharness policy --model tiny` in its own process (the code before: `_before.py`):
- a reply of `max_tokens` 10**9: what the client gets within 20 s, and whether the server still
  generates for nobody 5 s after the client gave up (a 2-token call then waits behind it);
- a 2-token call on another rollout while a 500-token reply is generating (the batcher forms
  batches between generations: the short call waits for the long one either way);
- SIGTERM with two 3900-token replies in flight: seconds to exit, tracebacks in the log;
- a 40 MiB chunked body: bytes the client had sent when the 413 came;
- a 30 MB prompt (under the 32 MiB body limit): `/health` answers while it is handled (how many,
  the slowest), the call's answer, and the server's memory before, at its peak and 3 s after;
- the largest game options (`envharness serve textarena`): Minesweeper 2000x2000, TowerOfHanoi
  with 3e6 disks: the answer, its size and seconds.

The last two rows are measured against `BEFORE_BIG` (main before the prompt and option limits).

    python bench/bench_surfaces.py [--only big]
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from _before import before_env  # noqa: E402
from test_server_guards import chunked_upload  # noqa: E402

BEFORE = "f297d17"  # main before issue 46
BEFORE_BIG = "8e8da18"  # main before the prompt-token and game-option limits
BIG_PROMPT = [{"role": "user", "content": "hello world " * 2_500_000}]  # 30 MB
LARGEST_OPTIONS = {
    "Minesweeper 2000x2000": {"task": "Minesweeper-v0", "rows": 2000, "cols": 2000},
    "TowerOfHanoi 3e6 disks": {"task": "TowerOfHanoi-v0", "num_disks": 3_000_000},
}
CLI = [sys.executable, "-c", "import sys; from envharness.cli import main; sys.exit(main())"]
HELLO = [{"role": "user", "content": "hi"}]


def start(
    env: dict[str, str], log: Path, command: tuple[str, ...] = ("policy", "--model", "tiny")
) -> tuple[subprocess.Popen, str]:
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [*CLI, *command, "--port", "0"], stdout=out, stderr=subprocess.STDOUT, env=env
        )
    while "listening on" not in log.read_text():
        if proc.poll() is not None:
            raise RuntimeError(log.read_text())
        time.sleep(0.1)
    return proc, re.search(r"listening on (http://\S+)", log.read_text()).group(1)


def rollout(url: str) -> str:
    return f"{url}/rollouts/{httpx.post(f'{url}/rollouts', json={}).json()['rollout_id']}/v1/chat/completions"


def call(target: str, max_tokens: int, timeout: float) -> str:
    began = time.monotonic()
    try:
        reply = httpx.post(target, json={"messages": HELLO, "max_tokens": max_tokens}, timeout=timeout)
    except httpx.TimeoutException:
        return f"no answer in {timeout:.0f} s"
    except httpx.HTTPError as exc:  # the server went away mid-call (SIGTERM)
        return type(exc).__name__
    try:
        body = reply.json()
    except ValueError:
        return f"{reply.status_code} (no JSON body)"
    what = body.get("error", {}).get("code") or f"{body['usage']['completion_tokens']} tokens"
    return f"{reply.status_code} {what} in {time.monotonic() - began:.1f} s"


def measure(env: dict[str, str], folder: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    proc, url = start(env, folder / "policy.log")
    try:
        out["max_tokens 10**9"] = call(rollout(url), 10**9, 20.0)
        time.sleep(5.0)
        out["2-token call after the client gave up"] = call(rollout(url), 2, 60.0)  # behind what still runs
    finally:
        proc.kill()  # a fresh server for the rest: the code before still generates the 10**9 reply
    proc, url = start(env, folder / "policy.log")
    try:
        long = threading.Thread(target=call, args=(rollout(url), 500, 600.0))
        long.start()
        time.sleep(2.0)
        out["2-token call beside a 500-token one"] = call(rollout(url), 2, 600.0)
        long.join()
        status, sent = chunked_upload(f"{url}/v1/chat/completions", 40 * 1024 * 1024)
        out["40 MiB chunked body: sent before the answer"] = f"{status}, {sent / 2**20:.2f} MiB"
        for _ in range(2):
            threading.Thread(target=call, args=(rollout(url), 3900, 600.0), daemon=True).start()
        time.sleep(3.0)
        began = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=600)
        text = (folder / "policy.log").read_text()
        out["SIGTERM with two long replies: exit"] = f"{time.monotonic() - began:.1f} s"
        out["tracebacks in the log"] = str(text.count("Traceback"))
    finally:
        if proc.poll() is None:
            proc.kill()
    return out


def big_prompt(url: str, pid: int) -> dict[str, str]:
    """The 30 MB prompt: `/health` polled while it is handled; the server's memory around it."""
    server = psutil.Process(pid)
    target = rollout(url)
    call(target, 2, 600.0)  # warm: the model has generated once
    before = peak = server.memory_info().rss
    reply: dict[str, str] = {}
    began = time.monotonic()

    def send() -> None:
        try:
            answer = httpx.post(target, json={"messages": BIG_PROMPT, "max_tokens": 3}, timeout=1800)
            error = answer.json().get("error", {})
            reply["answer"] = (
                f"{answer.status_code} {error.get('code', '')}: {error.get('message', '')[:60]}..."
            )
        except httpx.HTTPError as exc:
            reply["answer"] = type(exc).__name__
        reply["seconds"] = f"{time.monotonic() - began:.1f} s"

    sender = threading.Thread(target=send)
    sender.start()
    answers, slowest = 0, 0.0
    while sender.is_alive():  # every /health asked while the big call is handled, however long it takes
        asked = time.monotonic()
        httpx.get(f"{url}/health", timeout=1800)
        answers, slowest = answers + 1, max(slowest, time.monotonic() - asked)
        peak = max(peak, server.memory_info().rss)
        time.sleep(0.05)
    time.sleep(3.0)
    after = server.memory_info().rss
    mb = 2**20
    return {
        "30 MB prompt: answer": f"{reply['answer']} in {reply['seconds']}",
        "30 MB prompt: /health asked while it was handled: answers, slowest": f"{answers}, {slowest:.2f} s",
        "30 MB prompt: RSS before / peak / 3 s after": (
            f"{before / mb:.0f} / {peak / mb:.0f} / {after / mb:.0f} MiB ({(after - before) / before:+.0%})"
        ),
    }


def largest_options(url: str) -> dict[str, str]:
    out = {}
    for name, options in LARGEST_OPTIONS.items():
        began = time.monotonic()
        reply = httpx.post(f"{url}/reset", json=options, timeout=1800)
        took = time.monotonic() - began
        words = reply.text[:90] if reply.status_code >= 400 else "a game"
        out[f"reset {name}"] = (
            f"{reply.status_code} in {took:.2f} s, {len(reply.content) / 1e6:.2f} MB: {words}"
        )
    return out


def measure_big(env: dict[str, str], folder: Path) -> dict[str, str]:
    proc, url = start(env, folder / "policy.log")
    try:
        out = big_prompt(url, proc.pid)
    finally:
        proc.kill()
    proc, url = start(env, folder / "serve.log", ("serve", "textarena"))
    try:
        out.update(largest_options(url))
    finally:
        proc.kill()
    return out


def run_sides(rev: str, measure_fn) -> dict[str, dict[str, str]]:
    before = before_env(rev)
    sides = {"this code": dict(os.environ)}
    if before is not None:
        sides[f"before ({rev})"] = {**os.environ, **before}
    results = {}
    for name, env in sides.items():
        with tempfile.TemporaryDirectory() as folder:
            results[name] = measure_fn(env, Path(folder))
    return results


def main() -> None:
    only_big = sys.argv[1:] == ["--only", "big"]
    if not only_big:
        table(run_sides(BEFORE, measure))
    table(run_sides(BEFORE_BIG, measure_big))


def table(results: dict[str, dict[str, str]]) -> None:
    names = list(results)
    print("| | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for key in results[names[0]]:
        print(f"| {key} | " + " | ".join(results[n].get(key, "") for n in names) + " |")


if __name__ == "__main__":
    main()
