"""Embedded model: load time (cold GGUF conversion is measured by the slow test) and sampling
throughput of TransformersBackend for a few batch sizes. Prints a table.

    .venv/bin/python bench/models_generate.py [--max-tokens 16] [--batch 1 4 8]
"""

from __future__ import annotations

import argparse
import asyncio
import time


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 4, 8])
    args = parser.parse_args()

    t0 = time.perf_counter()
    from envharness.models import load_backend
    from envharness.models.base import GenerationRequest, SamplingParams

    backend = load_backend("embedded")
    load_s = time.perf_counter() - t0
    page = "\n".join(f"\t[{i}] button 'Option {i}'" for i in range(20))
    messages = [{"role": "user", "content": f"Goal: Click the button.\nPage:\nRootWebArea 'Task'\n{page}"}]
    print(f"load (imports + cached model): {load_s:.1f} s")
    print(f"{'batch':>5} {'prompt tok':>10} {'new tok':>8} {'wall s':>7} {'tok/s':>7}")
    for batch in args.batch:
        reqs = [
            GenerationRequest(messages, sampling=SamplingParams(max_tokens=args.max_tokens, seed=i))
            for i in range(batch)
        ]
        asyncio.run(backend.generate(reqs[:1]))  # warm-up
        t = time.perf_counter()
        gens = asyncio.run(backend.generate(reqs))
        wall = time.perf_counter() - t
        new = sum(len(g.completion_ids) for g in gens)
        print(f"{batch:>5} {len(gens[0].prompt_ids):>10} {new:>8} {wall:>7.2f} {new / wall:>7.1f}")


if __name__ == "__main__":
    main()
