"""A GRPO step of `envharness train`, lockstep against `--async`, in one run.

Each column is a fresh process running `train()` (real TRL `GRPOTrainer`, a real `textarena` or
`browsergym` server on loopback) for `--steps` steps of `--groups` x `--generations` episodes.
Lockstep plays a step's episodes, then runs its loss pass: the step costs their sum. `--async`
samples the next step's episodes on the policy's own decoder while the loss pass runs
(`integrations/trl/async_rollout.py`): the goal is a step of at most 1.1x the longer of the two.

From each column's `train_log.jsonl`, medians over the steps after the first two (warm-up; the
asynchronous run's first step plays its batch at once): the step's wall time (`time/step_s`),
and in lockstep its rollout (`time/generate_s` + `time/env_s`) and its loss pass
(`time/train_s`: the rest of the step), which runs on every batch here (a batch without signal
would skip it). With the tiny model the loss pass is ~0.01 s and there is
nothing to overlap: measure with `--model embedded`.

    PYTHONPATH=src .venv/bin/python bench/bench_async_step.py --model embedded --env textarena --tasks Wordle-v0
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

MODES = ("lockstep", "async")


def worker(args: argparse.Namespace) -> dict[str, Any]:
    """One training run in `args.mode`; the medians of its steps after the warm-up."""
    import torch

    from envharness.integrations.trl.config import TrainConfig
    from envharness.integrations.trl.training import train

    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix="bench-async-step-") as folder:
        out = Path(folder)
        config = TrainConfig(
            env=args.env,
            tasks=args.tasks,
            model=args.model,
            max_steps=args.steps,
            num_generations=args.generations,
            groups_per_step=args.groups,
            max_turns=args.turns,
            max_completion_length=args.tokens,
            threads=args.threads,
            save_steps=10_000,
            output_dir=str(out),
            async_rollout=args.mode == "async",
            skip_no_signal=False,  # the loss pass runs on every batch, as it does on one with signal
        )
        train(config)
        logs = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    steps = [entry for entry in logs if "time/step_s" in entry][2:]
    if not steps:
        raise SystemExit("no step after the warm-up: give --steps 3 or more")
    median = lambda key: statistics.median(float(e.get(key, 0.0)) for e in steps)  # noqa: E731
    return {
        "step_s": median("time/step_s"),
        "rollout_s": median("time/generate_s") + median("time/env_s"),
        "loss_s": median("time/train_s"),
        "wait_s": median("async/wait_s"),
        "generate_s": median("time/generate_s"),  # with --async: the batch sampled in the background
        "decoder_forward_s": median("decoder/forward_s"),
        "steps": len(steps),
    }


def run_column(mode: str, argv: list[str], timeout: float) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, __file__, "--worker", mode, *argv],
        env={**os.environ, "TRL_EXPERIMENTAL_SILENCE": "1"},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"{mode} worker failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(lines[-1])


def print_table(columns: dict[str, dict[str, Any]]) -> None:
    lock, asy = columns["lockstep"], columns["async"]
    longer = max(lock["rollout_s"], lock["loss_s"])
    print(
        "\n| mode | step (s) | rollout (s) | loss pass (s) | step / longer of the two (lockstep's) | waited for its batch (s) |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    print(f"| lockstep | {lock['step_s']:.3f} | {lock['rollout_s']:.3f} | {lock['loss_s']:.3f} | "
          f"{lock['step_s'] / longer:.2f}x | - |")  # fmt: skip
    print(f"| async (--max-staleness 1) | {asy['step_s']:.3f} | (beside the loss pass) | - | "
          f"{asy['step_s'] / longer:.2f}x | {asy['wait_s']:.3f} |")  # fmt: skip
    print(
        f"\ngeneration of a batch (time/generate_s; its decoder passes, decoder/forward_s): lockstep "
        f"{lock['generate_s']:.3f} ({lock['decoder_forward_s']:.3f}), async, in the background "
        f"{asy['generate_s']:.3f} ({asy['decoder_forward_s']:.3f})"
    )
    print(
        f"\nasync / lockstep step: {asy['step_s'] / lock['step_s']:.2f}x over {lock['steps']} steps each (goal: step <= 1.1x the longer part)"
    )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--env", default="textarena")
    parser.add_argument("--tasks", nargs="+", default=["Wordle-v0"])
    parser.add_argument("--model", default="embedded", help="tiny, embedded, a model directory or a hub id")
    parser.add_argument("--steps", type=int, default=6, help="training steps per run (the first two warm up)")
    parser.add_argument("--groups", type=int, default=2)
    parser.add_argument("--generations", type=int, default=4)
    parser.add_argument("--turns", type=int, default=1)
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument("--worker", choices=MODES, dest="mode", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.mode:
        print(json.dumps(worker(args)))
        return
    passed = [a for a in (argv if argv is not None else sys.argv[1:])]
    columns = {mode: run_column(mode, passed, args.timeout) for mode in MODES}
    print_table(columns)


if __name__ == "__main__":
    main()
