#!/usr/bin/env python3
"""GRPO on a mix of MiniWoB tasks and Wordle, from an SFT model, with and without a curriculum.

    python examples/mix_experiment.py --out runs/mix            # the README's experiment (hours)
    python examples/mix_experiment.py --model tiny --sft-epochs 1 --demo-episodes 2 --minutes 0.2 --seeds 1 ...   # smoke

Stages (each is the CLI's own command, printed before it runs; a stage whose output exists is
skipped and a half-done SFT or eval resumes, so a stopped experiment continues where it was):

1. `sft` from the base model over whole epochs of scripted demonstrations of the trained browser
   tasks (seeds 1000 up), keeping the model at the end of each epoch (`--save-epochs`), then
   greedy `eval` of each of `--sft-epochs` on validation seeds 100..: the SFT model is the epoch
   with the best validation mean (ties: fewer epochs), never a handful of steps;
2. greedy `eval` of the scripted policy, base and SFT on held-out seeds 0..31 of the trained
   tasks, the transfer tasks (never demonstrated, never trained) and Wordle; `sft-stage.md` gets
   stages 1 and 2's table with their times (`--until sft` stops here);
3. `train --mix` from the SFT model, once per arm (`--arm NAME=OPTIONS`; by default one per
   curriculum, signal and uniform) and training seed, `--parallel` runs at a time, each with
   `--eval-every` held-out checks during training, the SFT model's first (`--eval-on-start`);
4. the same greedy `eval` of every run's final model.

`results.md` gets the table (successes per task and model, 95 % Wilson intervals) and
`curves.png` the held-out success of each task during each run.
"""

from __future__ import annotations

import argparse
import collections
import json
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

BROWSER_TASKS = "click-button,click-checkboxes,click-dialog,focus-text,enter-text,login-user"
TRANSFER = "enter-password,login-user-popup"
GAME = "Wordle-v0"


def envharness() -> list[str]:
    """The `envharness` command of this Python (a stage runs as its own process)."""
    script = Path(sys.executable).parent / "envharness"
    return [str(script)] if script.exists() else ["envharness"]


def start(argv: list[str], done: Path, log: Path) -> subprocess.Popen | None:
    """Start `envharness ARGV` (output to `log`) unless `done` exists; echo it first."""
    if done.exists():
        print(f"# done already ({done}): envharness {shlex.join(argv)}", flush=True)
        return None
    print(f"$ envharness {shlex.join(argv)}", flush=True)
    log.parent.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen([*envharness(), *argv], stdout=log.open("w"), stderr=subprocess.STDOUT)


def run_all(
    stages: list[tuple[list[str], Path, Path]], parallel: int, threads: int, even: bool = False
) -> None:
    """Run the stages, `parallel` at a time; after one fails, start no more, let those running
    finish (a run beside it keeps its 30 minutes), then stop naming what failed. The stages that run
    share `threads` torch threads (oversubscribed, torch's threads slow every stage down several
    times); `even`: each gets `threads / parallel` even when fewer are left to run (runs that are
    compared must have had the same). Each finished stage's wall time goes to `stage_times.json`."""
    undone = sum(not done.exists() for _, done, _ in stages)
    each = ["--threads", str(max(1, threads // max(1, parallel if even else min(parallel, undone))))]
    pending, running = [(argv + each, done, log) for argv, done, log in stages], []
    failed: list[str] = []
    while pending or running:
        while pending and len(running) < parallel:
            argv, done, log = pending.pop(0)
            proc = start(argv, done, log)
            if proc is not None:
                running.append((proc, argv, log, time.monotonic()))
        finished = [r for r in running if r[0].poll() is not None]
        if running and not finished:
            time.sleep(1)
        for entry in finished:  # a free slot takes the next stage at once
            running.remove(entry)
            proc, argv, log, started = entry
            if proc.returncode:
                failed.append(
                    f"stage failed (exit {proc.returncode}, see {log}): envharness {shlex.join(argv)}"
                )
                pending = []
                continue
            times = log.parent / "stage_times.json"
            seconds = json.loads(times.read_text()) if times.exists() else {}
            times.write_text(
                json.dumps({**seconds, log.stem: round(time.monotonic() - started, 1)}, indent=1)
            )
    if failed:
        raise SystemExit("\n".join(failed))


def eval_stages(
    args: argparse.Namespace, model: str, name: str, *, seed: int, episodes: int, tasks: str
) -> list:
    """Greedy evals of `model`: the browser tasks, and Wordle unless `tasks` is a validation set."""
    common = ["--model", model, "--temperature", "0", "--max-turns", str(args.max_turns),
              "--max-new-tokens", str(args.max_new_tokens), "--seed", str(seed), "--episodes", str(episodes),
              "--no-progress"]  # fmt: skip
    out = args.out / name
    for folder, count in ((out, len(tasks.split(","))), (args.out / f"{name}-{GAME.lower()}", 1)):
        if (folder / "summary.json").exists() and scored(folder) < count * episodes:
            (folder / "summary.json").unlink()  # episodes lost to a dead server: resume them
    stages = [(["eval", "--prompt", "compact", "--tasks", tasks, *common, *resumed(out), "--out", str(out)],
               out / "summary.json", out.with_suffix(".log"))]  # fmt: skip
    if name.startswith("heldout-") and args.game:
        game = args.out / f"{name}-{GAME.lower()}"
        stages.append((["eval", "--env", "textarena", "--tasks", GAME, *common, *resumed(game), "--out", str(game)],
                       game / "summary.json", game.with_suffix(".log")))  # fmt: skip
    return stages


def scored(folder: Path) -> int:
    """Episodes an eval's summary scored (the ones lost to a dead server are left out of it)."""
    return sum(r["episodes"] for r in success(folder / "summary.json").values())


def resumed(out: Path) -> list[str]:
    """`--resume` for an eval that a stopped experiment left half done (its episodes are kept)."""
    return ["--resume"] if (out / "episodes.jsonl").exists() else []


def success(summary: Path) -> dict[str, dict]:
    """An eval's rows by task (its "all" row left out)."""
    return {r["task"]: r for r in json.loads(summary.read_text())["tasks"] if r["task"] != "all"}


def epoch_models(args: argparse.Namespace) -> dict[int, str]:
    """The SFT run's model at the end of each of `--sft-epochs` (its checkpoints, in step order)."""
    folders = sorted((args.out / "sft").glob("checkpoint-*"), key=lambda f: int(f.name.split("-")[1]))
    if len(folders) < max(args.sft_epochs):
        raise SystemExit(f"the SFT run kept {len(folders)} epoch checkpoints, {max(args.sft_epochs)} asked")
    return {epoch: str(folders[epoch - 1]) for epoch in args.sft_epochs}


def choose_sft(args: argparse.Namespace) -> str:
    """The SFT epoch with the best validation mean over the trained tasks (ties: fewer epochs)."""
    if len(args.sft_epochs) == 1:  # nothing to choose between
        (args.out / "sft-choice.json").write_text(json.dumps({"chosen_epochs": args.sft_epochs[0]}))
        return epoch_models(args)[args.sft_epochs[0]]
    means = {}
    for epoch in args.sft_epochs:
        rows = success(args.out / f"val-sft-epoch-{epoch}" / "summary.json")
        means[epoch] = statistics.mean(r["successes"] / r["episodes"] for r in rows.values())
    chosen = max(args.sft_epochs, key=lambda e: (means[e], -e))
    (args.out / "sft-choice.json").write_text(json.dumps({"validation_mean": means, "chosen_epochs": chosen}))
    print(f"# SFT chosen on validation seeds 100..: {chosen} epochs ({means})", flush=True)
    return epoch_models(args)[chosen]


def table(args: argparse.Namespace, models: list[str]) -> str:
    """Markdown: one row per task, one column per model; then the means."""
    cols = {m: {**success(args.out / f"heldout-{m}" / "summary.json"),
                **(success(args.out / f"heldout-{m}-{GAME.lower()}" / "summary.json") if args.game else {})}
            for m in models}  # fmt: skip
    trained = [*args.tasks.split(","), *([GAME] if args.game else [])]
    transfer = [t for t in args.transfer.split(",") if t]
    lines = ["| greedy success, held-out seeds 0-" f"{args.episodes - 1} [95% CI] | " + " | ".join(models) + " |",
             "|---|" + "---:|" * len(models)]  # fmt: skip
    for task in [*trained, *transfer]:
        label = f"{task}{' (transfer)' if task in transfer else ''}"
        lines.append(f"| {label} | " + " | ".join(
            f"{r['successes']}/{r['episodes']} [{r['ci_low']:.2f}, {r['ci_high']:.2f}]" if (r := cols[m].get(task)) else "-"
            for m in models) + " |")  # fmt: skip
    for name, group in (("mean, trained", trained), ("mean, transfer", transfer)):
        if not group:  # (no transfer tasks)
            continue
        lines.append(f"| **{name}** | " + " | ".join(
            f"{100 * statistics.mean(cols[m][t]['successes'] / cols[m][t]['episodes'] for t in group):.1f} %"
            for m in models) + " |")  # fmt: skip
    return "\n".join(lines) + "\n"


def runs_table(args: argparse.Namespace, runs: list[str]) -> str:
    """Markdown: each GRPO run's steps, the steps whose group disagreed (a loss pass ran), and
    the groups each task was drawn for (its `train_log.jsonl`)."""
    trained = [
        *(f"browsergym:{t}" for t in args.tasks.split(",")),
        *([f"textarena:{GAME}"] if args.game else []),
    ]
    lines = [f"| run | steps in {args.minutes:g} min | steps with signal | extra groups (dynamic sampling) "
             "| stale batches dropped | groups drawn: "
             + ", ".join(t.split(":")[-1] for t in trained) + " |", "|---|---:|---:|---:|---:|---|"]  # fmt: skip
    for run in runs:
        log = args.out / run / "train_log.jsonl"
        steps = [e for line in log.read_text().splitlines() if "curriculum/drawn" in (e := json.loads(line))]
        drawn = collections.Counter(task for e in steps for task in e["curriculum/drawn"])
        signal = sum(e.get("frac_reward_zero_std", 1) < 1 for e in steps)
        extra = sum(e.get("dynamic/extra_groups", 0) for e in steps)
        stale = sum(e.get("async/dropped_groups", 0) for e in steps)
        lines.append(f"| {run} | {len(steps)} | {signal} ({100 * signal / max(1, len(steps)):.0f} %) | {extra} | {stale} | "
                     + ", ".join(str(drawn[t]) for t in trained) + " |")  # fmt: skip
    return "\n".join(lines) + "\n"


def sft_stage(args: argparse.Namespace) -> str:
    """Markdown of stage 1 on its own: each SFT epoch on validation seeds, then scripted, base and
    the chosen SFT model on held-out seeds, and what each part cost (wall time on this machine)."""
    choice = json.loads((args.out / "sft-choice.json").read_text())
    epochs = [int(e) for e in choice.get("validation_mean", {})]  # none: one candidate, no choice
    val = {e: success(args.out / f"val-sft-epoch-{e}" / "summary.json") for e in epochs}
    log = [
        json.loads(line) for line in (args.out / "sft" / "train_log.jsonl").read_text().splitlines() if line
    ]
    at_epoch = {e: next((r for r in log if r.get("epoch", 0) >= e - 1e-6), log[-1]) for e in epochs}
    times = (
        json.loads((args.out / "stage_times.json").read_text())
        if (args.out / "stage_times.json").exists()
        else {}
    )
    lines = [] if not epochs else [f"| validation success, seeds 100-{100 + args.validation_episodes - 1} | "
             + " | ".join(f"{e} epoch{'s' * (e > 1)} (step {at_epoch[e]['step']}, {at_epoch[e]['elapsed_s'] / 60:.0f} min)"
                          for e in epochs) + " |",
             "|---|" + "---:|" * len(epochs)]  # fmt: skip
    for task in args.tasks.split(","):
        lines.append(f"| {task} | " + " | ".join(
            f"{r['successes']}/{r['episodes']}" if (r := val[e].get(task)) else "-" for e in epochs) + " |")  # fmt: skip
    if epochs:
        lines.append("| **mean** | " + " | ".join(
            f"{100 * choice['validation_mean'][str(e)]:.1f} %" for e in epochs) + " |")  # fmt: skip
    lines += ["", f"Chosen: {choice['chosen_epochs']} epoch(s).", ""]
    lines.append(table(args, [*args.baselines, "sft"]).replace(
        "| sft |", f"| SFT ({choice['chosen_epochs']} epoch{'s' * (choice['chosen_epochs'] > 1)}) |", 1))  # fmt: skip
    spent = {
        k: v
        for k, v in times.items()
        if k.startswith(("val-sft", "heldout-base", "heldout-sft", "heldout-scripted"))
    }
    lines.append("Wall time: SFT " + f"{log[-1]['elapsed_s'] / 60:.0f} min ({log[-1]['step']} steps); "
                 + ", ".join(f"{k} {v / 60:.1f} min" for k, v in sorted(spent.items())) + ".")  # fmt: skip
    return "\n".join(lines) + "\n"


def sft_start(args: argparse.Namespace) -> dict[str, float]:
    """The SFT model's greedy success per task on the seeds evaluated during training (0..N-1),
    read off its held-out eval's episodes."""
    from envharness.eval.stats import is_success

    rates: dict[str, list[bool]] = {}
    for folder in (args.out / "heldout-sft", args.out / f"heldout-sft-{GAME.lower()}"):
        path = folder / "episodes.jsonl"
        for line in path.read_text().splitlines() if path.exists() else []:
            record = json.loads(line)
            if record.get("seed") is not None and record["seed"] < args.eval_episodes:
                rates.setdefault(record["task"], []).append(is_success(record))
    return {task: sum(wins) / len(wins) for task, wins in rates.items()}


def plot_curves(args: argparse.Namespace, runs: list[str]) -> Path | None:
    """Held-out success of each task during each run (eval_log.jsonl), one panel per task."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    logs = {}
    for run in runs:
        path = args.out / run / "eval_log.jsonl"
        if path.exists():
            logs[run] = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    tasks = sorted(
        {k.split("/")[1] for entries in logs.values() for e in entries for k in e if k.endswith("/success")}
    )
    tasks = [t for t in tasks if t.split(":")[-1] not in args.curves_skip]
    if not tasks:
        return None
    cols = 3
    fig, axes = plt.subplots((len(tasks) + cols - 1) // cols, cols, figsize=(12, 3 * ((len(tasks) + cols - 1) // cols)),
                             squeeze=False, sharex=True, sharey=True)  # fmt: skip
    start = sft_start(args)
    for ax, task in zip(axes.flat, tasks):
        if task.split(":")[-1] in start:  # where every run starts: the SFT model on the same seeds
            ax.plot([0], [start[task.split(":")[-1]]], "ks", label="SFT (step 0)")
        for run, entries in logs.items():
            style = "-" if "signal" in run else "--"
            ax.plot(
                [e["step"] for e in entries],
                [e.get(f"eval/{task}/success") for e in entries],
                style,
                label=run,
            )
        ax.set_title(task, fontsize=9)
        ax.set_ylim(-0.05, 1.05)
    for ax in list(axes.flat)[len(tasks) :]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    fig.supxlabel("GRPO step")
    fig.supylabel(f"greedy success, {args.eval_episodes} held-out seeds")
    fig.tight_layout()
    path = args.out / "curves.png"
    fig.savefig(path, dpi=90)
    return path


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="embedded")
    p.add_argument("--tasks", default=BROWSER_TASKS, help="trained (and demonstrated) browser tasks")
    p.add_argument("--transfer", default=TRANSFER, help="evaluated only: never demonstrated or trained")
    p.add_argument("--no-game", dest="game", action="store_false", help=f"leave {GAME} out of the mix")
    p.add_argument("--out", type=Path, default=Path("runs/mix"))
    p.add_argument(
        "--sft-epochs",
        type=lambda s: sorted({int(x) for x in s.split(",")}),
        default=[1, 2, 3],
        help="SFT candidates: the model after each of these epochs (one run, the longest)",
    )
    p.add_argument("--demo-episodes", type=int, default=64)
    p.add_argument(
        "--curricula", default="signal,uniform", help="one arm per curriculum, where no --arm is given"
    )
    p.add_argument(
        "--arm",
        dest="arms",
        action="append",
        default=[],
        metavar="NAME=OPTIONS",
        help="a GRPO setting: its name and the train options it adds (e.g. "
        "'async=--curriculum signal --async --max-extra-groups 4 --beta 0.04'); repeat for several",
    )
    p.add_argument(
        "--baselines",
        default="scripted,base",
        help="models evaluated on held-out seeds beside SFT and the runs (scripted, base)",
    )
    p.add_argument("--seeds", default="1,2", help="training seeds, one run per curriculum and seed")
    p.add_argument("--minutes", type=float, default=30.0, help="GRPO wall-clock minutes per run")
    p.add_argument("--parallel", type=int, default=2, help="GRPO runs at a time")
    p.add_argument("--num-generations", type=int, default=8)
    p.add_argument("--micro-batch", type=int, default=2, help="two runs at once must fit in memory")
    p.add_argument("--lr", type=float, default=3e-5)
    p.add_argument("--eval-every", type=int, default=10)
    p.add_argument("--eval-episodes", type=int, default=8)
    p.add_argument("--episodes", type=int, default=32, help="held-out seeds per task in the final table")
    p.add_argument("--validation-episodes", type=int, default=16, help="validation seeds 100.. per task")
    p.add_argument("--max-turns", type=int, default=4)
    p.add_argument("--max-new-tokens", type=int, default=24)
    p.add_argument(
        "--threads", type=int, default=1, help="torch threads of the SFT run, shared by --parallel stages"
    )
    p.add_argument("--until", choices=["sft", "all"], default="all", help="sft: stop after stage 1's table")
    p.add_argument(
        "--curves-skip", type=lambda s: set(s.split(",")), default=set(), help="tasks left out of curves.png"
    )
    args = p.parse_args(argv)
    args.arms = dict(_arm(a) for a in args.arms) or {
        c: ["--curriculum", c] for c in args.curricula.split(",")
    }
    args.baselines = [b for b in args.baselines.split(",") if b]
    return args


def _arm(text: str) -> tuple[str, list[str]]:
    name, sep, options = text.partition("=")
    if not sep or not name:
        raise SystemExit(f"--arm {text!r}: give NAME=OPTIONS")
    return name, shlex.split(options)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    every_task = f"{args.tasks},{args.transfer}".strip(",")

    out = args.out / "sft"
    # a stopped SFT goes on from its last epoch
    resume = ["--resume"] if any(out.glob("checkpoint-*")) else []
    run_all([(["sft", *resume, "--model", args.model, "--tasks", args.tasks, "--episodes", str(args.demo_episodes),
               "--epochs", str(max(args.sft_epochs)), "--save-epochs", "--batch-size", "8", "--lr", "5e-5",
               "--prompt", "compact", "--max-turns", str(args.max_turns), "--out", str(out)],
              out / "final" / "config.json", out.with_suffix(".log"))], 1, args.threads)  # fmt: skip
    run_all([s for epoch, model in epoch_models(args).items() if len(args.sft_epochs) > 1 for s in eval_stages(
        args, model, f"val-sft-epoch-{epoch}", seed=100, episodes=args.validation_episodes, tasks=args.tasks)],
        args.parallel, args.threads)  # fmt: skip
    sft = choose_sft(args)
    baselines = {"base": args.model, "scripted": "scripted"}
    run_all([*eval_stages(args, sft, "heldout-sft", seed=0, episodes=args.episodes, tasks=every_task),
             *(s for b in args.baselines for s in eval_stages(
                 args, baselines[b], f"heldout-{b}", seed=0, episodes=args.episodes, tasks=every_task))],
            args.parallel, args.threads)  # fmt: skip
    stage_one = sft_stage(args)  # stage 1's table, before any GRPO
    (args.out / "sft-stage.md").write_text(stage_one)
    print(stage_one, flush=True)
    if args.until == "sft":
        return 0

    runs, arms = [], []
    for seed in args.seeds.split(","):  # each pair of runs at once: one of each arm
        for arm, options in args.arms.items():
            name = f"grpo-{arm}-{seed}"
            out = args.out / name
            runs.append(name)
            arms.append((["train", "--model", sft, "--mix", f"browsergym:{args.tasks}",
                          *(["--mix", f"textarena:{GAME}"] if args.game else []),
                          *options, "--seed", seed, "--minutes", str(args.minutes),
                          "--num-generations", str(args.num_generations), "--groups-per-step", "1",
                          "--micro-batch", str(args.micro_batch), "--lr", str(args.lr),
                          "--max-turns", str(args.max_turns), "--max-new-tokens", str(args.max_new_tokens),
                          "--eval-every", str(args.eval_every), "--eval-episodes", str(args.eval_episodes),
                          "--eval-on-start", "--eval-tasks", ",".join(f"browsergym:{t}" for t in args.transfer.split(",") if t),
                          "--out", str(out)],
                         out / "final" / "config.json", out.with_suffix(".log")))  # fmt: skip
    run_all(arms, args.parallel, args.threads, even=True)
    run_all([s for name in runs for s in eval_stages(
        args, str(args.out / name / "final"), f"heldout-{name}", seed=0, episodes=args.episodes, tasks=every_task)],
        args.parallel, args.threads)  # fmt: skip

    models = [*args.baselines, "sft", *runs]
    curves = plot_curves(args, runs)
    text = runs_table(args, runs) + "\n" + table(args, models)
    (args.out / "results.md").write_text(
        text + (f"\n![held-out success during training]({curves.name})\n" if curves else "")
    )
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
