#!/usr/bin/env python3
"""Where an SFT step of 8 demonstrations goes, and what padding costs, side by side in one run.

Scripted demonstrations of MiniWoB tasks (the compact prompt, SmolLM2-135M's tokens, as
`envharness sft` makes them) are trained on for a few steps of 8, from the same weights and the
same data order, in two ways:

- before: one padded forward/backward of 8 (`--micro-batch 8`, what `sft` did before: every
  demonstration is padded to the longest of its batch, and on a CPU a pad costs what a token does);
- after: 8 passes of one demonstration, accumulated (`--micro-batch 1`, the default now): no pad.

TRL averages the loss over the step's model tokens either way (``num_items_in_batch``), so the
step is the same; the table says how far the weights after it are apart, beside how far the step
moved them. Seconds are the trainer's (model loading and demonstrations not counted).

    python bench/bench_sft.py --steps 2       # 2 steps each
    python bench/bench_sft.py                 # 1 step each, about 5 minutes on an idle core
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
#: (name, demonstrations per pass): the old default first, the new one last.
CONFIGURATIONS = (
    ("before: 1 pass of 8, padded (--micro-batch 8)", 8),
    ("after: 8 passes of 1, no padding (--micro-batch 1)", 1),
)
TASKS = ["enter-text", "login-user", "click-checkboxes", "click-button"]


def demonstrations(tokenizer: object, folder: Path, count: int) -> list:
    """`count` scripted demonstrations, the tasks interleaved (as `sft` makes them)."""
    from envharness.cli.sft import prepare
    from envharness.eval.demonstrations import from_records, scripted_records
    from envharness.integrations.trl.sft import SFTRunConfig

    per_task = -(-count // len(TASKS)) + 1
    config = SFTRunConfig(tasks=TASKS, episodes=per_task, max_turns=5, output_dir=str(folder))
    _, demos = prepare(config)
    chosen = from_records(asyncio.run(scripted_records(demos, tokenizer)), tokenizer).demonstrations
    by_task = [[d for d in chosen if d.task == t] for t in TASKS]
    mixed = [d for group in zip(*by_task) for d in group]
    if len(mixed) < count:
        sys.exit(f"only {len(mixed)} demonstrations succeeded, {count} needed")
    return mixed[:count]


def train(rows: list, micro: int, steps: int, folder: Path) -> dict:
    """`run_sft` from the base weights; seconds, loss per step and the weights after."""
    from envharness.integrations.trl.loading import load_model
    from envharness.integrations.trl.sft import SFTRunConfig, run_sft

    model, tokenizer = load_model("embedded")
    config = SFTRunConfig(
        model="embedded",
        output_dir=str(folder),
        batch_size=8,
        micro_batch=micro,
        max_steps=steps,
        threads=None,
    )
    folder.mkdir(parents=True, exist_ok=True)
    result = run_sft(config, rows, model, tokenizer)
    losses = [log["loss"] for log in result["log_history"] if "loss" in log]
    weights = {name: p.detach().clone() for name, p in model.named_parameters()}
    return {"seconds": result["seconds"], "losses": losses, "weights": weights}


def padding(rows: list, batch: int, micro: int) -> tuple[int, int]:
    """(tokens computed, tokens that are demonstrations) over the batches of `micro` in order."""
    computed = real = 0
    for start in range(0, len(rows), micro):
        lengths = [len(r["input_ids"]) for r in rows[start : start + micro]]
        computed += max(lengths) * len(lengths)
        real += sum(lengths)
    return computed, real


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    import torch

    from envharness.integrations.trl.sft import training_rows
    from envharness.models.embedded import load_model as embedded

    torch.set_num_threads(args.threads)
    folder = Path(tempfile.mkdtemp(prefix="bench-sft-"))
    demos = demonstrations(embedded()[1], folder / "demos-run", 8 * args.steps)
    rows = training_rows(demos)
    model_tokens = sum(sum(d.env_mask) for d in demos)
    from envharness.integrations.trl.loss_memory import TrainMemoryError

    runs, refused = {}, {}
    for name, micro in CONFIGURATIONS:
        torch.manual_seed(0)
        try:
            runs[name] = (micro, train(rows, micro, args.steps, folder / f"micro-{micro}"))
        except TrainMemoryError as exc:  # the guard refuses what would be killed for memory
            refused[name] = str(exc).split(":")[0]
    base = embedded()[0]
    start = {n: p.detach() for n, p in base.named_parameters()}
    (before, *_, after) = (r[1] for r in runs.values())
    moved = max(float((before["weights"][n] - start[n]).abs().max()) for n in start)
    apart = max(float((before["weights"][n] - after["weights"][n]).abs().max()) for n in start)
    demos_n = 8 * args.steps
    print(
        f"\nSFT, SmolLM2-135M fp32 on CPU ({args.threads} thread), {args.steps} steps of 8 scripted demonstrations"
    )
    print(f"({', '.join(TASKS)}; {model_tokens} model tokens of {sum(len(r['input_ids']) for r in rows)})\n")
    print("| configuration | s/step | s/demonstration | tokens computed | padding | loss per step |")
    print("|---|---:|---:|---:|---:|---|")
    for name, (micro, run) in runs.items():
        computed, real = padding(rows, 8, micro)
        print(
            f"| {name} | {run['seconds'] / args.steps:.1f} | {run['seconds'] / demos_n:.2f} | {computed} "
            f"| {1 - real / computed:.0%} | {', '.join(f'{x:.4f}' for x in run['losses'])} |"
        )
    for name, why in refused.items():
        print(f"| {name} | refused: {why} | | | | |")
    print(
        f"\nlargest weight change of the steps: {moved:.2e}; largest difference between the first and the last: {apart:.2e}"
    )


if __name__ == "__main__":
    main()
