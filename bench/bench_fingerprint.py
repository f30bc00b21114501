"""What replay's observation fingerprints cost a step: the fingerprint of each real MiniWoB
observation (what `StepEnvSessionAdapter` adds after every reset and step) beside the step
itself, measured in one run on the same pages.

    PLAYWRIGHT_BROWSERS_PATH=.venv/ms-playwright .venv/bin/python bench/bench_fingerprint.py [--steps 30]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from envharness.core.launchers import LocalServer  # noqa: E402
from envharness.envs.browsergym import BrowserGymAction, BrowserGymEnv  # noqa: E402
from envharness.envs.browsergym.sessions import replay_view  # noqa: E402
from envharness.harness.step_session import observation_digest  # noqa: E402
from envharness.integrations.trl.servers import train_server_options  # noqa: E402

TASKS = ("click-test", "book-flight", "social-media", "email-inbox")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=30, help="noop steps per task (default %(default)s)")
    args = parser.parse_args()
    rows = []
    with (
        LocalServer("browsergym", **train_server_options("browsergym")) as server,
        BrowserGymEnv(base_url=server.base_url) as env,
    ):
        for task in TASKS:
            env.reset(task=task, seed=0, pruned_html=False, extra_properties=False)
            step_ms, digest_us, chars = [], [], 0
            for _ in range(args.steps):
                started = time.perf_counter()
                obs = env.step(BrowserGymAction(action_str="noop()")).observation
                step_ms.append((time.perf_counter() - started) * 1e3)
                started = time.perf_counter()
                observation_digest(obs, replay_view)
                digest_us.append((time.perf_counter() - started) * 1e6)
                chars = len(obs.axtree_txt)
            step, digest = statistics.median(step_ms), statistics.median(digest_us)
            rows.append((task, chars, step, digest, digest / (step * 1e3)))
    print(f"observation fingerprint vs step, {args.steps} noop steps per task, medians, one run\n")
    print("| task | AXTree chars | step p50 (ms) | fingerprint p50 (µs) | share of the step |")
    print("|---|---:|---:|---:|---:|")
    for task, chars, step, digest, share in rows:
        print(f"| {task} | {chars} | {step:.1f} | {digest:.0f} | {share:.2%} |")


if __name__ == "__main__":
    main()
