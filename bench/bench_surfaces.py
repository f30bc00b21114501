"""The policy endpoint's surfaces under a careless client, before and after the guards, one run.

Each side is `envharness policy --model tiny` in its own process (the code before: `_before.py`):
- a reply of `max_tokens` 10**9: what the client gets within 20 s, and whether the server still
  generates for nobody 5 s after the client gave up (a 2-token call then waits behind it);
- a 2-token call on another rollout while a 500-token reply is generating (the batcher forms
  batches between generations: the short call waits for the long one either way);
- SIGTERM with two 3900-token replies in flight: seconds to exit, tracebacks in the log;
- a 40 MiB chunked body: bytes the client had sent when the 413 came.

    python bench/bench_surfaces.py
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from _before import before_env  # noqa: E402
from test_server_guards import chunked_upload  # noqa: E402

BEFORE = "f297d17"  # main before issue 46
CLI = [sys.executable, "-c", "import sys; from envharness.cli import main; sys.exit(main())"]
HELLO = [{"role": "user", "content": "hi"}]


def start(env: dict[str, str], log: Path) -> tuple[subprocess.Popen, str]:
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [*CLI, "policy", "--model", "tiny", "--port", "0"], stdout=out, stderr=subprocess.STDOUT, env=env
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


def main() -> None:
    before = before_env(BEFORE)
    sides = {"this code": dict(os.environ)}
    if before is not None:
        sides[f"before ({BEFORE})"] = {**os.environ, **before}
    results = {}
    for name, env in sides.items():
        with tempfile.TemporaryDirectory() as folder:
            results[name] = measure(env, Path(folder))
    names = list(results)
    print("| | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for key in results[names[0]]:
        print(f"| {key} | " + " | ".join(results[n].get(key, "") for n in names) + " |")


if __name__ == "__main__":
    main()
