"""How much faster are concurrent harness rollouts than sequential ones?

Runs the same 16 BrowserGym episodes (MiniWoB tasks solved by the scripted policy, real
Chromium behind a real server on loopback) one after another and with 8 in flight, and
prints a table. Three model settings:

- `scripted`: the scripted policy as a model backend (no model time at all: pure harness +
  environment overhead).
- `scripted+latency`: the same, but every backend call takes `--model-latency` seconds
  whatever its batch size, like one batched forward pass on an accelerator or one
  round-trip to an inference server. This is where batching concurrent model steps pays.
- `tiny-llama` (with --tiny-model): a random 2-layer Llama on the SmolLM2 tokenizer through
  the real TransformersBackend (exact tokens, batched decoding on CPU); it does not solve
  tasks, so episodes run to --max-turns.

Usage: python bench/bench_rollout.py [--episodes 16] [--concurrency 8] [--tiny-model]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from envharness.envs.browsergym import AsyncBrowserGymEnv, BrowserGymEnv
from envharness.envs.browsergym.harness import BrowserGymSessionFactory, build_browsergym_action_tool_call
from envharness.harness import BatchingModelStep, HarnessRunLimits, run_episodes
from envharness.models.base import Generation, GenerationRequest
from envharness.models.scripted import ScriptedBackend

TASKS = ["click-test", "click-button", "click-link", "enter-text", "focus-text", "click-dialog", "click-checkboxes", "click-tab"]


class FixedLatency:
    """Wraps a backend so that every call (any batch size) takes at least `seconds`."""

    def __init__(self, inner, seconds: float):
        self.inner, self.seconds, self.name = inner, seconds, f"{inner.name}+{seconds}s"

    async def generate(self, requests: list[GenerationRequest]) -> list[Generation]:
        started = time.perf_counter()
        out = await self.inner.generate(requests)
        await asyncio.sleep(max(0.0, self.seconds - (time.perf_counter() - started)))
        return out

    async def aclose(self) -> None:
        await self.inner.aclose()


async def run(backend, url: str, episodes: int, concurrency: int, client: str, max_turns: int) -> dict:
    make_client = (lambda: AsyncBrowserGymEnv(base_url=url)) if client == "async" else (lambda: BrowserGymEnv(base_url=url))
    factory = BrowserGymSessionFactory(client_factory=make_client)
    batcher = BatchingModelStep(backend, tool_call_parser=build_browsergym_action_tool_call, send_tools=False)
    tasks = [TASKS[i % len(TASKS)] for i in range(episodes)]
    limits = HarnessRunLimits(max_turns=max_turns, sampling={"max_tokens": 16, "temperature": 1.0})
    started = time.perf_counter()
    results = await run_episodes(factory, tasks, backend=batcher, limits=limits, max_concurrency=concurrency, seeds=list(range(episodes)))
    wall = time.perf_counter() - started
    errors = [r.error for r in results if r.error]
    if errors:
        print(f"  ! {len(errors)} failed episodes, e.g. {errors[0]}")
    return {
        "wall": wall,
        "reward": statistics.mean(r.env_reward or 0.0 for r in results),
        "steps": sum(r.metrics.get("tool_calls", 0) for r in results),
        "calls": len(batcher.batch_sizes),
        "batch": statistics.mean(batcher.batch_sizes) if batcher.batch_sizes else 0.0,
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=16)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--model-latency", type=float, default=0.2, help="seconds per backend call in scripted+latency")
    parser.add_argument("--client", choices=["sync", "async"], default="sync", help="sync: the tutorial's BrowserGymEnv")
    parser.add_argument("--max-turns", type=int, default=6)
    parser.add_argument("--tiny-model", action="store_true", help="also run a tiny random Llama (real tokenizer, CPU)")
    parser.add_argument("--url", help="use a running browsergym server instead of starting one")
    args = parser.parse_args()

    settings = [("scripted", lambda: ScriptedBackend()), ("scripted+latency", lambda: FixedLatency(ScriptedBackend(), args.model_latency))]
    if args.tiny_model:
        from envharness.models.embedded import tiny_test_model
        from envharness.models.transformers_backend import TransformersBackend

        tiny = TransformersBackend(*tiny_test_model())
        settings.append(("tiny-llama", lambda: tiny))

    from envharness.core.launchers import LocalServer

    server = None if args.url else LocalServer("browsergym").__enter__()
    url = args.url or server.base_url
    try:
        await run(ScriptedBackend(), url, 2, 2, args.client, args.max_turns)  # warm-up: browser, pages
        columns = ["model", "in flight", "episodes", "env steps", "wall s", "episodes/s", "speedup", "mean reward", "backend calls", "mean batch"]
        print(f"\n{args.episodes} episodes, client={args.client}, max_turns={args.max_turns}\n")
        print("| " + " | ".join(columns) + " |")
        print("|" + "---|" * len(columns))
        for name, make in settings:
            base = None
            for concurrency in (1, args.concurrency):
                r = await run(make(), url, args.episodes, concurrency, args.client, args.max_turns)
                base = base or r["wall"]
                print(
                    f"| {name} | {concurrency} | {args.episodes} | {r['steps']} | {r['wall']:.2f} | {args.episodes / r['wall']:.1f} | "
                    f"{base / r['wall']:.1f}x | {r['reward']:.2f} | {r['calls']} | {r['batch']:.1f} |",
                    flush=True,
                )
    finally:
        if server is not None:
            server.__exit__(None, None, None)


if __name__ == "__main__":
    asyncio.run(main())
