"""Concurrent envharness rollouts against the seed's sequential loop, same tasks, same server.

16 BrowserGym episodes (MiniWoB tasks the scripted policy solves; real Chromium behind a
`browsergym` server in its own process on loopback), run as a TRL `rollout_func(prompts, trainer)`:

- **seed-style (OpenEnv 0.10.0)**: OpenEnv's own `build_harness_rollout_func` and
  `MCPHarnessAdapter` (one episode after another), the tutorial's session factory over the
  sync `BrowserGymEnv`, and a sync model step that answers one prompt per call, as the
  tutorial's `generate_rollout_completions(trainer, [prompt_text])` does.
- **envharness**: `envharness.harness.build_harness_rollout_func` with the same session
  factory and client, `max_concurrency` episodes in flight, their model steps batched by
  `BatchingModelStep` on the same policy (`ScriptedBackend`).
- **envharness, pooled sessions**: the same, with `envharness.core.ClientPool` as the client
  factory: an episode hands its server session back when it ends and the next one resets it
  in place, instead of opening a new browser context (what `envharness train` does).

Two model settings: `instant` (the policy costs nothing: harness + environment only) and
`latency` (every model call takes `--model-latency` s whatever its batch size, like one
batched forward pass on an accelerator or one round trip to an inference server). Each
configuration runs `--repeats` times; the table shows medians.

Usage: python bench/bench_rollout.py [--episodes 16] [--concurrency 8] [--repeats 3]
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from envharness.core import ClientPool
from envharness.envs.browsergym import BrowserGymEnv
from envharness.envs.browsergym.sessions import BrowserGymSessionFactory, build_browsergym_action_tool_call
from envharness.harness import BatchingModelStep, HarnessRunLimits, build_harness_rollout_func
from envharness.models.base import Generation, GenerationRequest
from envharness.models.scripted import ScriptedBackend

# Tasks the scripted policy solves from the AXTree (not click-link: its links have no bid there).
TASKS = [
    "click-test",
    "click-button",
    "enter-text",
    "focus-text",
    "click-dialog",
    "click-checkboxes",
    "click-tab",
]


class SeededSessionFactory(BrowserGymSessionFactory):
    """Prompts `task#seed`, so both rollout functions play the very same task instances
    (OpenEnv's rollout passes only `task=prompt` to the factory)."""

    @staticmethod
    def _split(task: str) -> tuple[str, int]:
        name, _, seed = task.partition("#")
        return name, int(seed)

    def create(self, task: Any = None, seed: int | None = None, episode_id: str | None = None):
        name, seed = self._split(task)
        return super().create(name, seed, episode_id)

    async def create_async(self, task: Any = None, seed: int | None = None, episode_id: str | None = None):
        name, seed = self._split(task)
        return await super().create_async(name, seed, episode_id)


class FixedLatency:
    """Wraps a backend so that every call (any batch size) takes at least `seconds`."""

    def __init__(self, inner: Any, seconds: float):
        self.inner, self.seconds, self.name = inner, seconds, f"{inner.name}+{seconds}s"
        self.calls = 0

    async def generate(self, requests: list[GenerationRequest]) -> list[Generation]:
        started = time.perf_counter()
        self.calls += 1
        out = await self.inner.generate(requests)
        await asyncio.sleep(max(0.0, self.seconds - (time.perf_counter() - started)))
        return out

    async def aclose(self) -> None:
        await self.inner.aclose()


def seed_rollout_func(
    factory: BrowserGymSessionFactory, latency: float, limits: Any, counter: list[int]
) -> Callable:
    """OpenEnv's own sequential rollout function, with a one-prompt-per-call model step."""
    import openenv.core.harness as oe
    from openenv.core.llm_client import LLMResponse, ToolCall

    backend = ScriptedBackend()

    def model_step(messages, tools, sampling):
        started = time.perf_counter()
        counter.append(1)
        [gen] = asyncio.run(backend.generate([GenerationRequest(messages=list(messages))]))
        call = build_browsergym_action_tool_call(gen.text)
        time.sleep(max(0.0, latency - (time.perf_counter() - started)))
        return oe.ModelStepResult(
            response=LLMResponse(
                content=gen.text, tool_calls=[ToolCall(id=call.id, name=call.name, args=call.args)]
            )
        )

    return oe.build_harness_rollout_func(
        session_factory=factory,
        harness_adapter=oe.MCPHarnessAdapter(),
        model_step_builder=lambda trainer, session: model_step,
        limits=oe.HarnessRunLimits(max_turns=limits.max_turns),
    )


def envharness_rollout_func(
    factory: BrowserGymSessionFactory, latency: float, limits: Any, concurrency: int, counter: list[int]
) -> Callable:
    backend = FixedLatency(ScriptedBackend(), latency)
    batcher = BatchingModelStep(backend, tool_call_parser=build_browsergym_action_tool_call, send_tools=False)

    def rollout_func(prompts, trainer):
        out = build_harness_rollout_func(
            session_factory=factory,
            model_step_builder=lambda trainer, session: batcher.for_episode(),
            limits=limits,
            max_concurrency=concurrency,
        )(prompts, trainer)
        counter.append(backend.calls)
        backend.calls = 0
        return out

    return rollout_func


def measure(make: Callable[[list[int]], Callable], prompts: list[str], repeats: int) -> dict[str, Any]:
    walls, rewards, calls = [], [], []
    for _ in range(repeats):
        counter: list[int] = []
        rollout_func = make(counter)
        started = time.perf_counter()
        out = rollout_func(prompts, None)
        walls.append(time.perf_counter() - started)
        rewards.append(statistics.mean(out["env_reward"]))
        calls.append(sum(counter))
    return {
        "wall": statistics.median(walls),
        "reward": statistics.median(rewards),
        "calls": statistics.median(calls),
        "walls": walls,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=16)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--model-latency", type=float, default=0.2, help="seconds per model call in the `latency` setting"
    )
    parser.add_argument("--max-turns", type=int, default=6)
    parser.add_argument("--url", help="use a running browsergym server instead of starting one")
    args = parser.parse_args()

    from envharness.core.launchers import launch_local

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the server on `kill` too

    server = None if args.url else launch_local("browsergym")  # its own process, as in training
    url = args.url or server.base_url
    factory = SeededSessionFactory(client_factory=lambda: BrowserGymEnv(base_url=url))
    pool = ClientPool(lambda: BrowserGymEnv(base_url=url))
    pooled = SeededSessionFactory(client_factory=pool)
    limits = HarnessRunLimits(max_turns=args.max_turns)
    prompts = [f"{TASKS[i % len(TASKS)]}#{i}" for i in range(args.episodes)]
    try:
        envharness_rollout_func(factory, 0.0, limits, 2, [])(prompts[:4], None)  # warm-up: browser, pages
        # the pool opens its sessions once, as a training run does at its first step
        envharness_rollout_func(pooled, 0.0, limits, args.concurrency, [])(prompts[: args.concurrency], None)
        print(
            f"\n{args.episodes} episodes ({len(TASKS)} MiniWoB tasks, seeds 0..{args.episodes - 1}), max_turns={args.max_turns}, median of {args.repeats}\n"
        )
        columns = [
            "model",
            "rollout",
            "in flight",
            "wall s (median)",
            "episodes/s",
            "speedup",
            "mean reward",
            "model calls",
        ]
        print("| " + " | ".join(columns) + " |")
        print("|" + "---|" * len(columns))
        for name, latency in (
            ("instant", 0.0),
            (f"latency {args.model_latency:g} s/call", args.model_latency),
        ):
            rows = [
                (
                    "seed-style (OpenEnv 0.10.0)",
                    1,
                    lambda c, latency=latency: seed_rollout_func(factory, latency, limits, c),
                ),
                (
                    "envharness",
                    1,
                    lambda c, latency=latency: envharness_rollout_func(factory, latency, limits, 1, c),
                ),
                (
                    "envharness",
                    args.concurrency,
                    lambda c, latency=latency: envharness_rollout_func(
                        factory, latency, limits, args.concurrency, c
                    ),
                ),
                (
                    "envharness, pooled sessions",
                    1,
                    lambda c, latency=latency: envharness_rollout_func(pooled, latency, limits, 1, c),
                ),
                (
                    "envharness, pooled sessions",
                    args.concurrency,
                    lambda c, latency=latency: envharness_rollout_func(
                        pooled, latency, limits, args.concurrency, c
                    ),
                ),
            ]
            base = None
            for label, in_flight, make in rows:
                r = measure(make, prompts, args.repeats)
                base = base or r["wall"]
                print(
                    f"| {name} | {label} | {in_flight} | {r['wall']:.2f} | {args.episodes / r['wall']:.2f} | "
                    f"{base / r['wall']:.1f}x | {r['reward']:.2f} | {r['calls']:.0f} |",
                    flush=True,
                )
    finally:
        pool.close()
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()
