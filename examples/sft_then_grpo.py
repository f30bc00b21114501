#!/usr/bin/env python3
"""Demonstrations, then GRPO, on tasks whose answer changes with every seed (the README's two-stage run).

    python examples/sft_then_grpo.py --out runs/two-stage                      # the README's run
    python examples/sft_then_grpo.py --model tiny --sft-steps 1 --grpo-minutes 0.01 --eval-episodes 1 ...   # a smoke check

The stages are the CLI's own commands, run in this process and printed before they run, so
each can be re-run alone:

1. base: `eval` of the base model on held-out seeds 0..N-1 of the trained tasks and of a
   transfer task no demonstration or training covers, greedy (T = 0) and sampled (T = 1);
2. `sft` on the scripted policy's demonstrations (seeds 1000 up), stopped early (`--sft-steps`)
   so the policy still varies: GRPO learns nothing from groups whose episodes all agree;
3. the same two evals of the SFT model;
4. `train` (GRPO) from the SFT model for `--grpo-minutes` (training pages from seeds in
   [1e6, 2e6)); its train_log.jsonl carries entropy, zero-variance and all-failed groups;
5. the same two evals of the GRPO model;
6. `examples/page_swap.py` on the SFT and GRPO models: does the first action follow the page?

A stage whose output exists is not run again (delete its folder to redo it). `results.md` in
`--out` gathers the table: success per task and stage with 95 % Wilson intervals.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

from envharness.cli import main as envharness

sys.path.insert(0, str(Path(__file__).resolve().parent))
import page_swap  # noqa: E402  (examples/page_swap.py, beside this file)


def run(argv: list[str], done: Path, *, program: str = "envharness") -> None:
    """Run one stage (`envharness ARGV`, or page_swap.py's) unless `done` exists; echo it as a
    command line first. In this process: a Python start with torch is seconds per stage."""
    shown = [program, *argv]
    if done.exists():
        print(f"# done already ({done}): {shlex.join(shown)}", flush=True)
        return
    print(f"$ {shlex.join(shown)}", flush=True)
    code = (envharness if program == "envharness" else page_swap.main)(argv)
    if code:
        raise SystemExit(f"stage failed (exit {code}): {shlex.join(shown)}")


def eval_stage(args: argparse.Namespace, model: str, name: str, temperature: float) -> Path:
    out = args.out / name
    tasks = ",".join([*args.tasks.split(","), *[t for t in args.transfer.split(",") if t]])
    run(
        [
            "eval",
            "--model",
            model,
            "--prompt",
            "compact",
            "--tasks",
            tasks,
            "--episodes",
            str(args.eval_episodes),
            "--max-turns",
            str(args.max_turns),
            "--max-new-tokens",
            str(args.max_new_tokens),
            "--temperature",
            str(temperature),
            "--no-progress",
            "--out",
            str(out),
            *(["--threads", str(args.threads)] if args.threads else []),
        ],
        out / "summary.json",
    )
    return out


def table(args: argparse.Namespace, runs: dict[str, dict[str, Path]]) -> str:
    """Markdown: one row per task and decoding, one column per stage."""

    def cell(summary: Path, task: str) -> str:
        rows = {r["task"]: r for r in json.loads(summary.read_text())["tasks"]}
        r = rows.get(task)
        return (
            "-" if r is None else f"{r['successes']}/{r['episodes']} [{r['ci_low']:.2f}, {r['ci_high']:.2f}]"
        )

    stages = list(runs)
    lines = [
        f"| success, {args.eval_episodes} held-out seeds [95% CI] | " + " | ".join(stages) + " |",
        "|---|" + "---:|" * len(stages),
    ]
    transfer = [t for t in args.transfer.split(",") if t]
    for task in [*args.tasks.split(","), *transfer]:
        for decoding in ("greedy", "sampled"):
            label = f"{task}{' (transfer)' if task in transfer else ''}, {decoding}"
            lines.append(
                f"| {label} | "
                + " | ".join(cell(runs[s][decoding] / "summary.json", task) for s in stages)
                + " |"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="embedded", help="the base model")
    p.add_argument("--tasks", default="enter-text,login-user", help="demonstrated and trained tasks")
    p.add_argument(
        "--transfer", default="enter-password", help="evaluated only: no demonstration, no training"
    )
    p.add_argument("--out", type=Path, default=Path("runs/two-stage"))
    p.add_argument(
        "--demo-episodes", type=int, default=64, help="scripted demonstrations per task (seeds 1000..)"
    )
    p.add_argument(
        "--sft-steps", type=int, default=3, help="SFT optimizer steps (short on purpose: see the docstring)"
    )
    p.add_argument("--sft-lr", type=float, default=5e-5)
    p.add_argument("--sft-batch-size", type=int, default=8)
    p.add_argument("--grpo-minutes", type=float, default=40.0)
    p.add_argument("--grpo-lr", type=float, default=3e-5)
    p.add_argument("--num-generations", type=int, default=8)
    p.add_argument("--max-turns", type=int, default=4)
    p.add_argument("--max-new-tokens", type=int, default=24)
    p.add_argument("--eval-episodes", type=int, default=32, help="held-out seeds 0..N-1 per task")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    threads = ["--threads", str(args.threads)] if args.threads else []
    common = ["--prompt", "compact", "--max-turns", str(args.max_turns)]

    runs = {
        "base": {
            "greedy": eval_stage(args, args.model, "base", 0.0),
            "sampled": eval_stage(args, args.model, "base-sampled", 1.0),
        }
    }
    sft = args.out / "sft"
    run(
        [
            "sft",
            "--model",
            args.model,
            "--tasks",
            args.tasks,
            "--episodes",
            str(args.demo_episodes),
            "--steps",
            str(args.sft_steps),
            "--batch-size",
            str(args.sft_batch_size),
            "--lr",
            str(args.sft_lr),
            *common,
            "--out",
            str(sft),
            *threads,
        ],
        sft / "final" / "config.json",
    )
    runs["SFT"] = {
        "greedy": eval_stage(args, str(sft / "final"), "sft-eval", 0.0),
        "sampled": eval_stage(args, str(sft / "final"), "sft-sampled", 1.0),
    }
    grpo = args.out / "sft-grpo"
    run(
        [
            "train",
            "--model",
            str(sft / "final"),
            "--tasks",
            args.tasks,
            *common,
            "--max-new-tokens",
            str(args.max_new_tokens),
            "--minutes",
            str(args.grpo_minutes),
            "--num-generations",
            str(args.num_generations),
            "--groups-per-step",
            "1",
            "--lr",
            str(args.grpo_lr),
            "--out",
            str(grpo),
            *threads,
        ],
        grpo / "final" / "config.json",
    )
    runs["SFT+GRPO"] = {
        "greedy": eval_stage(args, str(grpo / "final"), "grpo-eval", 0.0),
        "sampled": eval_stage(args, str(grpo / "final"), "grpo-sampled", 1.0),
    }
    for name, model in (("sft", sft / "final"), ("grpo", grpo / "final")):
        swap = args.out / f"page-swap-{name}.json"
        run(
            [
                "--model",
                str(model),
                "--run",
                str(runs["base"]["greedy"]),
                "--tasks",
                args.tasks + ("," + args.transfer if args.transfer else ""),
                "--max-new-tokens",
                str(args.max_new_tokens),
                "--json",
                str(swap),
                *threads,
            ],
            swap,
            program="examples/page_swap.py",
        )
    (args.out / "results.md").write_text(table(args, runs))
    print((args.out / "results.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
