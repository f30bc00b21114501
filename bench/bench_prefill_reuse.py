"""Prefill reuse in TransformersBackend, side by side with the backend before it (a git ref).

    PYTHONPATH=src PLAYWRIGHT_BROWSERS_PATH=.venv/ms-playwright .venv/bin/python bench/bench_prefill_reuse.py [--reps 3] [--baseline-ref 1d2daa2]

Real pages: one browsergym server on loopback resets each task at a few seeds and keeps the
observations (then closes). Two workloads, each timed for both backends in alternation, on
the embedded SmolLM2-135M-Instruct with the same seeds (the medians are printed):

- `grpo-step`: the generation of one GRPO step as `examples/train_multiturn.py` runs it:
  2 groups x 8 episodes (each group on one page), compact prompt, T=1, 12 tokens per turn,
  two turns (turn 2 = turn 1 + completion + the compact page, passed as `prefix_ids`).
- `demo-step`: the first model step of `make demo`: 16 episodes (click-test, click-button,
  focus-text, enter-text x 4 seeds), the default prompt (~450 tokens), greedy, 16 tokens.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from envharness.models.base import GenerationRequest, SamplingParams


def observations(pages: list[tuple[str, int]]) -> list[Any]:
    from envharness.core.launchers import LocalServer
    from envharness.envs.browsergym import BrowserGymEnv

    with LocalServer("browsergym", pruned_html=False, extra_properties=False) as server:
        env = BrowserGymEnv(base_url=server.base_url)
        try:
            return [env.reset(task=task, seed=seed).observation for task, seed in pages]
        finally:
            env.close()


def baseline_backend_class(ref: str) -> Any:
    source = subprocess.run(
        ["git", "show", f"{ref}:src/envharness/models/transformers_backend.py"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    path = Path(tempfile.mkdtemp()) / "baseline_transformers_backend.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("baseline_transformers_backend", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module.TransformersBackend


def grpo_step(backend: Any, obs: list[Any]) -> tuple[float, int]:
    """Two turns of 2 groups x 8 episodes; returns (seconds, prompt tokens in the requests)."""
    from envharness.envs.browsergym.compact_prompt import compact_prompt, compact_tool_result

    tools = ["click", "fill", "send_keys", "scroll", "noop"]
    convs = [compact_prompt(o, None, tools) for o in obs for _ in range(8)]
    started = time.perf_counter()
    first = backend.generate_blocking(
        [
            GenerationRequest(c, sampling=SamplingParams(temperature=1.0, max_tokens=12, seed=i))
            for i, c in enumerate(convs)
        ]
    )
    second = [
        GenerationRequest(
            c
            + [{"role": "assistant", "content": g.text}, {"role": "tool", "content": compact_tool_result(o)}],
            sampling=SamplingParams(temperature=1.0, max_tokens=12, seed=100 + i),
            prefix_ids=g.prompt_ids + g.completion_ids,
        )
        for i, (c, g, o) in enumerate(zip(convs, first, [o for o in obs for _ in range(8)]))
    ]
    gens = backend.generate_blocking(second)
    return time.perf_counter() - started, sum(len(g.prompt_ids) for g in first + gens)


def demo_step(backend: Any, obs: list[Any]) -> tuple[float, int]:
    from envharness.envs.browsergym.prompts import default_prompt
    from envharness.prompts.text import PromptContext

    count = lambda text: len(backend.tokenizer.encode(text, add_special_tokens=False))  # noqa: E731
    convs = [
        default_prompt(PromptContext(goal=o.goal, url=o.url, axtree=o.axtree_txt, count_tokens=count))
        for o in obs
    ]
    started = time.perf_counter()
    gens = backend.generate_blocking(
        [GenerationRequest(c, sampling=SamplingParams(temperature=0.0, max_tokens=16)) for c in convs]
    )
    return time.perf_counter() - started, sum(len(g.prompt_ids) for g in gens)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--baseline-ref", default="1d2daa2")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    from envharness.models.embedded import load_model
    from envharness.models.transformers_backend import TransformersBackend

    model, tokenizer = load_model()
    Baseline = baseline_backend_class(args.baseline_ref)
    grpo_obs = observations([("click-button-sequence", 1_000_001), ("click-button-sequence", 1_000_002)])
    demo_obs = observations(
        [(t, s) for t in ("click-test", "click-button", "focus-text", "enter-text") for s in range(4)]
    )
    results: dict[tuple[str, str], list[float]] = {}
    prefill: dict[str, int] = {}
    for rep in range(args.reps):
        order = [("before", Baseline), ("after", TransformersBackend)]
        for name, cls in order if rep % 2 == 0 else order[::-1]:
            for workload, fn, obs in (("grpo-step", grpo_step, grpo_obs), ("demo-step", demo_step, demo_obs)):
                backend = cls(model, tokenizer)  # fresh: nothing cached from an earlier repetition
                seconds, prompt_tokens = fn(backend, obs)
                results.setdefault((workload, name), []).append(seconds)
                prefill[f"{workload}/{name}"] = getattr(backend, "prefill_tokens", prompt_tokens)
                print(
                    f"rep {rep} {workload:9} {name:6} {seconds:7.1f} s  prompt tokens {prompt_tokens}  "
                    f"prefilled {prefill[f'{workload}/{name}']}",
                    flush=True,
                )
    print(
        f"\n| workload | before (s, median of {args.reps}) | after (s) | speed-up | prompt tokens prefilled before -> after |"
    )
    print("|---|---|---|---|---|")
    for workload in ("grpo-step", "demo-step"):
        b, a = (
            statistics.median(results[(workload, "before")]),
            statistics.median(results[(workload, "after")]),
        )
        print(
            f"| {workload} | {b:.1f} | {a:.1f} | {b / a:.1f}x | {prefill[f'{workload}/before']} -> {prefill[f'{workload}/after']} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
