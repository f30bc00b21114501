#!/usr/bin/env python3
"""Peak memory of one GRPO loss pass: measured against `loss_memory.loss_pass_bytes`'s estimate.

Each row runs one forward and backward of the embedded model (SmolLM2-135M, fp32, on the CPU)
in a fresh process, as TRL's loss does: left-padded rows, logits of the completion tokens,
log-softmax, backward. The measured figure is the process's peak RSS minus its RSS after
loading the model. The last rows are a GRPO batch of 16 episodes of 700 tokens (4 groups of
4, the size that was killed for memory on this 24 GB machine) in one pass, as `train` did
before, and in passes of one group (`--micro-batch 4`, now the default).

    python bench/bench_loss_memory.py            # about 2 minutes
    python bench/bench_loss_memory.py --quick    # two shapes
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

ONE_PASS = r"""
import json, resource, sys, torch
from envharness.integrations.trl.loading import load_model
rows, width, keep, ckpt = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
model, _ = load_model("embedded")
if ckpt:
    model.gradient_checkpointing_enable()
    model.config.use_cache = False
model.train()
ids = torch.randint(0, 40000, (rows, width))
mask = torch.ones_like(ids)
mask[0, : width // 3] = 0
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
logits = model(input_ids=ids, attention_mask=mask, logits_to_keep=keep + 1).logits[:, :-1, :]
logps = torch.log_softmax(logits.float(), -1).gather(-1, ids[:, -keep:, None]).squeeze(-1)
logps.sum().backward()
print(json.dumps({"measured": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - base}))
"""


def measure(rows: int, width: int, keep: int, checkpointing: bool) -> int:
    out = subprocess.run(
        [sys.executable, "-c", ONE_PASS, str(rows), str(width), str(keep), "1" if checkpointing else "0"],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])["measured"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true")
    args = p.parse_args()
    from envharness.integrations.trl import loss_memory
    from envharness.integrations.trl.loading import load_model

    shape = loss_memory.ModelShape.of(load_model("embedded")[0])
    shapes = [(1, 700, 600, False), (4, 700, 600, False)]
    if not args.quick:
        shapes += [(4, 350, 300, False), (2, 1400, 1200, False), (4, 700, 600, True)]
    gib = 2**30
    print("| loss pass (embedded model, fp32, CPU) | measured peak | estimate | estimate / measured |")
    print("|---|---:|---:|---:|")
    for rows, width, keep, ckpt in shapes:
        measured = measure(rows, width, keep, ckpt)
        estimate = loss_memory.loss_pass_bytes(shape, rows, width, keep, checkpointing=ckpt)
        label = f"{rows} x {width} tokens{', gradient checkpointing' if ckpt else ''}"
        print(
            f"| {label} | {measured / gib:.2f} GiB | {estimate / gib:.2f} GiB | {estimate / measured:.2f} |"
        )
    whole = loss_memory.loss_pass_bytes(shape, 16, 700, 600)
    group = loss_memory.loss_pass_bytes(shape, 4, 700, 600)
    free = loss_memory.free_bytes("cpu") or 0
    print()
    print("| a batch of 16 episodes x 700 tokens | estimate per pass | free now |")
    print("|---|---:|---:|")
    print(f"| one pass (before: the whole batch) | {whole / gib:.1f} GiB | {free / gib:.1f} GiB |")
    print(f"| 4 passes of one group (now) | {group / gib:.1f} GiB | {free / gib:.1f} GiB |")


if __name__ == "__main__":
    main()
