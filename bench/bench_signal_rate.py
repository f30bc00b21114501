"""Steps with signal per minute: lockstep against `--async` with dynamic sampling, side by side.

Two `envharness train` runs start at once, one torch thread each, with the same model, seed and
settings (by default the mix of `examples/mix_experiment.py`: six MiniWoB tasks and Wordle,
8 episodes a group, one group a step, up to 4 turns of 24 tokens, `--curriculum signal`), for
`--minutes` each. One trains lockstep (every episode of a step rolls out, then its loss pass);
the other adds `--async --max-extra-groups N`: the next step's batch is sampled during the loss
pass, and a group whose rewards all agree is replaced by another of its task, up to N extra
groups a step (`integrations/trl/async_rollout.py`, `dynamic_sampling.py`).

**A step with signal** is an optimizer step whose batch, as it reached the loss pass, held at
least one group whose rewards disagree: TRL's `frac_reward_zero_std` for that step is below 1
(with `--beta 0` it is exactly the step whose loss pass runs, `no_signal_skipped` 0; a step
without one has advantage 0 on every row and changes no weight). Signal steps per minute
divides them by the run's training minutes (from the trainer's start to its last logged step,
`elapsed_s`; loading the model and the servers is left out of both).

With one group a step, a step with signal is a group with signal that reached the loss pass.
From each run's `train_log.jsonl`: steps, steps with signal, groups drawn (rolled out: `dynamic/<task>/drawn`, or
one per group of `curriculum/drawn` in lockstep), kept (in a loss pass) and dropped (replaced:
`dynamic/<task>/dropped`), and the batches dropped as stale (`async/dropped_groups`). The goal
of issue 62: at least 3x the lockstep run's signal steps per minute.

    PYTHONPATH=src PLAYWRIGHT_BROWSERS_PATH=.venv/ms-playwright .venv/bin/python bench/bench_signal_rate.py --minutes 1 --model tiny   # quick
    PYTHONPATH=src PLAYWRIGHT_BROWSERS_PATH=.venv/ms-playwright .venv/bin/python bench/bench_signal_rate.py   # 10 minutes, embedded model
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

BROWSER_TASKS = "click-button,click-checkboxes,click-dialog,focus-text,enter-text,login-user"
GAME = "Wordle-v0"


def envharness() -> list[str]:
    """The `envharness` command of this Python."""
    script = Path(sys.executable).parent / "envharness"
    return [str(script)] if script.exists() else [sys.executable, "-m", "envharness.cli"]


def train_argv(args: argparse.Namespace, out: Path, *, fast: bool) -> list[str]:
    """One run's `envharness train` options: the shared settings, plus the asynchronous ones."""
    mix = ["--mix", f"browsergym:{args.tasks}", *(["--mix", f"textarena:{GAME}"] if args.game else [])]
    shared = [
        "train", "--model", args.model, *mix, "--seed", str(args.seed), "--minutes", str(args.minutes),
        "--num-generations", "8", "--groups-per-step", "1", "--micro-batch", "2", "--lr", "3e-5",
        "--max-turns", "4", "--max-new-tokens", "24", "--curriculum", "signal", "--threads", "1",
        "--save-steps", "100000", "--out", str(out), "--overwrite",
    ]  # fmt: skip
    return shared + (["--async", "--max-extra-groups", str(args.max_extra_groups)] if fast else [])


def run_both(args: argparse.Namespace, folder: Path) -> dict[str, Path]:
    """Both runs at once, each in its own process group (killed whole on the time limit)."""
    env = {**os.environ, "TRL_EXPERIMENTAL_SILENCE": "1"}
    procs: dict[str, subprocess.Popen] = {}
    for mode, fast in (("lockstep", False), ("async", True)):
        argv = [*envharness(), *train_argv(args, folder / mode, fast=fast)]
        print("$", " ".join(argv[1:]), flush=True)
        log = (folder / f"{mode}.log").open("w")
        procs[mode] = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    deadline = time.monotonic() + args.minutes * 60 + args.slack
    try:
        for mode, proc in procs.items():
            rc = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
            if rc:
                raise SystemExit(f"the {mode} run failed (exit {rc}): see {folder / f'{mode}.log'}")
    except subprocess.TimeoutExpired:
        raise SystemExit(
            f"the runs took more than --minutes + {args.slack:g} s; stopped (logs in {folder})"
        ) from None
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    return {mode: folder / mode / "train_log.jsonl" for mode in procs}


def summarize(log: Path) -> dict[str, Any]:
    """One run's steps, steps with signal and groups, from its `train_log.jsonl`."""
    steps = [e for line in log.read_text().splitlines() if "frac_reward_zero_std" in (e := json.loads(line))]
    if not steps:
        raise SystemExit(f"{log}: no training step logged")
    drawn, kept, dropped = Counter(), Counter(), Counter()
    for entry in steps:
        tasks = {k.split("/")[1] for k in entry if k.startswith("dynamic/") and k.endswith("/drawn")}
        if tasks:  # dynamic sampling counted them
            for task in tasks:
                drawn[task] += entry[f"dynamic/{task}/drawn"]
                kept[task] += entry[f"dynamic/{task}/kept"]
                dropped[task] += entry[f"dynamic/{task}/dropped"]
        else:  # every group drawn is the one trained on
            for task in entry.get("curriculum/drawn", []):
                drawn[task] += 1
                kept[task] += 1
    minutes = steps[-1]["elapsed_s"] / 60
    signal_steps = sum(e["frac_reward_zero_std"] < 1 for e in steps)
    return {
        "minutes": minutes,
        "steps": len(steps),
        "signal_steps": signal_steps,
        "signal_per_min": signal_steps / minutes if minutes else 0.0,
        "drawn": dict(drawn),
        "kept": dict(kept),
        "dropped": dict(dropped),
        "without_signal": sum(e.get("dynamic/without_signal", 0) for e in steps),
        "stale_groups": sum(e.get("async/dropped_groups", 0) for e in steps),
        "success": sum(e.get("rewards/reward_success/mean", 0.0) for e in steps) / len(steps),
        # lockstep's parts (one group a step): a group's rollout, and the loss pass of a step with signal
        "rollout_s": statistics.median(
            e.get("time/generate_s", 0.0) + e.get("time/env_s", 0.0) for e in steps
        ),
        "loss_s": statistics.median(
            [e.get("time/train_s", 0.0) for e in steps if e["frac_reward_zero_std"] < 1] or [0.0]
        ),
    }


def best_ratio(lock: dict[str, Any]) -> str:
    """The most asynchronous sampling with dynamic sampling can give over lockstep with these
    parts: lockstep pays R/p + L per step with signal (R a group's rollout, p the share of groups
    with signal, L the loss pass); dynamic sampling plays the same R/p within the step, and
    overlap hides at most the shorter of R/p and L: (R/p + L) / max(R/p, L), at most 2x."""
    if not lock["signal_steps"]:
        return "no step with signal in lockstep: no bound to give"
    rollouts = lock["rollout_s"] * lock["steps"] / lock["signal_steps"]
    loss = lock["loss_s"]
    return (f"lockstep's parts: a group's rollout R = {lock['rollout_s']:.0f} s, a share p = "
            f"{lock['signal_steps']}/{lock['steps']} of groups with signal, a loss pass L = {loss:.0f} s: "
            f"at most {(rollouts + loss) / max(rollouts, loss):.2f}x from overlap, with the halves on "
            "separate hardware (about 1x where they share cores)")  # fmt: skip


def print_table(runs: dict[str, dict[str, Any]], args: argparse.Namespace) -> None:
    lock, fast = runs["lockstep"], runs["async"]
    print(
        "\n| run | minutes | steps | steps with signal | signal steps / min "
        "| groups drawn | kept | dropped (replaced) | stale groups dropped | mean success |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    names = {"lockstep": "lockstep", "async": f"--async --max-extra-groups {args.max_extra_groups}"}
    for mode, r in runs.items():
        print(f"| {names[mode]} | {r['minutes']:.1f} | {r['steps']} | {r['signal_steps']} | "
              f"**{r['signal_per_min']:.2f}** | {sum(r['drawn'].values())} | "
              f"{sum(r['kept'].values())} | {sum(r['dropped'].values())} | {r['stale_groups']} | "
              f"{r['success']:.2f} |")  # fmt: skip
    tasks = sorted(set(lock["drawn"]) | set(fast["drawn"]))
    print("\n| task | lockstep: drawn (= kept) | async: drawn / kept / dropped |")
    print("|---|---:|---:|")
    for task in tasks:
        print(f"| {task} | {lock['drawn'].get(task, 0)} | {fast['drawn'].get(task, 0)} / "
              f"{fast['kept'].get(task, 0)} / {fast['dropped'].get(task, 0)} |")  # fmt: skip
    if lock["signal_per_min"]:
        ratio = f"{fast['signal_per_min'] / lock['signal_per_min']:.2f}x"
    else:  # no step with signal in lockstep: no ratio to give
        ratio = "- (lockstep had no step with signal)"
    print(f"\nsignal steps per minute, async + dynamic sampling / lockstep: **{ratio}** (goal: at least 3x); "
          f"groups the bound left without signal (async): {fast['without_signal']}")  # fmt: skip
    print(best_ratio(lock))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--model", default="embedded", help="tiny, embedded, a model directory (an SFT model) or a hub id"
    )
    parser.add_argument("--minutes", type=float, default=10.0, help="training minutes of each run")
    parser.add_argument("--tasks", default=BROWSER_TASKS, help="the MiniWoB tasks of the mix")
    parser.add_argument("--no-game", dest="game", action="store_false", help=f"leave {GAME} out of the mix")
    parser.add_argument("--max-extra-groups", type=int, default=4, help="the asynchronous run's bound")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--slack", type=float, default=900, help="seconds past --minutes before both runs are stopped"
    )
    parser.add_argument("--out", type=Path, help="keep both runs here (default: a temporary folder)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-signal-rate-") as scratch:
        folder = args.out or Path(scratch)
        folder.mkdir(parents=True, exist_ok=True)
        logs = run_both(args, folder)
        runs = {mode: summarize(log) for mode, log in logs.items()}
        (folder / "summary.json").write_text(json.dumps(runs, indent=1))
        print_table(runs, args)


if __name__ == "__main__":
    main()
