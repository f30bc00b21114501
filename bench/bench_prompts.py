#!/usr/bin/env python3
"""The same model on the same pages under each prompt style, side by side in one run.

    python bench/bench_prompts.py --model embedded --tasks click-test,click-button,focus-text,enter-text --episodes 4

One browser server and one loaded model serve every style in turn (`run_eval(..., backend=...)`),
so the rows differ only by the prompt. Prints success, steps, tokens per episode and wall time.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time

from envharness.core.launchers import LocalServer
from envharness.eval.config import EvalConfig
from envharness.eval.runner import run_eval_async
from envharness.models import load_backend
from envharness.prompts import prompt_names


async def measure(args: argparse.Namespace, url: str) -> list[tuple]:
    backend = load_backend(args.model)
    rows = []
    try:
        for style in args.styles.split(","):
            with tempfile.TemporaryDirectory() as out:
                config = EvalConfig(
                    out=out,
                    tasks=args.tasks.split(","),
                    episodes=args.episodes,
                    model=args.model,
                    prompt=style,
                    max_steps=args.max_steps,
                    max_new_tokens=args.max_new_tokens,
                    env_url=url,
                    concurrency=args.concurrency,
                    screenshots=False,
                    progress=False,
                )
                started = time.perf_counter()
                result = await run_eval_async(config, backend=backend)
                seconds = time.perf_counter() - started
            n = len(result.records)
            wins = sum((r.get("env_reward") or 0) > 0 for r in result.records)
            steps = sum(len(r["steps"]) for r in result.records) / n
            prompt_tokens = sum(s["prompt_tokens"] for r in result.records for s in r["steps"]) / max(
                1, sum(len(r["steps"]) for r in result.records)
            )
            rows.append(
                (
                    style,
                    f"{wins}/{n}",
                    f"{wins / n:.2f}",
                    f"{steps:.1f}",
                    f"{prompt_tokens:.0f}",
                    f"{seconds:.0f} s",
                )
            )
            print("| " + " | ".join(rows[-1]) + " |", file=sys.stderr, flush=True)  # as it comes
    finally:
        await backend.aclose()
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="embedded")
    parser.add_argument("--styles", default=",".join(prompt_names()))
    parser.add_argument("--tasks", default="click-test,click-button,focus-text,enter-text")
    parser.add_argument("--episodes", type=int, default=4)
    parser.add_argument("--max-steps", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    with LocalServer("browsergym") as server:
        rows = asyncio.run(measure(args, server.base_url))
    header = ("--prompt", "solved", "success", "steps/ep", "prompt tokens/step", "wall")
    print("| " + " | ".join(header) + " |\n|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(row) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
