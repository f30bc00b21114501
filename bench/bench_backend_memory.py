#!/usr/bin/env python3
"""Memory of a GRPO run's sampling, step after step: a backend per step, as `train` makes one.

`train`'s rollout builds a `TransformersBackend` over the model being trained at every step and
drops it at the step's end; its prefix cache holds the keys/values of every turn it decoded.
Each column is a fresh process with one revision's `src/` (`--before REV`, default the commit
before the fix) that loads the model once, then plays STEPS steps: a new backend, a group of
episodes of two turns (the second prompt extends the first, as in an episode), the backend
dropped. After each step it records the process's resident memory (after `malloc_trim`, so
only what is live counts) and the bytes of live tensors, with Python's garbage collector left
to its own schedule, as in a run.

    python bench/bench_backend_memory.py                 # the embedded model, 12 steps (minutes)
    python bench/bench_backend_memory.py --model tiny    # about a minute
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _before import before_env  # noqa: E402

BEFORE_BACKEND_CYCLE = "13fd601"  # the decoder held its backend strongly: a reference cycle

ONE_COLUMN = r"""
import ctypes, gc, json, os, sys, torch
from envharness.models.base import GenerationRequest, SamplingParams
from envharness.models.transformers_backend import TransformersBackend
model_name, steps, group = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
if model_name == "tiny":
    from envharness.models.embedded import tiny_test_model
    model, tokenizer = tiny_test_model()
else:
    from envharness.models.embedded import load_model
    model, tokenizer = load_model()
libc = ctypes.CDLL(None)

def resident_mb():
    libc.malloc_trim(0)
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

def tensor_mb():
    storages = {}
    for o in gc.get_objects():
        if isinstance(o, torch.Tensor):
            storages[o.untyped_storage().data_ptr()] = o.untyped_storage().nbytes()
    return sum(storages.values()) / 2**20

page = "Page: " + " ".join(f"[{i}] button 'Item {i}'" for i in range(60))
rows = [{"step": 0, "resident_mb": resident_mb(), "tensor_mb": tensor_mb()}]
for step in range(1, steps + 1):
    backend = TransformersBackend(model, tokenizer)
    for turn in range(2):
        requests = [
            GenerationRequest(
                [{"role": "user", "content": f"{page} Step {step}, episode {i}, turn {turn}: click an item."}],
                sampling=SamplingParams(max_tokens=12, seed=step * 100 + i),
            )
            for i in range(group)
        ]
        backend.generate_blocking(requests)
    thread = backend._decoder._thread
    del backend, requests
    if thread is not None:
        thread.join()  # its idle wait ends: only what outlives the step is counted
    rows.append({"step": step, "resident_mb": resident_mb(), "tensor_mb": tensor_mb()})
print(json.dumps(rows))
"""


def column(env: dict[str, str] | None, model: str, steps: int, group: int) -> list[dict]:
    done = subprocess.run(
        [sys.executable, "-c", ONE_COLUMN, model, str(steps), str(group)],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        check=False,
    )
    if done.returncode:
        raise SystemExit(done.stderr[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="embedded", choices=["embedded", "tiny"])
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--group", type=int, default=8, help="episodes a step")
    p.add_argument("--before", default=BEFORE_BACKEND_CYCLE)
    args = p.parse_args()
    before = before_env(args.before)
    columns = {"now": column({}, args.model, args.steps, args.group)}
    if before is not None:
        columns = {f"before ({args.before})": column(before, args.model, args.steps, args.group), **columns}
    names = list(columns)
    print(f"{args.model} model, {args.group} episodes x 2 turns a step, a new backend each step (MB)")
    print("| after step | " + " | ".join(f"{n}: resident | {n}: live tensors" for n in names) + " |")
    print("|---:|" + "---:|---:|" * len(names))
    for i in range(args.steps + 1):
        cells = [f"{columns[n][i]['resident_mb']:.0f} | {columns[n][i]['tensor_mb']:.0f}" for n in names]
        print(f"| {i} | " + " | ".join(cells) + " |")
    for n in names:
        first, last = columns[n][1], columns[n][-1]
        growth = (last["tensor_mb"] - first["tensor_mb"]) / max(1, args.steps - 1)
        print(f"{n}: live tensors grew {growth:.1f} MB a step after the first")


if __name__ == "__main__":
    main()
